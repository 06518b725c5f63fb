// The CPU's data caches as Linux reports them in sysfs, for kernels that size their blocks by cache.
// sysfs, not sysconf(_SC_LEVEL3_CACHE_SIZE): on AMD EPYC glibc reports the L3 of the whole package
// (320 MiB on a Zen 4 guest whose own L3 slice is 32 MiB), sysfs the one instance this CPU shares.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llamatrain {

struct CpuCache {
  int level = 0;      // 1, 2, 3, ...
  int64_t bytes = 0;  // one instance
};

// A sysfs cache size ("32768K", "2M", "512") in bytes; -1 when it is not one.
int64_t parse_cache_size(std::string_view text);

// The data and unified caches of CPU 0 under `root` (a sysfs cpuN/cache folder), level ascending;
// empty when the folder cannot be read.
std::vector<CpuCache> cpu_data_caches(const std::string& root = "/sys/devices/system/cpu/cpu0/cache");

// Bytes of one instance of the last-level data cache of this machine's CPU 0, read once; 0 when unknown.
int64_t last_level_cache_bytes();

}  // namespace llamatrain
