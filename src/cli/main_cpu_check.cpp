// The llamatrain binary's first check, before any other code of the program runs: the portable build
// is compiled for x86-64-v3 (AVX2, FMA, BMI1/2, F16C, MOVBE), and on an older CPU its first such
// instruction would end the process with SIGILL and no word. This file alone is compiled for plain
// x86-64 (CMakeLists.txt), so its check runs on any x86-64 CPU and says what is missing. Static
// constructors of priority 101 run before every default one of the program.
#include <unistd.h>

#include <cstring>

namespace {

#if defined(LLAMATRAIN_REQUIRE_X86_64_V3)
__attribute__((constructor(101))) void require_x86_64_v3() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v3")) return;
  const char* message =
      "error: this CPU lacks the x86-64-v3 instructions (AVX2, FMA, BMI1/2) this llamatrain build needs\n"
      "hint: build llamatrain on this machine with cmake -DLLAMATRAIN_NATIVE=ON (compiled for this CPU only)\n";
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, message, std::strlen(message));
  _exit(1);
}
#endif

}  // namespace
