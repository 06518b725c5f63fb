// core/cpu_caches: sysfs cache sizes parse, the data and unified caches of a sysfs tree are found
// level by level (instruction caches and malformed entries skipped), and this machine's last-level
// cache reads as a plausible size.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/cpu_caches.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;

TEST(CpuCaches, ParsesSysfsSizes) {
  EXPECT_EQ(parse_cache_size("32768K"), int64_t(32) << 20);
  EXPECT_EQ(parse_cache_size("2M"), int64_t(2) << 20);
  EXPECT_EQ(parse_cache_size("1G"), int64_t(1) << 30);
  EXPECT_EQ(parse_cache_size("512"), 512);
  for (const char* bad : {"", "K", "32k", "32 K", "-1K", "12KB", "x"}) EXPECT_EQ(parse_cache_size(bad), -1) << bad;
  EXPECT_EQ(parse_cache_size("99999999999999999999999K"), -1);  // no overflow
  EXPECT_EQ(parse_cache_size("99999999999G"), -1);
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

void add_cache(const fs::path& root, int index, const std::string& level, const std::string& type,
               const std::string& size) {
  const fs::path dir = root / ("index" + std::to_string(index));
  write(dir / "level", level);
  write(dir / "type", type);
  write(dir / "size", size);
}

TEST(CpuCaches, ReadsDataAndUnifiedCachesByLevel) {
  const fs::path root = fs::temp_directory_path() / ("cpu_caches_test_" + std::to_string(getpid()));
  fs::remove_all(root);
  add_cache(root, 3, "3", "Unified", "32768K");  // listed out of order
  add_cache(root, 0, "1", "Data", "32K");
  add_cache(root, 1, "1", "Instruction", "32K");
  add_cache(root, 2, "2", "Unified", "1024K");
  add_cache(root, 4, "4", "Unified", "garbage");  // skipped: no size
  add_cache(root, 5, "x", "Unified", "8M");       // skipped: no level
  write(root / "uevent", "");                     // not an index folder
  const auto caches = cpu_data_caches(root.string());
  ASSERT_EQ(caches.size(), 3u);
  EXPECT_EQ(caches[0].level, 1);
  EXPECT_EQ(caches[0].bytes, int64_t(32) << 10);
  EXPECT_EQ(caches[1].level, 2);
  EXPECT_EQ(caches[1].bytes, int64_t(1) << 20);
  EXPECT_EQ(caches[2].level, 3);
  EXPECT_EQ(caches[2].bytes, int64_t(32) << 20);
  fs::remove_all(root);
  EXPECT_TRUE(cpu_data_caches(root.string()).empty());  // a missing folder: nothing, no error
}

TEST(CpuCaches, ThisMachineHasAPlausibleLastLevelCache) {
  if (!fs::exists("/sys/devices/system/cpu/cpu0/cache/index0")) GTEST_SKIP() << "no sysfs cache information here";
  const int64_t llc = last_level_cache_bytes();
  EXPECT_GE(llc, int64_t(256) << 10);
  EXPECT_LE(llc, int64_t(4) << 30);
}

}  // namespace
}  // namespace llamatrain
