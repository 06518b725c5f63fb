// CHECK failure reporting: prints file, line, rank and message to stderr, then aborts.
#include "core/error.h"

#include <cstdlib>

namespace llamatrain {

int& check_rank() {
  static int rank = 0;
  return rank;
}

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "[rank %d] CHECK failed at %s:%d: %s%s%s\n", check_rank(), file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace llamatrain
