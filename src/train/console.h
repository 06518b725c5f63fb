// What a training run says as it goes. Console: one line at a time on stdout from rank 0 (the other
// ranks stay quiet; their errors still reach stderr) and, once the run's folder exists, the same lines
// with their UTC time in <log dir>/train_log.txt, appended so that a resumed run continues it.
// IoProgress: a progress bar (obs/progress.h) for long reads and writes of checkpoints and exports;
// small ones print only their one summary line.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "io/safetensors.h"
#include "obs/progress.h"

namespace llamatrain::train {

class Console {
 public:
  explicit Console(bool quiet) : quiet_(quiet) {}
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // From now on every line also goes to `path` (opened for appending); throws Error naming it.
  void open_log(const std::string& path);
  void say(const std::string& line) const;
  // An event line (train/events.h): always in the log file, on stdout unless stdout is a terminal
  // (events_on_stdout()), where the human lines say the same.
  void event(const std::string& line) const;

 private:
  void write(const std::string& line, bool to_stdout) const;
  bool quiet_;
  std::FILE* log_ = nullptr;
};

class IoProgress {
 public:
  IoProgress(const std::string& label, int64_t total_bytes);
  io::BytesDone callback();

 private:
  std::optional<obs::Progress> bar_;
};

}  // namespace llamatrain::train
