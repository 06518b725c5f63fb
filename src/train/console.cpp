// Console and IoProgress (train/console.h).
#include "train/console.h"

#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "train/events.h"

namespace llamatrain::train {

Console::~Console() {
  if (log_) std::fclose(log_);
}

void Console::open_log(const std::string& path) {
  if (quiet_) return;
  log_ = std::fopen(path.c_str(), "a");
  if (!log_) fail("cannot write {}: {}", path, std::strerror(errno));
}

void Console::say(const std::string& line) const { write(line, true); }

void Console::event(const std::string& line) const { write(line, events_on_stdout()); }

void Console::write(const std::string& line, bool to_stdout) const {
  if (quiet_) return;
  if (to_stdout) {
    std::fputs(line.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  if (log_) {
    std::fprintf(log_, "%s\n", obs::stamped_line(line).c_str());
    std::fflush(log_);
  }
}

IoProgress::IoProgress(const std::string& label, int64_t total_bytes) {
  if (total_bytes < (256 << 20)) return;
  obs::ProgressOptions o;
  o.label = label;
  o.total = total_bytes;
  o.unit = obs::ProgressUnit::kBytes;
  bar_.emplace(o);
}

io::BytesDone IoProgress::callback() {
  if (!bar_) return {};
  return [this](int64_t n) { bar_->advance(n); };
}

}  // namespace llamatrain::train
