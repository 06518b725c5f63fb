// The emulator's device memory (emu_memory.h): one PROT_NONE region reserved at the first
// allocation, first-fit allocation in 256-byte units, and a SIGSEGV handler that names a host access
// to it before the process dies (other faults go to the handler that was there before).
#include "emu_memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>

namespace emu {

namespace {

constexpr size_t kAlign = 256;

size_t parse_bytes(const char* s) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  size_t unit = 1;
  if (end && (*end == 'K' || *end == 'k')) unit = size_t(1) << 10;
  if (end && (*end == 'M' || *end == 'm')) unit = size_t(1) << 20;
  if (end && (*end == 'G' || *end == 'g')) unit = size_t(1) << 30;
  if (!(v > 0)) fatal("LLAMATRAIN_EMU_DEVICE_MEMORY: expected a size such as 16G");
  return size_t(v * double(unit));
}

size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

struct Region {
  std::mutex mutex;
  char* base = nullptr;
  size_t total = 0;           // bytes the emulated device has
  size_t in_use = 0;
  size_t top = 0;             // end of the highest allocation, page-rounded: what access opens
  int depth = 0;              // DeviceAccess scopes alive
  std::map<size_t, size_t> free_blocks;  // offset -> bytes
  std::map<size_t, std::pair<size_t, size_t>> live;  // offset -> (bytes held, bytes asked for)

  void reserve() {
    if (base) return;
    const char* env = std::getenv("LLAMATRAIN_EMU_DEVICE_MEMORY");
    total = round_up(env ? parse_bytes(env) : size_t(16) << 30, page_size());
    void* p = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fatal("cannot reserve the emulated device's memory");
    base = static_cast<char*>(p);
    free_blocks[0] = total;
    install_handler();
  }

  void protect(size_t from, size_t to, int prot) {
    if (to > from && mprotect(base + from, to - from, prot) != 0) fatal("mprotect of emulated device memory failed");
  }

  static void install_handler();
};

Region& region() {
  static Region* r = new Region;  // never destroyed: allocations may be freed during exit
  return *r;
}

struct sigaction g_previous;

void on_segv(int sig, siginfo_t* info, void* uctx) {
  Region& r = region();
  const char* a = static_cast<const char*>(info->si_addr);
  if (r.base && a >= r.base && a < r.base + r.total && r.depth == 0) {
    char msg[256];
    const int n = std::snprintf(msg, sizeof msg,
                                "cuda emulator: host code touched device memory at %p (offset %zu of the emulated "
                                "device): a device pointer was dereferenced on the host\n",
                                info->si_addr, size_t(a - r.base));
    if (n > 0) (void)!write(2, msg, size_t(n));
  }
  // Whatever it was, the handler before ours (or the default action) deals with it.
  sigaction(SIGSEGV, &g_previous, nullptr);
  if (!(g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN)
    g_previous.sa_handler(sig);
  else if ((g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_sigaction)
    g_previous.sa_sigaction(sig, info, uctx);
}

void Region::install_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_previous);
}

}  // namespace

void fatal(const char* what) {
  std::fprintf(stderr, "cuda emulator: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

void* device_malloc(size_t bytes) {
  Region& r = region();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.reserve();
  // LLAMATRAIN_EMU_OOM_AT_ALLOCATION=N: the N-th allocation fails as a full device's would (another
  // process taking the memory after preflight looked, or a plan that fell short).
  static const long oom_at = [] {
    const char* v = std::getenv("LLAMATRAIN_EMU_OOM_AT_ALLOCATION");
    return v ? std::atol(v) : 0L;
  }();
  static long allocations = 0;
  if (++allocations == oom_at) return nullptr;
  const size_t n = round_up(std::max<size_t>(bytes, 1), kAlign);
  for (auto it = r.free_blocks.begin(); it != r.free_blocks.end(); ++it) {
    if (it->second < n) continue;
    const size_t off = it->first, rest = it->second - n;
    r.free_blocks.erase(it);
    if (rest) r.free_blocks[off + n] = rest;
    r.live[off] = {n, std::max<size_t>(bytes, 1)};
    r.in_use += n;
    const size_t end = round_up(off + n, page_size());
    if (end > r.top) {
      if (r.depth > 0) r.protect(r.top, end, PROT_READ | PROT_WRITE);
      r.top = end;
    }
    if (r.depth == 0) r.protect(off / page_size() * page_size(), end, PROT_READ | PROT_WRITE);
    std::memset(r.base + off, 0xff, n);
    if (r.depth == 0) r.protect(off / page_size() * page_size(), end, PROT_NONE);
    return r.base + off;
  }
  return nullptr;
}

void device_release(void* p) {
  if (!p) return;
  Region& r = region();
  std::lock_guard<std::mutex> lock(r.mutex);
  const size_t off = size_t(static_cast<char*>(p) - r.base);
  auto it = r.live.find(off);
  if (!r.base || static_cast<char*>(p) < r.base || it == r.live.end())
    fatal("cudaFree of a pointer that is not a live device allocation");
  const size_t n = it->second.first;
  r.live.erase(it);
  r.in_use -= n;
  // Whole pages inside the block go back to the system.
  const size_t a = round_up(off, page_size()), b = (off + n) / page_size() * page_size();
  if (b > a + (size_t(1) << 20)) madvise(r.base + a, b - a, MADV_DONTNEED);
  auto next = r.free_blocks.emplace(off, n).first;
  if (auto after = std::next(next); after != r.free_blocks.end() && off + n == after->first) {
    next->second += after->second;
    r.free_blocks.erase(after);
  }
  if (next != r.free_blocks.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == next->first) {
      before->second += next->second;
      r.free_blocks.erase(next);
    }
  }
}

size_t device_bytes_in_use() {
  Region& r = region();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.in_use;
}

size_t device_bytes_total() {
  Region& r = region();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.reserve();
  return r.total;
}

bool is_device_range(const void* p, size_t bytes) {
  Region& r = region();
  std::lock_guard<std::mutex> lock(r.mutex);
  const char* c = static_cast<const char*>(p);
  if (!r.base || c < r.base || c >= r.base + r.total) return false;
  const size_t off = size_t(c - r.base);
  auto it = r.live.upper_bound(off);
  if (it == r.live.begin()) return false;
  --it;
  return off + bytes <= it->first + it->second.second;
}

DeviceAccess::DeviceAccess() {
  Region& r = region();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.depth++ == 0 && r.base) r.protect(0, r.top, PROT_READ | PROT_WRITE);
}

DeviceAccess::~DeviceAccess() {
  Region& r = region();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (--r.depth == 0 && r.base) r.protect(0, r.top, PROT_NONE);
}

}  // namespace emu
