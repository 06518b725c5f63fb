// available_memory_bytes / check_memory_fits (core/memory.h): /proc/meminfo and the cgroup files.
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

// A value of memory.stat ("name value" lines); 0 where it is missing.
int64_t stat_value(const std::string& path, const std::string& name) {
  std::ifstream f(path);
  std::string key;
  int64_t v = 0;
  while (f >> key >> v)
    if (key == name) return v;
  return 0;
}

// The least room a memory cgroup and its ancestors leave (limit - working set), -1 when none has a
// limit. dir: the cgroup's folder; root: the hierarchy's mount, where the walk stops.
int64_t cgroup_room(std::string dir, const std::string& root, bool v2) {
  const char* limit_file = v2 ? "/memory.max" : "/memory.limit_in_bytes";
  const char* usage_file = v2 ? "/memory.current" : "/memory.usage_in_bytes";
  const char* cache_key = v2 ? "inactive_file" : "total_inactive_file";
  int64_t room = -1;
  while (true) {
    const int64_t limit = read_int((dir + limit_file).c_str()), used = read_int((dir + usage_file).c_str());
    if (limit > 0 && used >= 0) {
      const int64_t working = std::max<int64_t>(0, used - stat_value(dir + "/memory.stat", cache_key));
      const int64_t here = std::max<int64_t>(limit - working, 0);
      room = room < 0 ? here : std::min(room, here);
    }
    if (dir.size() <= root.size()) break;
    dir = dir.substr(0, dir.rfind('/'));
  }
  return room;
}

// The room the memory cgroups of this process leave (/proc/self/cgroup: "0::PATH" for cgroup v2,
// "N:...memory...:PATH" for v1's memory controller), -1 when none limits it.
int64_t process_cgroup_room() {
  std::ifstream f("/proc/self/cgroup");
  int64_t room = -1;
  auto take = [&](int64_t r) {
    if (r >= 0) room = room < 0 ? r : std::min(room, r);
  };
  for (std::string line; std::getline(f, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (path == "/") path.clear();
    if (id == "0" && controllers.empty()) {
      // v2: mounted at /sys/fs/cgroup, or at /sys/fs/cgroup/unified beside v1 (hybrid)
      const std::string root =
          std::ifstream("/sys/fs/cgroup/cgroup.controllers").good() ? "/sys/fs/cgroup" : "/sys/fs/cgroup/unified";
      take(cgroup_room(root + path, root, true));
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      take(cgroup_room("/sys/fs/cgroup/memory" + path, "/sys/fs/cgroup/memory", false));
    }
  }
  return room;
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
  if (const int64_t room = process_cgroup_room(); room >= 0) avail = avail < 0 ? room : std::min(avail, room);
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
