// Progress lines and bars, and the duration / size / count formatting they share (see progress.h).
#include "obs/progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace llamatrain::obs {

namespace {

// x in [0, 999.5) with three significant digits ("1.23", "12.3", "123").
std::string sig3(double x) {
  if (x < 9.995) return fmt::format("{:.2f}", x);
  if (x < 99.95) return fmt::format("{:.1f}", x);
  return fmt::format("{:.0f}", x);
}

// x >= 1000 scaled by powers of 1000 until it shows as three significant digits below 1000.
std::string scaled(double x, const char* const* units, int n_units, const char* sep) {
  int i = 0;
  while (x >= 999.5 && i + 1 < n_units) {
    x /= 1000.0;
    ++i;
  }
  return sig3(x) + sep + units[i];
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int terminal_columns() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 59.95) return fmt::format("{:.1f}s", seconds);
  const int64_t s = std::llround(seconds);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  const int64_t m = std::llround(seconds / 60.0);
  return fmt::format("{}h{:02d}m", m / 60, m % 60);
}

std::string format_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  if (!std::isfinite(bytes) || bytes < 0) return "?";
  if (bytes < 999.5) return fmt::format("{:.0f} B", bytes);
  return scaled(bytes, kUnits, 7, " ");
}

std::string format_count(double n) {
  if (!std::isfinite(n) || n < 0) return "?";
  if (n < 9999.5 && n == std::floor(n)) return fmt::format("{:.0f}", n);
  return format_rate(n);
}

std::string format_rate(double n) {
  static const char* const kUnits[] = {"", "k", "M", "G", "T", "P", "E"};
  if (!std::isfinite(n) || n < 0) return "?";
  return scaled(n, kUnits, 7, "");
}

Progress::Progress(ProgressOptions options) : o_(std::move(options)), style_(o_.style) {
  if (style_ == ProgressStyle::kAuto) {
    const char* term = std::getenv("TERM");
    const bool dumb = term != nullptr && std::strcmp(term, "dumb") == 0;
    style_ = ::isatty(STDERR_FILENO) && !dumb ? ProgressStyle::kTerminal : ProgressStyle::kPlain;
  }
  if (!o_.clock) o_.clock = steady_seconds;
  if (!o_.sink)
    o_.sink = [](std::string_view s) {
      std::fwrite(s.data(), 1, s.size(), stderr);
      std::fflush(stderr);
    };
  if (o_.width <= 0) o_.width = style_ == ProgressStyle::kTerminal ? terminal_columns() : 80;
  start_ = o_.clock();
  next_draw_ = start_ + (style_ == ProgressStyle::kTerminal ? o_.redraw_interval_s : o_.plain_interval_s);
}

Progress::~Progress() { finish(); }

void Progress::advance(int64_t n) {
  done_.fetch_add(n, std::memory_order_relaxed);
  if (style_ == ProgressStyle::kOff) return;
  if (o_.clock() < next_draw_.load(std::memory_order_relaxed)) return;
  // One thread draws; the others go back to work instead of queueing behind it.
  std::unique_lock lock(draw_mu_, std::try_to_lock);
  if (!lock.owns_lock() || finished_) return;
  const double now = o_.clock();
  if (now < next_draw_.load(std::memory_order_relaxed)) return;
  next_draw_ = now + (style_ == ProgressStyle::kTerminal ? o_.redraw_interval_s : o_.plain_interval_s);
  draw(false);
}

void Progress::finish() {
  std::lock_guard lock(draw_mu_);
  if (finished_) return;
  finished_ = true;
  if (style_ != ProgressStyle::kOff) draw(true);
}

std::string Progress::with_unit(const std::string& number) const {
  return o_.noun.empty() ? number : number + " " + o_.noun;
}

std::string Progress::status_line(bool final_line) {
  const double elapsed = std::max(0.0, o_.clock() - start_);
  const auto done = double(this->done());
  const double rate = elapsed > 0 ? done / elapsed : 0.0;
  const bool bytes = o_.unit == ProgressUnit::kBytes;
  const std::string done_text = bytes ? format_bytes(done) : format_count(done);
  const std::string rate_text = (bytes ? format_bytes(rate) : with_unit(format_rate(rate))) + "/s";
  if (final_line)
    return fmt::format("{}: done, {} in {} ({})", o_.label, bytes ? done_text : with_unit(done_text),
                       format_duration(elapsed), rate_text);
  if (o_.total <= 0)
    return fmt::format("{}: {}, {}, elapsed {}", o_.label, bytes ? done_text : with_unit(done_text), rate_text,
                       format_duration(elapsed));
  const double total = double(o_.total);
  const int pct = int(std::clamp(100.0 * done / total, 0.0, 100.0));  // floor: 100% only when done
  const std::string total_text = bytes ? format_bytes(total) : with_unit(format_count(total));
  const double eta = done > 0 ? elapsed * std::max(0.0, total - done) / done : -1.0;
  return fmt::format("{}: {}% ({}/{}), {}, elapsed {}, ETA {}", o_.label, pct, done_text, total_text, rate_text,
                     format_duration(elapsed), format_duration(eta));
}

void Progress::draw(bool final_line) {
  std::string line = status_line(final_line);
  if (style_ == ProgressStyle::kPlain) {
    o_.sink(line + "\n");
    return;
  }
  // Terminal: "label [#####.....] 42% (...)" fitted to the width (a wrapped line would break '\r').
  const size_t columns = size_t(std::max(o_.width - 1, 10));
  if (!final_line && o_.total > 0) {
    const std::string rest = line.substr(o_.label.size() + 2);
    const int bar = int(std::min<size_t>(30, columns - std::min(columns, o_.label.size() + rest.size() + 4)));
    if (bar >= 5) {
      const int filled = int(std::clamp(double(done()) / double(o_.total), 0.0, 1.0) * bar);
      line = fmt::format("{} [{}{}] {}", o_.label, std::string(filled, '#'), std::string(bar - filled, '.'), rest);
    }
  }
  if (line.size() > columns) line.resize(columns);
  o_.sink("\r" + line + "\x1b[K" + (final_line ? "\n" : ""));
}

}  // namespace llamatrain::obs
