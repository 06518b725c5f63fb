// Progress of long work (loading a checkpoint, building indices, exporting, preprocessing): done /
// total, rate, elapsed and ETA. On a terminal, one bar redrawn in place with '\r' (at most 10 times a
// second); anywhere else (log files, CI) a plain line at most every `plain_interval_s` and one at the
// end, never '\r' or escape codes. advance() is thread-safe and cheap (an atomic add and a clock
// read); whichever thread is due draws. Clock, output and terminal width can be injected for tests.
// Also the formatting helpers used in every console line: durations, byte sizes and counts.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace llamatrain::obs {

// "4.2s", "59.9s", "3m05s", "1h02m", "26h40m"; "?" for a negative or non-finite value.
std::string format_duration(double seconds);
// Decimal units, three significant digits: "512 B", "1.50 KB", "12.3 MB", "310 MB", "2.75 GB", "1.20 TB".
std::string format_bytes(double bytes);
// Whole numbers below 10000 exactly ("7", "1000"); anything else as format_rate does ("12.3k").
std::string format_count(double n);
// Three significant digits with k / M / G / T: "2.00", "35.2", "1.60k", "45.6M".
std::string format_rate(double n);

enum class ProgressUnit { kCount, kBytes };
enum class ProgressStyle { kAuto, kTerminal, kPlain, kOff };  // kAuto: kTerminal iff stderr is a tty

struct ProgressOptions {
  std::string label;  // "loading checkpoint"
  int64_t total = 0;  // 0 when unknown: no percentage, no ETA
  ProgressUnit unit = ProgressUnit::kCount;
  std::string noun;  // for counts: "tensors" gives "120/291 tensors, 35.2 tensors/s"
  ProgressStyle style = ProgressStyle::kAuto;
  double plain_interval_s = 10.0;              // the least time between two plain lines
  double redraw_interval_s = 0.1;              // the least time between two terminal redraws
  int width = 0;                               // terminal columns; 0: ask the terminal (80 if it won't say)
  std::function<double()> clock;               // seconds, monotonic, callable from any thread; default: steady_clock
  std::function<void(std::string_view)> sink;  // gets each line or frame whole, one call at a time; default: stderr
};

class Progress {
 public:
  explicit Progress(ProgressOptions options);
  // Calls finish().
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Adds n units of work done. Thread-safe; draws when the interval has passed.
  void advance(int64_t n);
  // Draws the final line ("done, 2.75 GB in 8.9s (310 MB/s)") once; later calls do nothing.
  void finish();

  int64_t done() const { return done_.load(std::memory_order_relaxed); }
  // The line a plain-style draw would print now (no newline).
  std::string status_line(bool final_line);

 private:
  std::string with_unit(const std::string& number) const;
  void draw(bool final_line);

  ProgressOptions o_;
  ProgressStyle style_;
  double start_;
  std::atomic<int64_t> done_{0};
  std::atomic<double> next_draw_;
  std::mutex draw_mu_;
  bool finished_ = false;  // guarded by draw_mu_
};

}  // namespace llamatrain::obs
