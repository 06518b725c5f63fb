// SIGTERM (SLURM preemption, `scancel`) and SIGINT (Ctrl-C) during training: the handler only records
// the signal; the loop saves a checkpoint and stops after the current step. A second signal at least
// 2 s after the first stops at once; one sooner is the same request delivered twice (the launcher
// and the scheduler both signal the ranks). Under a multi-rank launcher a signal also ends the
// launcher's output forwarding: a rank writing to it would block forever and never save, so on a stop
// signal such output turns non-blocking (a line the launcher no longer reads is dropped; train_log.txt
// keeps it). Signal handlers can only reach process-wide state, so the state lives in this file.
#pragma once

namespace llamatrain::train {

// Installs the handlers for its lifetime (restoring the previous ones after).
class StopSignalScope {
 public:
  explicit StopSignalScope(bool multi_rank);
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  using Handler = void (*)(int);
  Handler old_term_, old_int_;
};

// The signal received since the scope began (0 if none).
int stop_signal();

}  // namespace llamatrain::train
