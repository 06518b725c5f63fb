// cpu_data_caches / last_level_cache_bytes (core/cpu_caches.h): /sys/devices/system/cpu/cpu0/cache.
#include "core/cpu_caches.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

namespace llamatrain {

namespace {

std::string read_line(const std::filesystem::path& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

}  // namespace

int64_t parse_cache_size(std::string_view text) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text.front()))) return -1;
  int64_t value = 0;
  size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); i++) {
    if (value > (int64_t(1) << 40)) return -1;
    value = value * 10 + (text[i] - '0');
  }
  const std::string_view unit = text.substr(i);
  const int shift = unit.empty() ? 0 : unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : -1;
  if (shift < 0 || value > (int64_t(1) << (40 - shift))) return -1;  // not a size, or over 1 TiB
  return value << shift;
}

std::vector<CpuCache> cpu_data_caches(const std::string& root) {
  std::vector<CpuCache> out;
  std::error_code ec;
  try {  // a folder that fails while it is read gives the caches read before
    for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
      if (entry.path().filename().string().rfind("index", 0) != 0) continue;
      const std::string type = read_line(entry.path() / "type");
      if (type != "Data" && type != "Unified") continue;
      CpuCache c;
      try {
        c.level = std::stoi(read_line(entry.path() / "level"));
      } catch (const std::exception&) {
        continue;
      }
      c.bytes = parse_cache_size(read_line(entry.path() / "size"));
      if (c.level <= 0 || c.bytes <= 0) continue;
      out.push_back(c);
    }
  } catch (const std::filesystem::filesystem_error&) {
    // keep the caches read before the error
  }
  std::sort(out.begin(), out.end(), [](const CpuCache& a, const CpuCache& b) { return a.level < b.level; });
  return out;
}

int64_t last_level_cache_bytes() {
  static const int64_t bytes = [] {
    const auto caches = cpu_data_caches();
    return caches.empty() ? int64_t(0) : caches.back().bytes;
  }();
  return bytes;
}

}  // namespace llamatrain
