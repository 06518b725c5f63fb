// Watchdog: the watching thread wakes a few times per timeout, finds the longest-waiting slot and,
// past the timeout, hands its message to the abort action (which does not return).
#include "parallel/watchdog.h"

#include <chrono>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace llamatrain::parallel {

Watchdog::Watchdog(double timeout_s, AbortFn abort) : timeout_s_(timeout_s), abort_(std::move(abort)) {
  CHECK(abort_, "watchdog without an abort action");
  if (enabled()) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int Watchdog::add_slot(int world_rank) {
  std::lock_guard lock(mutex_);
  Slot slot;
  slot.world_rank = world_rank;
  slots_.push_back(std::move(slot));
  return int(slots_.size()) - 1;
}

void Watchdog::begin(int slot, std::string what, double allowance_s) {
  if (!enabled()) return;
  std::lock_guard lock(mutex_);
  Slot& s = slots_.at(size_t(slot));
  s.busy = true;
  s.what = std::move(what);
  s.limit_s = std::max(timeout_s_, allowance_s);
  s.since = std::chrono::steady_clock::now();
}

void Watchdog::end(int slot) {
  if (!enabled()) return;
  std::lock_guard lock(mutex_);
  slots_.at(size_t(slot)).busy = false;
}

void Watchdog::run() {
  using namespace std::chrono;
  // Checking 4 times per timeout (at most once a second) bounds the detection delay by 1.25x.
  const auto period = duration_cast<steady_clock::duration>(duration<double>(std::min(timeout_s_ / 4, 1.0)));
  std::unique_lock lock(mutex_);
  auto last_wake = steady_clock::now();
  while (!stop_) {
    wake_.wait_for(lock, period, [this] { return stop_; });
    if (stop_) break;
    const auto now = steady_clock::now();
    // Woken far later than asked: this process itself was frozen (SIGSTOP, a debugger, a paused
    // machine). Its waits did not run meanwhile, so the frozen time does not count against them: the
    // peers that waited for it are the ones to report.
    const auto gap = now - last_wake;
    last_wake = now;
    if (gap > 2 * period + seconds(1))
      for (Slot& s : slots_)
        if (s.busy) s.since += gap - period;
    const Slot* late = nullptr;
    for (const Slot& s : slots_)
      if (s.busy && duration<double>(now - s.since).count() > s.limit_s && (!late || s.since < late->since)) late = &s;
    if (!late) continue;
    const bool long_wait = late->limit_s > timeout_s_;
    const std::string message = fmt::format(
        "[rank {}] watchdog: {} has not completed after {:.1f} s\nhint: a rank of that communicator has not joined "
        "this operation: it is stuck elsewhere, has died, or issued its operations in another order (every rank "
        "printing this line is waiting); if the operation is legitimately this slow, raise {} (seconds, now {:g}; "
        "LLAMATRAIN_WATCHDOG_TIMEOUT=0 disables the watchdog)",
        late->world_rank, late->what, duration<double>(now - late->since).count(),
        long_wait ? "LLAMATRAIN_WATCHDOG_LONG_TIMEOUT" : "LLAMATRAIN_WATCHDOG_TIMEOUT", late->limit_s);
    lock.unlock();
    abort_(message);
    std::abort();  // an abort action never returns; this line only guards that contract
  }
}

namespace {
thread_local double t_blocked_s = 0;
thread_local int t_scope_depth = 0;
double steady_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

double blocked_seconds() { return t_blocked_s; }

WatchdogScope::WatchdogScope(Watchdog* watchdog, int slot, double allowance_s, std::string what)
    : watchdog_(watchdog), slot_(slot), start_s_(t_scope_depth++ == 0 ? steady_s() : -1) {
  watchdog_->begin(slot_, std::move(what), allowance_s);
}

WatchdogScope::~WatchdogScope() {
  watchdog_->end(slot_);
  if (--t_scope_depth == 0 && start_s_ >= 0) t_blocked_s += steady_s() - start_s_;
}

}  // namespace llamatrain::parallel
