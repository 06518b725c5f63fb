// Watchdog: one thread per process that watches the blocking communication of the ranks living in
// that process (one under MPI, N under LocalCommunicator). Each rank has a slot; a communicator marks
// an operation's start and end in its slot. When an operation has been waiting longer than the
// timeout, the watchdog prints which rank and which operation (name, sequence number, communicator)
// and calls the abort action, which never returns and brings every rank down. It fires at most once.
// A timeout of 0 (or less) disables it: no thread is started. It cannot see a rank that is stuck
// outside communication (that rank's peers time out instead).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace llamatrain::parallel {

class Watchdog {
 public:
  // abort(message): prints nothing itself beyond what it is given, must not return.
  using AbortFn = std::function<void(const std::string& message)>;

  Watchdog(double timeout_s, AbortFn abort);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Adds a slot for a rank of this process (`world_rank` is printed); returns its index.
  int add_slot(int world_rank);
  // The rank in `slot` starts waiting on `what` ("all_reduce #12 on 'dp' ..."); end() clears it.
  // allowance_s > 0: this wait may last that long instead of the timeout (never less than it).
  void begin(int slot, std::string what, double allowance_s = 0);
  void end(int slot);

  double timeout_s() const { return timeout_s_; }
  bool enabled() const { return timeout_s_ > 0; }

 private:
  struct Slot {
    int world_rank = 0;
    bool busy = false;
    std::string what;
    double limit_s = 0;  // this wait's timeout
    std::chrono::steady_clock::time_point since;
  };
  void run();

  const double timeout_s_;
  AbortFn abort_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<Slot> slots_;
  std::thread thread_;
};

// Registers a blocking wait on `what` in a watchdog slot for the scope's lifetime.
// Seconds this thread (a rank) has spent blocked in communication: every WatchdogScope adds its
// duration (nested scopes count once). Per-step logs report its growth as the step's communication
// time, pipeline waits included.
double blocked_seconds();

class WatchdogScope {
 public:
  WatchdogScope(Watchdog* watchdog, int slot, std::string what) : WatchdogScope(watchdog, slot, 0, std::move(what)) {}
  // allowance_s: as Watchdog::begin's.
  WatchdogScope(Watchdog* watchdog, int slot, double allowance_s, std::string what);
  ~WatchdogScope();
  WatchdogScope(const WatchdogScope&) = delete;
  WatchdogScope& operator=(const WatchdogScope&) = delete;

 private:
  Watchdog* watchdog_;
  int slot_;
  double start_s_;
};

}  // namespace llamatrain::parallel
