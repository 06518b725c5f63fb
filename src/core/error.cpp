// CHECK failure reporting: prints file, line, rank and message to stderr, then aborts (every rank of
// the job, through the hook the parallel runtime installs).
#include "core/error.h"

#include <cstdlib>

namespace llamatrain {

int& check_rank() {
  static int rank = 0;
  return rank;
}

CheckAbortHook& check_abort_hook() {
  static CheckAbortHook hook = nullptr;
  return hook;
}

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "[rank %d] CHECK failed at %s:%d: %s%s%s\n", check_rank(), file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  if (CheckAbortHook hook = check_abort_hook()) hook();
  std::abort();
}

}  // namespace llamatrain
