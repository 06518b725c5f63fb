// obs/metrics: metrics.jsonl lines round-trip through our reader and through Python's json module
// (key order, int64 steps, doubles exactly, non-finite values as null); appending across writers and
// threads keeps every line whole; an unfinished last line is cut off; bad lines and unopenable files
// are Errors naming file and line; a failed write warns once and never throws.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "core/error.h"
#include "obs/metrics.h"

namespace llamatrain::obs {
namespace {

using llamatrain::testing::TempDir;
using nlohmann::json;
using nlohmann::ordered_json;

TEST(Metrics, LinesRoundTripWithNonFiniteAsNull) {
  TempDir dir;
  const std::string path = dir / "logs/run/metrics.jsonl";  // parents created
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  {
    MetricsWriter m(path);
    m.write(10, {{"loss", 2.3125}, {"lr", 3e-4}, {"grad_norm", 0.1 + 0.2}});
    m.write(11, {{"loss", nan}, {"lr", inf}, {"grad_norm", -inf}});
    ordered_json rec;
    rec["step"] = std::numeric_limits<int64_t>::max();
    rec["event"] = "checkpoint \xff saved";  // invalid UTF-8 is replaced, not thrown
    rec["tokens"] = int64_t(1) << 53;
    m.write(rec);
    EXPECT_EQ(m.error(), "");
  }
  const std::string text = llamatrain::testing::read_file(path);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            R"({"step":10,"loss":2.3125,"lr":0.0003,"grad_norm":0.30000000000000004})");
  EXPECT_NE(text.find(R"({"step":11,"loss":null,"lr":null,"grad_norm":null})"), std::string::npos) << text;
  EXPECT_NE(text.find("checkpoint \xef\xbf\xbd saved"), std::string::npos) << text;

  const std::vector<json> records = read_metrics(path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0]["step"], 10);
  EXPECT_EQ(metric_value(records[0], "grad_norm"), 0.1 + 0.2);  // shortest round-trip digits: exact
  EXPECT_TRUE(std::isnan(metric_value(records[1], "loss")));
  EXPECT_TRUE(std::isnan(metric_value(records[1], "lr")));
  EXPECT_TRUE(std::isnan(metric_value(records[0], "missing")));
  EXPECT_EQ(records[2]["step"].get<int64_t>(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(metric_value(records[2], "tokens"), double(int64_t(1) << 53));
  EXPECT_THROW(metric_value(records[2], "event"), Error);

  // Python's strict JSON parser (no NaN / Infinity literals accepted) reads every line.
  if (!llamatrain::testing::exists(SYSTEM_PYTHON)) GTEST_SKIP() << "no " << SYSTEM_PYTHON;
  std::string out;
  const std::string script =
      "import json,sys\n"
      "def bad(c): raise ValueError('non-standard constant ' + c)\n"
      "rows=[json.loads(l, parse_constant=bad) for l in open(sys.argv[1], encoding='utf-8')]\n"
      "print(len(rows), list(rows[0]), rows[1]['loss'], rows[2]['step'], rows[0]['grad_norm'] == 0.1 + 0.2)\n";
  llamatrain::testing::write_file(dir / "check.py", script);
  ASSERT_EQ(llamatrain::testing::run_capture(fmt::format("{} {} {}", SYSTEM_PYTHON, dir / "check.py", path), &out), 0)
      << out;
  EXPECT_EQ(out, "3 ['step', 'loss', 'lr', 'grad_norm'] None 9223372036854775807 True\n");
}

TEST(Metrics, AppendsAcrossWritersAndThreadsWithWholeLines) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  { MetricsWriter(path).write(1, {{"loss", 1.0}}); }
  {
    MetricsWriter m(path);  // a resumed run appends
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&m, t] {
        for (int i = 0; i < 300; ++i) m.write(i, {{"thread", double(t)}, {"pad", 1.0 / 3.0}});
      });
    for (auto& th : threads) th.join();
  }
  const auto records = read_metrics(path);
  ASSERT_EQ(records.size(), 1u + 4 * 300);
  EXPECT_EQ(records[0]["loss"], 1.0);
  std::vector<int> next(4, 0);
  for (size_t i = 1; i < records.size(); ++i) {
    const int t = int(metric_value(records[i], "thread"));
    EXPECT_EQ(records[i]["step"], next[t]++);
  }
  EXPECT_EQ(next, (std::vector<int>{300, 300, 300, 300}));
}

TEST(Metrics, UnfinishedLastLineIsCutOffOnOpen) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  llamatrain::testing::write_file(path, "{\"step\":1,\"loss\":2.0}\n{\"step\":2,\"lo");
  ::testing::internal::CaptureStderr();
  { MetricsWriter(path).write(2, {{"loss", 1.5}}); }
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("ended in an unfinished line (13 bytes"), std::string::npos) << warning;
  EXPECT_EQ(llamatrain::testing::read_file(path), "{\"step\":1,\"loss\":2.0}\n{\"step\":2,\"loss\":1.5}\n");

  llamatrain::testing::write_file(path, "{\"step\":1");  // no newline at all: nothing to keep
  ::testing::internal::CaptureStderr();
  { MetricsWriter(path).write(3, {}); }
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(llamatrain::testing::read_file(path), "{\"step\":3}\n");
}

TEST(Metrics, BadLineAndMissingFileAreErrorsNamingThem) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  llamatrain::testing::write_file(path, "{\"step\":1}\n[1,2]\n");
  try {
    read_metrics(path);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":2: not a JSON object, got \"[1,2]\""), std::string::npos) << e.what();
  }
  llamatrain::testing::write_file(path, "{\"step\":1}\n{\"step\":\n");
  EXPECT_THROW(read_metrics(path), Error);
  EXPECT_THROW(read_metrics(dir / "absent.jsonl"), Error);

  llamatrain::testing::write_file(dir / "plainfile", "x");
  try {
    MetricsWriter m(dir / "plainfile/metrics.jsonl");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics: cannot create directory " + dir / "plainfile"), std::string::npos)
        << e.what();
  }
  try {
    MetricsWriter m(dir.path());  // a directory
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics: cannot open " + dir.path() + " for appending"), std::string::npos)
        << e.what();
  }
}

TEST(Metrics, FailedWriteWarnsOnceAndNeverThrows) {
  // /dev/full accepts the open and fails every write with ENOSPC: a full disk.
  MetricsWriter m("/dev/full");
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 10; ++i) EXPECT_NO_THROW(m.write(i, {{"loss", 1.0}}));
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(warnings, "warning: metrics: writing /dev/full failed: No space left on device; metrics.jsonl stops "
                      "here, training goes on\n");
  EXPECT_EQ(m.error(), "writing /dev/full failed: No space left on device");
}

}  // namespace
}  // namespace llamatrain::obs
