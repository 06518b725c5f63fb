// obs/progress: the duration / byte / count formats at their rounding edges; with an injected clock
// and sink, plain style prints at most one line per interval plus the final one and never '\r';
// terminal style redraws in place, fits the width and ends with a newline; rates, percentages and
// ETAs are the arithmetic of done, total and elapsed; advance() from many threads loses nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "obs/progress.h"

namespace llamatrain::obs {
namespace {

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0.0s");
  EXPECT_EQ(format_duration(4.24), "4.2s");
  EXPECT_EQ(format_duration(59.94), "59.9s");
  EXPECT_EQ(format_duration(59.96), "1m00s");  // not "60.0s"
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3599.4), "59m59s");
  EXPECT_EQ(format_duration(3599.6), "1h00m");  // not "60m00s"
  EXPECT_EQ(format_duration(3720), "1h02m");
  EXPECT_EQ(format_duration(96000), "26h40m");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::infinity()), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::quiet_NaN()), "?");
}

TEST(Progress, FormatBytesAndCounts) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(999.4), "999 B");
  EXPECT_EQ(format_bytes(999.6), "1.00 KB");
  EXPECT_EQ(format_bytes(1500), "1.50 KB");
  EXPECT_EQ(format_bytes(12.34e6), "12.3 MB");
  EXPECT_EQ(format_bytes(310.2e6), "310 MB");
  EXPECT_EQ(format_bytes(999.7e6), "1.00 GB");
  EXPECT_EQ(format_bytes(2.75e9), "2.75 GB");
  EXPECT_EQ(format_bytes(13.5e12), "13.5 TB");
  EXPECT_EQ(format_bytes(-1), "?");
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(1000), "1000");
  EXPECT_EQ(format_count(9999), "9999");
  EXPECT_EQ(format_count(10000), "10.0k");
  EXPECT_EQ(format_count(35.24), "35.2");
  EXPECT_EQ(format_count(1234.5), "1.23k");
  EXPECT_EQ(format_rate(2), "2.00");
  EXPECT_EQ(format_rate(999.4), "999");
  EXPECT_EQ(format_rate(999.6), "1.00k");
  EXPECT_EQ(format_rate(1600), "1.60k");
  EXPECT_EQ(format_count(45.6e6), "45.6M");
  EXPECT_EQ(format_count(7e9), "7.00G");
}

// A clock the test moves by hand, and a sink that keeps everything.
struct Harness {
  double now = 100.0;
  std::string out;
  std::mutex mu;
  ProgressOptions options(ProgressStyle style, int64_t total, ProgressUnit unit = ProgressUnit::kCount) {
    ProgressOptions o;
    o.label = "loading";
    o.total = total;
    o.unit = unit;
    o.style = style;
    o.plain_interval_s = 10.0;
    o.width = 100;
    o.clock = [this] { return now; };
    o.sink = [this](std::string_view s) {
      std::lock_guard lock(mu);
      out.append(s);
    };
    return o;
  }
};

TEST(Progress, PlainPrintsAtMostEveryIntervalAndNeverCarriageReturn) {
  Harness h;
  {
    Progress p(h.options(ProgressStyle::kPlain, 3'000'000'000, ProgressUnit::kBytes));
    for (int i = 1; i <= 300; ++i) {  // 30 s of work in 0.1 s slices, 10 MB each
      h.now = 100.0 + i / 10.0;
      p.advance(10'000'000);
    }
    EXPECT_EQ(p.done(), 3'000'000'000);
  }
  EXPECT_EQ(h.out.find('\r'), std::string::npos);
  EXPECT_EQ(h.out.find('\x1b'), std::string::npos);
  // at 10 s, 20 s, 30 s, then the final line
  EXPECT_EQ(h.out, "loading: 33% (1.00 GB/3.00 GB), 100 MB/s, elapsed 10.0s, ETA 20.0s\n"
                   "loading: 66% (2.00 GB/3.00 GB), 100 MB/s, elapsed 20.0s, ETA 10.0s\n"
                   "loading: 100% (3.00 GB/3.00 GB), 100 MB/s, elapsed 30.0s, ETA 0.0s\n"
                   "loading: done, 3.00 GB in 30.0s (100 MB/s)\n");
}

TEST(Progress, ShortWorkPrintsOnlyTheFinalLineAndFinishOnce) {
  Harness h;
  Progress p(h.options(ProgressStyle::kPlain, 0));
  p.advance(3);
  h.now += 2.5;
  p.advance(2);
  p.finish();
  p.finish();
  EXPECT_EQ(h.out, "loading: done, 5 in 2.5s (2.00/s)\n");
  EXPECT_EQ(p.status_line(false), "loading: 5, 2.00/s, elapsed 2.5s");
}

TEST(Progress, CountsWithNounAndUnknownEta) {
  Harness h;
  ProgressOptions o = h.options(ProgressStyle::kPlain, 291);
  o.noun = "tensors";
  Progress p(std::move(o));
  EXPECT_EQ(p.status_line(false), "loading: 0% (0/291 tensors), 0.00 tensors/s, elapsed 0.0s, ETA ?");
  h.now += 4;
  p.advance(120);
  EXPECT_EQ(p.status_line(false), "loading: 41% (120/291 tensors), 30.0 tensors/s, elapsed 4.0s, ETA 5.7s");
  p.advance(171);
  EXPECT_EQ(p.status_line(true), "loading: done, 291 tensors in 4.0s (72.8 tensors/s)");
}

TEST(Progress, TerminalRedrawsInPlaceWithinTheWidth) {
  Harness h;
  {
    ProgressOptions o = h.options(ProgressStyle::kTerminal, 1000);
    o.redraw_interval_s = 0.125;
    Progress p(std::move(o));
    for (int i = 1; i <= 10; ++i) {
      h.now = 100.0 + 0.0625 * i;  // exact binary times; draws every other advance
      p.advance(100);
    }
  }
  std::vector<std::string> frames;
  for (size_t pos = 0; (pos = h.out.find('\r', pos)) != std::string::npos; ++pos) {
    const size_t end = h.out.find('\r', pos + 1);
    frames.push_back(h.out.substr(pos + 1, end == std::string::npos ? std::string::npos : end - pos - 1));
  }
  ASSERT_EQ(frames.size(), 6u) << h.out;  // every 0.125 s and the final line
  EXPECT_EQ(frames[0],
            "loading [######........................] 20% (200/1000), 1.60k/s, elapsed 0.1s, ETA 0.5s\x1b[K");
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    EXPECT_EQ(frames[i].find('\n'), std::string::npos);
    EXPECT_LE(frames[i].size() - 3, 99u) << frames[i];  // width 100 less one, escape excluded
  }
  EXPECT_EQ(frames.back(), "loading: done, 1000 in 0.6s (1.60k/s)\x1b[K\n");
  EXPECT_EQ(h.out.front(), '\r');
}

TEST(Progress, TerminalDropsTheBarThenTruncatesWhenNarrow) {
  Harness h;
  ProgressOptions o = h.options(ProgressStyle::kTerminal, 1000);
  o.width = 40;
  Progress p(std::move(o));
  h.now += 1;
  p.advance(500);
  const std::string drawn = h.out;
  ASSERT_FALSE(drawn.empty());
  EXPECT_EQ(drawn, "\rloading: 50% (500/1000), 500/s, elapsed\x1b[K");  // 39 columns, no bar
  h.out.clear();
  p.finish();
  EXPECT_EQ(h.out.back(), '\n');
}

TEST(Progress, OffPrintsNothing) {
  Harness h;
  {
    Progress p(h.options(ProgressStyle::kOff, 10));
    h.now += 100;
    p.advance(10);
  }
  EXPECT_EQ(h.out, "");
}

TEST(Progress, ConcurrentAdvanceLosesNothing) {
  Harness h;
  ProgressOptions o = h.options(ProgressStyle::kPlain, 8 * 100000);
  std::atomic<int64_t> ticks{0};
  o.clock = [&ticks] { return double(ticks.fetch_add(1)) * 1e-4; };  // advances with every read
  o.plain_interval_s = 1.0;
  Progress p(std::move(o));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&p] {
      for (int i = 0; i < 100000; ++i) p.advance(1);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(p.done(), 800000);
  p.finish();
  // Every line whole (one sink call per line), percentages never going down.
  size_t lines = 0;
  int last_pct = -1;
  for (size_t pos = 0, end; (end = h.out.find('\n', pos)) != std::string::npos; pos = end + 1) {
    const std::string line = h.out.substr(pos, end - pos);
    ASSERT_TRUE(line.starts_with("loading: ")) << line;
    if (line.starts_with("loading: done")) continue;
    const int pct = std::stoi(line.substr(9));
    EXPECT_GE(pct, last_pct) << line;
    last_pct = pct;
    ++lines;
  }
  EXPECT_GT(lines, 10u);
  EXPECT_NE(h.out.find("loading: done, 800k in"), std::string::npos) << h.out.substr(h.out.size() - 200);
}

}  // namespace
}  // namespace llamatrain::obs
