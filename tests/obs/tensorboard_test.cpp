// obs/tensorboard: CRC32C against published vectors and a bitwise reference; the framed records of
// docs/formats.md 6.4 byte for byte; a file the writer produced (many scalars, text, awkward steps, NaN
// and infinities, unicode and long tags, several threads) read back by an independent Python reader
// (tests/obs/read_tfevents.py: its own CRC and wire parser) and by Google's protobuf runtime; file
// naming and ordering; and the failure policy (bad directory = Error, failed write = one warning).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "core/error.h"
#include "core/crc32c.h"
#include "obs/tensorboard.h"

namespace llamatrain::obs {
namespace {

using llamatrain::testing::TempDir;
using nlohmann::json;

std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(char(b));
  return s;
}

std::string hex(std::string_view s) {
  std::string out;
  for (unsigned char c : s) out += fmt::format("{:02x} ", c);
  return out;
}

// Bit-at-a-time CRC32C straight from the definition: the oracle for the hardware path.
uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

std::string float_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return fmt::format("{:08x}", b);
}

std::string double_bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  return fmt::format("{:016x}", b);
}

// Runs read_tfevents.py on `file`; returns its exit status and its records (one JSON per line).
int read_with_python(const std::string& file, const std::string& flags, std::vector<json>* records,
                     std::string* output) {
  const std::string cmd = fmt::format("{} {} {} {}", SYSTEM_PYTHON,
                                      llamatrain::testing::source_path("tests/obs/read_tfevents.py"), file, flags);
  const int status = llamatrain::testing::run_capture(cmd, output);
  records->clear();
  std::istringstream lines(*output);
  for (std::string line; std::getline(lines, line);) {
    json j = json::parse(line, nullptr, false);
    if (j.is_object()) records->push_back(std::move(j));
  }
  return status;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(TensorBoard, Crc32cKnownVectors) {
  ASSERT_TRUE(crc32c_supported()) << "this CPU lacks SSE4.2";
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of ones, ascending 0..31, descending 31..0
  uint8_t buf[32];
  std::memset(buf, 0, 32);
  EXPECT_EQ(crc32c(buf, 32), 0x8A9136AAu);
  std::memset(buf, 0xFF, 32);
  EXPECT_EQ(crc32c(buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = uint8_t(i);
  EXPECT_EQ(crc32c(buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = uint8_t(31 - i);
  EXPECT_EQ(crc32c(buf, 32), 0x113FDB5Cu);
}

TEST(TensorBoard, Crc32cMatchesBitwiseReferenceAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::vector<uint8_t> data(300);
  for (auto& b : data) b = uint8_t(rng());
  for (size_t offset = 0; offset < 8; ++offset)
    for (size_t n = 0; n + offset <= 200; ++n)
      ASSERT_EQ(crc32c(data.data() + offset, n), crc32c_bitwise(data.data() + offset, n))
          << "offset " << offset << " length " << n;
}

TEST(TensorBoard, FormatsTestVectorsByteForByte) {
  // docs/formats.md 6.4, first vector: Event{wall_time=1700000000.0, file_version="brain.Event:2"}
  const std::string v1 = bytes({0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa3, 0x7f, 0x4b, 0x22, 0x09, 0x00,
                                0x00, 0x00, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x1a, 0x0d, 0x62, 0x72, 0x61, 0x69, 0x6e,
                                0x2e, 0x45, 0x76, 0x65, 0x6e, 0x74, 0x3a, 0x32, 0xec, 0xed, 0x8f, 0x9d});
  const std::string got1 = tfevents::frame_record(tfevents::file_version_event(1700000000.0, ""));
  EXPECT_EQ(got1, v1) << "got      " << hex(got1) << "\nexpected " << hex(v1);

  // second vector: Event{wall_time=1700000001.5, step=10, summary{value{tag="loss", simple_value=2.5}}}
  const std::string payload = bytes({0x09, 0x00, 0x00, 0x60, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x10, 0x0a, 0x2a, 0x0d,
                                     0x0a, 0x0b, 0x0a, 0x04, 0x6c, 0x6f, 0x73, 0x73, 0x15, 0x00, 0x00, 0x20, 0x40});
  const std::string v2 =
      bytes({0x1a, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x9b, 0xd8, 0x2d}) + payload + bytes({0x45, 0x58, 0xd6, 0x87});
  const std::string event2 = tfevents::scalar_event(1700000001.5, 10, "loss", 2.5f);
  EXPECT_EQ(event2, payload) << "got      " << hex(event2) << "\nexpected " << hex(payload);
  const std::string got2 = tfevents::frame_record(event2);
  EXPECT_EQ(got2, v2) << "got      " << hex(got2) << "\nexpected " << hex(v2);
}

struct Written {
  std::string tag;
  float value;
  int64_t step;
  double wall_time;
};

TEST(TensorBoard, IndependentReadersAgreeWithEverythingWritten) {
  if (!llamatrain::testing::exists(SYSTEM_PYTHON)) GTEST_SKIP() << "no " << SYSTEM_PYTHON;
  TempDir dir;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values = {0.0f,
                                     -0.0f,
                                     1.0f,
                                     -2.5f,
                                     nan,
                                     -nan,
                                     inf,
                                     -inf,
                                     std::numeric_limits<float>::max(),
                                     std::numeric_limits<float>::denorm_min(),
                                     std::numeric_limits<float>::lowest(),
                                     3.14159265f};
  const std::vector<int64_t> steps = {0,
                                      1,
                                      -1,
                                      127,
                                      128,
                                      300,
                                      int64_t(1) << 40,
                                      std::numeric_limits<int64_t>::max(),
                                      std::numeric_limits<int64_t>::min(),
                                      -123456789};
  const std::vector<std::string> tags = {"loss", "train/lr", "损失/训练", "émoji 🚀 grad-norm",
                                         std::string(300, 'x')};  // 300: a two-byte length varint
  std::vector<Written> written;
  std::string text_written(20000, 'm');  // a 20 kB text: three-byte length varints, nested
  text_written.replace(0, 24, "# config\n`lr: 3e-4` — ok");
  const int kThreads = 4, kPerThread = 500;
  std::string path;
  {
    TensorBoardWriter tb(dir.path() + "/run1");
    path = tb.path();
    std::mt19937 rng(1);
    for (int i = 0; i < 3000; ++i) {  // about 100 kB: crosses the 64 kB automatic flush
      Written w{tags[i % tags.size()], values[rng() % values.size()], steps[rng() % steps.size()], 1.7e9 + 0.25 * i};
      if (i % 2 == 0) w.value = std::ldexp(float(rng() % 1000) - 500.0f, int(rng() % 200) - 100);
      tb.add_scalar(w.tag, w.value, w.step, w.wall_time);
      written.push_back(w);
      if (i == 1000) tb.flush();
    }
    tb.add_text("config", text_written, 5, 1.8e9);
    const double before = wall_time_now();
    tb.add_scalar("default/wall_time", 1.0f, 2);
    const double after = wall_time_now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&tb, t] {
        for (int i = 0; i < kPerThread; ++i) tb.add_scalar(fmt::format("thread/{}", t), float(i), i, 1.9e9);
      });
    for (auto& th : threads) th.join();
    tb.flush();
    EXPECT_EQ(tb.error(), "");

    std::vector<json> records;
    std::string out;
    ASSERT_EQ(read_with_python(path, "", &records, &out), 0) << out.substr(0, 2000);
    ASSERT_EQ(records.size(), 1 + written.size() + 2 + kThreads * kPerThread) << out.substr(0, 2000);
    EXPECT_EQ(records[0]["file_version"], "brain.Event:2");
    EXPECT_EQ(records[0]["writer"], "llamatrain");
    EXPECT_FALSE(records[0].contains("values"));
    for (size_t i = 0; i < written.size(); ++i) {
      const json& r = records[1 + i];
      const Written& w = written[i];
      ASSERT_EQ(r["step"].get<int64_t>(), w.step) << "record " << i + 1;
      ASSERT_EQ(r["wall_time_bits"], double_bits(w.wall_time)) << "record " << i + 1;
      ASSERT_EQ(r["values"].size(), 1u);
      ASSERT_EQ(r["values"][0]["tag"], w.tag) << "record " << i + 1;
      ASSERT_EQ(r["values"][0]["value_bits"], float_bits(w.value)) << "record " << i + 1 << " value " << w.value;
    }
    const json& text = records[1 + written.size()];
    EXPECT_EQ(text["step"], 5);
    EXPECT_EQ(text["values"][0]["tag"], "config");
    EXPECT_EQ(text["values"][0]["text"], text_written);
    EXPECT_EQ(text["values"][0]["data_class"], 2);
    const json& dflt = records[2 + written.size()];
    uint64_t bits = std::stoull(dflt["wall_time_bits"].get<std::string>(), nullptr, 16);
    double wall;
    std::memcpy(&wall, &bits, 8);
    EXPECT_GE(wall, before);
    EXPECT_LE(wall, after);
    // Each thread's records arrive whole and in that thread's order.
    std::vector<int> next(kThreads, 0);
    for (size_t i = 3 + written.size(); i < records.size(); ++i) {
      const std::string tag = records[i]["values"][0]["tag"];
      const int t = tag.back() - '0';
      ASSERT_EQ(tag, fmt::format("thread/{}", t));
      EXPECT_EQ(records[i]["step"], next[t]);
      EXPECT_EQ(records[i]["values"][0]["value_bits"], float_bits(float(next[t])));
      ++next[t];
    }
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(next[t], kPerThread);
  }

  // Google's protobuf decodes every record the same way and re-serializes it to the same bytes.
  std::vector<json> records;
  std::string out;
  const int status = read_with_python(path, "--protobuf", &records, &out);
  if (status == 3) GTEST_SKIP() << "python3-protobuf not installed (scripts/setup.sh installs it)";
  EXPECT_EQ(status, 0) << out.substr(0, 2000);
  EXPECT_EQ(records.size(), 1 + written.size() + 2 + kThreads * kPerThread);
}

TEST(TensorBoard, ReaderRejectsACorruptedRecord) {
  // The Python reader is the oracle above, so it must be able to fail: flip one payload bit.
  if (!llamatrain::testing::exists(SYSTEM_PYTHON)) GTEST_SKIP() << "no " << SYSTEM_PYTHON;
  TempDir dir;
  std::string path;
  {
    TensorBoardWriter tb(dir.path());
    tb.add_scalar("loss", 2.5f, 10, 1.7e9);
    path = tb.path();
  }
  std::string data = llamatrain::testing::read_file(path);
  std::vector<json> records;
  std::string out;
  ASSERT_EQ(read_with_python(path, "", &records, &out), 0) << out;
  data[data.size() - 6] ^= 0x01;  // inside the float of the last record
  llamatrain::testing::write_file(path, data);
  EXPECT_EQ(read_with_python(path, "", &records, &out), 1) << out;
  EXPECT_NE(out.find("data CRC"), std::string::npos) << out;
}

TEST(TensorBoard, FileNameFollowsTensorBoardAndSortsAfterEarlierFiles) {
  TempDir dir;
  // A file from a "previous run" stamped 1000 s in the future (another machine's clock).
  const int64_t future = int64_t(wall_time_now()) + 1000;
  const std::string earlier = tfevents::event_file_name(future, "zzzz", 99999, 7);
  llamatrain::testing::write_file(dir / earlier, "");
  std::string first, second;
  {
    TensorBoardWriter a(dir.path());
    TensorBoardWriter b(dir.path());
    first = std::filesystem::path(a.path()).filename().string();
    second = std::filesystem::path(b.path()).filename().string();
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::regex pattern(
      fmt::format(R"(events\.out\.tfevents\.(\d{{10}})\.{}\.{}\.(\d+))",
                  std::regex_replace(std::string(host), std::regex(R"([.^$|()\[\]*+?{{}}\\])"), R"(\$&)"), ::getpid()));
  std::smatch m;
  ASSERT_TRUE(std::regex_match(first, m, pattern)) << first;
  EXPECT_EQ(std::stoll(m[1]), future + 1);
  ASSERT_TRUE(std::regex_match(second, pattern)) << second;
  EXPECT_LT(earlier, first);
  EXPECT_LT(first, second);
  EXPECT_EQ(event_files(dir.path()), (std::vector<std::string>{earlier, first, second}));
  EXPECT_EQ(tfevents::event_file_name(42, "h", 7, 3), "events.out.tfevents.0000000042.h.7.3");
}

TEST(TensorBoard, UncreatableDirectoryIsAnErrorNamingIt) {
  TempDir dir;
  llamatrain::testing::write_file(dir / "plainfile", "x");
  for (const std::string& bad : {dir / "plainfile", dir / "plainfile/sub"}) {
    try {
      TensorBoardWriter tb(bad);
      FAIL() << "expected an Error for " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("tensorboard: cannot create log directory " + bad), std::string::npos) << msg;
      EXPECT_NE(msg.find("hint:"), std::string::npos) << msg;
    }
  }
}

TEST(TensorBoard, FailedWriteWarnsOnceAndTrainingGoesOn) {
  if (!llamatrain::testing::exists(SYSTEM_PYTHON)) GTEST_SKIP() << "no " << SYSTEM_PYTHON;
  TempDir dir;
  std::string path;
  off_t limit = 0;
  std::string warnings, error;
  {
    TensorBoardWriter tb(dir.path());
    path = tb.path();
    // A file size limit stands in for a full disk: write(2) fails with EFBIG past it.
    limit = off_t(std::filesystem::file_size(path)) + 1000;
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    rlimit lower = old;
    lower.rlim_cur = rlim_t(limit);
    auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);
    ::testing::internal::CaptureStderr();
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lower), 0);
    for (int i = 0; i < 200; ++i) tb.add_scalar("loss", float(i), i, 1.7e9);
    tb.flush();
    for (int i = 0; i < 5000; ++i) tb.add_scalar("loss", float(i), i, 1.7e9);  // over 64 kB: auto flush
    tb.flush();
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
    warnings = ::testing::internal::GetCapturedStderr();
    ::signal(SIGXFSZ, old_handler);
    error = tb.error();
    tb.add_scalar("loss", 1.0f, 1);
    tb.flush();
  }
  EXPECT_NE(error.find("writing " + path + " failed: File too large"), std::string::npos) << error;
  EXPECT_EQ(warnings, "warning: tensorboard: " + error + "; TensorBoard logging stops here, training goes on\n");
  EXPECT_EQ(off_t(std::filesystem::file_size(path)), limit);  // nothing written after the failure
  // The records before the cut are intact: cut the torn one off and read them all.
  std::string data = llamatrain::testing::read_file(path);
  size_t pos = 0, whole = 0;
  while (pos + 12 <= data.size()) {
    uint64_t n;
    std::memcpy(&n, data.data() + pos, 8);
    if (pos + 16 + n > data.size()) break;
    pos += 16 + n;
    ++whole;
  }
  llamatrain::testing::write_file(path, data.substr(0, pos));
  std::vector<json> records;
  std::string out;
  ASSERT_EQ(read_with_python(path, "", &records, &out), 0) << out;
  ASSERT_EQ(records.size(), whole);
  ASSERT_GT(whole, 10u);
  for (size_t i = 1; i < whole; ++i) EXPECT_EQ(records[i]["step"], int64_t(i - 1));
}

}  // namespace
}  // namespace llamatrain::obs
