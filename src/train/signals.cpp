// StopSignalScope (train/signals.h): async-signal-safe handler state.
#include "train/signals.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <ctime>

#include "core/file.h"

namespace llamatrain::train {

namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<int64_t> g_stop_signal_ms{0};
std::atomic<bool> g_release_output_on_stop{false};

int64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

extern "C" void on_stop_signal(int sig) {
  const int64_t t = monotonic_ms();
  if (g_stop_signal.exchange(sig) != 0) {
    if (t - g_stop_signal_ms.load() < 2000) return;
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop_signal_ms = t;
  if (g_release_output_on_stop)
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
      const int flags = fcntl(fd, F_GETFL);
      if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    }
}

// True when fd is not a file: under a launcher that is its forwarding pipe, socket or pseudo-terminal
// (mpirun gives each rank a pty of its own), which nobody else writes to.
bool is_forwarded_output(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode);
}

}  // namespace

StopSignalScope::StopSignalScope(bool multi_rank) {
  install_temporary_cleanup_handlers();  // ours replace them for the loop, and stay
  g_stop_signal = 0;
  g_release_output_on_stop = multi_rank && is_forwarded_output(STDOUT_FILENO) && is_forwarded_output(STDERR_FILENO);
  old_term_ = std::signal(SIGTERM, on_stop_signal);
  old_int_ = std::signal(SIGINT, on_stop_signal);
}

StopSignalScope::~StopSignalScope() {
  std::signal(SIGTERM, old_term_);
  std::signal(SIGINT, old_int_);
  g_release_output_on_stop = false;
}

int stop_signal() { return g_stop_signal.load(); }

}  // namespace llamatrain::train
