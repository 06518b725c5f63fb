// The report as a browser shows it: Debian's chromium renders the page of two real runs headless
// (a private profile in a temporary folder, no proxy, nothing to fetch: the page is self-contained),
// takes a screenshot, and the PNG (decoded here with zlib) must not be blank and must show each run's
// colour on many pixels spread over the charts. chromium's process group is killed on every way out
// of the test, and a render that takes more than 120 s fails. The screenshot is kept in the build
// folder (report_browser_test.png) to look at.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "obs/report.h"
#include "test_util.h"
#include "train/train_runs.h"

extern "C" char** environ;

namespace llamatrain {
namespace {

using namespace testing;
namespace fs = std::filesystem;

// ---- PNG: 8-bit RGB or RGBA, not interlaced (what chromium writes) ----

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // (height, width, 3)
};

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 | uint32_t(uint8_t(s[at + 2])) << 8 |
         uint32_t(uint8_t(s[at + 3]));
}

Image decode_png(const std::string& png) {
  Image img;
  if (png.size() < 8 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) {
    ADD_FAILURE() << "not a PNG file";
    return img;
  }
  std::string idat;
  int channels = 0;
  for (size_t at = 8; at + 12 <= png.size();) {
    const uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    if (at + 12 + len > png.size()) break;
    const std::string data = png.substr(at + 8, len);
    if (type == "IHDR") {
      img.width = int(be32(data, 0));
      img.height = int(be32(data, 4));
      const int depth = uint8_t(data[8]), colour = uint8_t(data[9]), interlace = uint8_t(data[12]);
      channels = colour == 2 ? 3 : colour == 6 ? 4 : 0;
      if (depth != 8 || channels == 0 || interlace != 0) {
        ADD_FAILURE() << "PNG with bit depth " << depth << ", colour type " << colour << ", interlace " << interlace;
        return {};
      }
    } else if (type == "IDAT") {
      idat += data;
    }
    at += 12 + len;
  }
  const size_t stride = size_t(img.width) * size_t(channels);
  std::vector<uint8_t> raw(size_t(img.height) * (stride + 1));
  uLongf raw_len = uLongf(raw.size());
  if (channels == 0 ||
      uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), uLong(idat.size())) != Z_OK ||
      raw_len != raw.size()) {
    ADD_FAILURE() << "PNG image data does not inflate to " << raw.size() << " bytes";
    return {};
  }
  // Undo the per-row filters (none, sub, up, average, Paeth), then drop alpha.
  std::vector<uint8_t> pixels(size_t(img.height) * stride);
  for (int y = 0; y < img.height; y++) {
    const uint8_t filter = raw[size_t(y) * (stride + 1)];
    const uint8_t* in = &raw[size_t(y) * (stride + 1) + 1];
    uint8_t* row = &pixels[size_t(y) * stride];
    const uint8_t* up = y > 0 ? row - stride : nullptr;
    for (size_t i = 0; i < stride; i++) {
      const int a = i >= size_t(channels) ? row[i - size_t(channels)] : 0, b = up ? up[i] : 0,
                c = up && i >= size_t(channels) ? up[i - size_t(channels)] : 0;
      int pred = 0;
      if (filter == 1) pred = a;
      if (filter == 2) pred = b;
      if (filter == 3) pred = (a + b) / 2;
      if (filter == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      row[i] = uint8_t(in[i] + pred);
    }
  }
  img.rgb.resize(size_t(img.width) * size_t(img.height) * 3);
  for (size_t p = 0; p < size_t(img.width) * size_t(img.height); p++)
    for (int k = 0; k < 3; k++) img.rgb[p * 3 + size_t(k)] = pixels[p * size_t(channels) + size_t(k)];
  return img;
}

struct Rgb {
  int r, g, b;
};
Rgb parse_colour(const std::string& hex) {
  return {std::stoi(hex.substr(1, 2), nullptr, 16), std::stoi(hex.substr(3, 2), nullptr, 16),
          std::stoi(hex.substr(5, 2), nullptr, 16)};
}

// ---- chromium, in its own process group, killed on every way out ----

class Chromium {
 public:
  Chromium(const std::vector<std::string>& argv, const std::string& log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    std::vector<char*> args;
    for (const auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
    args.push_back(nullptr);
    if (posix_spawnp(&pid_, args[0], &fa, &attr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
  }
  ~Chromium() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGKILL);  // the group: the browser and every process it started
    if (running_) ::waitpid(pid_, nullptr, 0);
  }
  // The exit status, or -1 when it ran past timeout_s (then the group is killed).
  int wait(double timeout_s) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        running_ = false;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
  bool running_ = true;
};

TEST(ReportBrowser, ChromiumShowsEveryRunsCurves) {
  if (auto why = program_missing("chromium", "chromium"); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::vector<std::string> runs = {dir / "before", dir / "after"};
  for (size_t i = 0; i < runs.size(); i++) {
    const auto r = run_in(runs[i], train_args(runs[i], {"trainer.max_steps=12", "trainer.val_check_interval=4",
                                                        "trainer.limit_val_batches=1",
                                                        i == 0 ? "model.optim.lr=3e-3" : "model.optim.lr=1e-3"}));
    ASSERT_EQ(r.status, 0) << r.log;
  }
  const std::string html = dir / "report.html";
  const auto r = run_cli({"report", runs[0], runs[1], "-o", html});
  ASSERT_EQ(r.code, 0) << describe(r);

  const std::string shot = dir / "shot.png", log = dir / "chromium.log";
  fs::create_directories(dir / "home");
  Chromium browser(
      {"env", "HOME=" + (dir / "home"), "XDG_CONFIG_HOME=" + (dir / "home"), "chromium", "--headless", "--no-sandbox",
       "--disable-gpu", "--no-proxy-server", "--no-first-run", "--disable-extensions",
       "--disable-background-networking", "--disable-sync", "--disable-crash-reporter", "--hide-scrollbars",
       "--user-data-dir=" + (dir / "profile"), "--window-size=1400,2000", "--screenshot=" + shot, "file://" + html},
      log);
  ASSERT_TRUE(browser.started()) << "cannot start chromium";
  const int status = browser.wait(120);
  ASSERT_NE(status, -1) << "chromium took more than 120 s\n" << read_file(log);
  ASSERT_TRUE(exists(shot)) << "chromium exited " << status << " without a screenshot\n" << read_file(log);
  std::error_code ec;
  fs::copy_file(shot, std::string(LLAMATRAIN_BINARY_DIR) + "/report_browser_test.png",
                fs::copy_options::overwrite_existing, ec);

  const Image img = decode_png(read_file(shot));
  ASSERT_EQ(img.width, 1400);
  ASSERT_EQ(img.height, 2000);
  const size_t n = size_t(img.width) * size_t(img.height);
  size_t ink = 0;
  for (size_t p = 0; p < n; p++) ink += img.rgb[p * 3] < 240 || img.rgb[p * 3 + 1] < 240 || img.rgb[p * 3 + 2] < 240;
  EXPECT_GT(ink, n / 50) << "the screenshot is (nearly) blank";
  for (size_t run = 0; run < runs.size(); run++) {
    const Rgb c = parse_colour(obs::run_colour(run));
    size_t hits = 0;
    int first_row = img.height, last_row = -1;
    for (int y = 0; y < img.height; y++)
      for (int x = 0; x < img.width; x++) {
        const uint8_t* p = &img.rgb[(size_t(y) * size_t(img.width) + size_t(x)) * 3];
        if (std::abs(p[0] - c.r) + std::abs(p[1] - c.g) + std::abs(p[2] - c.b) > 48) continue;
        hits++;
        first_row = std::min(first_row, y), last_row = std::max(last_row, y);
      }
    // 7 charts of ~550 px wide curves, 2 px strokes: thousands of pixels of each run's colour, from the
    // first row of charts to the last.
    EXPECT_GT(hits, 4000u) << "run " << run << " (" << obs::run_colour(run) << ")";
    EXPECT_GT(last_row - first_row, img.height / 2)
        << "run " << run << ": its colour is only in rows " << first_row << "-" << last_row;
  }
}

}  // namespace
}  // namespace llamatrain
