// available_memory_bytes / check_memory_fits (core/memory.h): /proc/meminfo and cgroup v2 files.
#include "core/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace llamatrain {

namespace {

// First integer in `path` ("max" and unreadable files give -1).
int64_t read_int(const char* path) {
  std::ifstream f(path);
  int64_t v = -1;
  if (!(f >> v)) return -1;
  return v;
}

}  // namespace

int64_t available_memory_bytes() {
  int64_t avail = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream in(line.substr(13));
    int64_t kb = 0;
    if (in >> kb) avail = kb * 1024;
    break;
  }
  const int64_t limit = read_int("/sys/fs/cgroup/memory.max"), used = read_int("/sys/fs/cgroup/memory.current");
  if (limit > 0 && used >= 0) {
    const int64_t room = std::max<int64_t>(limit - used, 0);
    avail = avail < 0 ? room : std::min(avail, room);
  }
  return avail;
}

void check_memory_fits(int64_t need_bytes, const std::string& what, const std::string& detail,
                       const std::string& hint) {
  const int64_t avail = available_memory_bytes();
  if (avail < 0 || need_bytes <= avail) return;
  fail("memory: {} needs {:.1f} GB ({}), but {:.1f} GB is available\nhint: {}", what, need_bytes / 1e9, detail,
       avail / 1e9, hint);
}

int64_t current_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(f >> size >> resident)) return -1;
  return resident * int64_t(sysconf(_SC_PAGESIZE));
}

double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0;
}

}  // namespace llamatrain
