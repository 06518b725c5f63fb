// Errors. A user's mistake (file, config, data, checkpoint) throws llamatrain::Error whose message
// reads "what, got X, expected Y" followed by "hint: ..."; only src/cli/ catches it. Internal
// invariants use CHECK(cond, fmt...), which stays on in release builds and aborts the process
// (and, once MPI is wired, every rank) with file, line and rank.
#pragma once

#include <cstdio>
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace llamatrain {

// code: the failure's kind where the thrower knows it better than its caller, one of the stable names
// of the trainer's error event (docs/training.md: "data", "disk_full", "nonfinite", ...); "" leaves
// the kind to the caller's context (the trainer names it by the step that failed).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, const char* code = "") : std::runtime_error(message), code_(code) {}
  const char* code() const { return code_; }

 private:
  const char* code_;
};

// Throws Error with a fmt::format message. Use for every user-facing failure.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}
// The same with the failure's kind (Error::code).
template <typename... Args>
[[noreturn]] void fail_as(const char* code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...), code);
}

// Rank printed by CHECK failures; set by the parallel runtime (0 in a single process).
int& check_rank();
// Called by a CHECK failure after printing, instead of std::abort, when set: the parallel runtime
// installs one that brings every rank of the job down (MPI_Abort). Must not return.
using CheckAbortHook = void (*)();
CheckAbortHook& check_abort_hook();

[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace llamatrain

#define CHECK(cond, ...)                                                                                  \
  do {                                                                                                    \
    if (!(cond)) [[unlikely]]                                                                             \
      ::llamatrain::check_failed(__FILE__, __LINE__, #cond, ::llamatrain::detail_check_msg(__VA_ARGS__)); \
  } while (0)

namespace llamatrain {
inline std::string detail_check_msg() { return {}; }
template <typename... Args>
std::string detail_check_msg(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
}  // namespace llamatrain
