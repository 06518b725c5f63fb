// The emulator's grid runner (emu.h): blocks in order, and in each block one fiber per thread
// (Boost.Context), kept from launch to launch with their stacks. A thread runs until it returns or
// reaches a barrier, then hands control straight to the next thread that can run (index order,
// wrapping); a warp's barrier opens when the last lane of the warp still running arrives, the
// block's when the last thread still running does. When no thread can run and some have not
// returned (lanes of one warp waiting at different barriers), the launch stops with an error naming
// the kernel and the block. Deterministic: a launch interleaves its threads the same way every time.
#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "emu.h"
#include "emu_memory.h"

namespace emu {

ThreadIndex* current = nullptr;
uint3 block_index{0, 0, 0};
dim3 grid_dim, block_dim;

namespace {

namespace ctx = boost::context;

constexpr size_t kStackBytes = size_t(256) << 10;  // per thread; kernels keep small arrays on it

cudaError_t last_error = cudaSuccess;

// Stacks of kStackBytes under a guard page, made once per thread slot and reused by every launch.
class Stacks {
 public:
  ~Stacks() {
    for (void* p : maps_) munmap(p, kStackBytes + page());
  }
  ctx::stack_context get(size_t i) {
    while (maps_.size() <= i) {
      void* p = mmap(nullptr, kStackBytes + page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) fatal("cannot map a fiber stack");
      mprotect(p, page(), PROT_NONE);  // overflow faults instead of corrupting the next stack
      maps_.push_back(p);
    }
    // Each top a different number of cache lines below the end: tops all at one offset within a page
    // would share the caches' sets, and every switch would evict the previous thread's registers.
    const size_t stagger = (i % 1024) * 64;
    ctx::stack_context sc;
    sc.size = kStackBytes - stagger;
    sc.sp = static_cast<char*>(maps_[i]) + page() + kStackBytes - stagger;
    return sc;
  }

 private:
  static size_t page() { return size_t(sysconf(_SC_PAGESIZE)); }
  std::vector<void*> maps_;
};

// Hands Boost.Context one preallocated stack; never frees it.
struct FixedStack {
  ctx::stack_context sc;
  ctx::stack_context allocate() { return sc; }
  void deallocate(ctx::stack_context&) noexcept {}
};

enum class State { ready, block_barrier, warp_barrier, done };

struct Thread {
  ThreadIndex index;
  unsigned warp = 0;
  State state = State::done;
  unsigned exchanges = 0;  // warp exchanges so far in this block (their slots alternate)
  ctx::fiber fiber;        // the thread while it is suspended
};

// One block's threads. A thread that reaches a barrier or returns hands control straight to the next
// thread that can run (index order, wrapping), so a barrier costs one switch per thread; the last
// thread hands it back to the scheduler. A barrier opens when its last participant arrives.
struct Block {
  Stacks stacks;
  std::vector<std::unique_ptr<Thread>> threads;
  size_t n = 0;
  const std::function<void()>* body = nullptr;
  Thread* running = nullptr;
  ctx::fiber scheduler;  // the scheduler while the block's threads run
  int from = -1;         // who resumed the context now running: a thread's index, or -1 (the scheduler)
  std::vector<uint64_t> slots = std::vector<uint64_t>(2 * kMaxThreads);
  std::vector<unsigned char> area = std::vector<unsigned char>(2 * kMaxThreads * kExchangeBytes);
  std::vector<unsigned char> shared;
  std::vector<unsigned> warp_alive, warp_waiting;
  size_t block_alive = 0, block_waiting = 0, finished = 0;
  bool stuck = false;

  // The fiber of slot i: forever runs the body of the block it is given, then hands control on.
  void ensure_threads(size_t count) {
    while (threads.size() < count) {
      auto t = std::make_unique<Thread>();
      const int self = int(threads.size());
      t->fiber = ctx::fiber(std::allocator_arg, FixedStack{stacks.get(threads.size())}, [this, self](ctx::fiber&& f) {
        park(std::move(f));
        for (;;) {
          (*body)();
          finish(self);
        }
        return std::move(scheduler);
      });
      threads.push_back(std::move(t));
    }
  }

  // Keeps the context that just resumed this one (`from`'s) for when it runs again.
  void park(ctx::fiber&& f) {
    if (from < 0)
      scheduler = std::move(f);
    else
      threads[size_t(from)]->fiber = std::move(f);
  }

  // From `self` (a thread, or -1 for the scheduler) to thread `to`; returns when self runs again.
  void transfer(int self, Thread* to) {
    from = self;
    running = to;
    current = &to->index;
    ctx::fiber f = std::move(to->fiber).resume();
    park(std::move(f));
  }

  void to_scheduler(int self) {
    from = self;
    running = nullptr;
    current = nullptr;
    ctx::fiber f = std::move(scheduler).resume();
    park(std::move(f));
  }

  // The first thread that can run, from `start` on (wrapping), or nullptr.
  Thread* next_ready(size_t start) {
    for (size_t k = 0; k < n; k++) {
      Thread* t = threads[(start + k) % n].get();
      if (t->state == State::ready) return t;
    }
    return nullptr;
  }

  void open_barriers(unsigned warp) {
    if (warp_waiting[warp] > 0 && warp_waiting[warp] == warp_alive[warp]) {
      for (size_t i = size_t(warp) * kWarpSize; i < std::min(n, size_t(warp + 1) * kWarpSize); i++)
        if (threads[i]->state == State::warp_barrier) threads[i]->state = State::ready;
      warp_waiting[warp] = 0;
    }
    if (block_waiting > 0 && block_waiting == block_alive) {
      for (size_t i = 0; i < n; i++)
        if (threads[i]->state == State::block_barrier) threads[i]->state = State::ready;
      block_waiting = 0;
    }
  }

  // Hands control from thread `self` to the next that can run, or to the scheduler when none can.
  void hand_on(int self) {
    Thread* next = next_ready(size_t(self) + 1);
    if (next == threads[size_t(self)].get()) return;  // (it opened its own barrier, and is first again)
    if (next) return transfer(self, next);
    stuck = finished < n;
    to_scheduler(self);
  }

  // The running thread waits at a barrier of the given kind.
  void wait(State kind) {
    Thread* t = running;
    if (!t) fatal("a barrier outside a kernel");
    t->state = kind;
    if (kind == State::warp_barrier)
      warp_waiting[t->warp]++;
    else
      block_waiting++;
    open_barriers(t->warp);
    hand_on(int(t->index.linear));
  }

  void finish(int self) {
    Thread* t = threads[size_t(self)].get();
    t->state = State::done;
    finished++;
    warp_alive[t->warp]--;
    block_alive--;
    open_barriers(t->warp);  // the others of its warp or block may have been waiting only for it
    hand_on(self);
  }

  // Runs threads [0, count) of the block to completion.
  void run(size_t count) {
    n = count;
    const size_t warps = (n + kWarpSize - 1) / kWarpSize;
    warp_alive.assign(warps, 0);
    warp_waiting.assign(warps, 0);
    for (size_t i = 0; i < n; i++) {
      threads[i]->state = State::ready;
      threads[i]->exchanges = 0;
      warp_alive[threads[i]->warp]++;
    }
    block_alive = n;
    block_waiting = finished = 0;
    stuck = false;
    transfer(-1, threads[0].get());
    if (stuck) {
      size_t at_block = 0;
      for (size_t i = 0; i < n; i++) at_block += threads[i]->state == State::block_barrier;
      fatal((describe_block() + ": threads wait at barriers that never open (" + std::to_string(at_block) + " of " +
             std::to_string(n - finished) +
             " running threads at __syncthreads, the rest at a warp barrier): a barrier inside a branch the "
             "threads of one warp do not all take")
                .c_str());
    }
  }

  static std::string describe_block();
};

Block& block() {
  static Block b;
  return b;
}

const char* kernel_name = "";

// LLAMATRAIN_EMU_PROFILE=1: seconds and launches per kernel, printed at exit (which kernels the
// emulation spends its time in).
struct Profile {
  bool on = std::getenv("LLAMATRAIN_EMU_PROFILE") != nullptr;
  std::map<std::string, std::pair<double, long>> kernels;
  ~Profile() {
    if (!on) return;
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [k, v] : kernels) rows.emplace_back(v.first, k);
    std::sort(rows.rbegin(), rows.rend());
    for (const auto& [t, k] : rows) std::fprintf(stderr, "emu profile: %8.3f s %7ld launches  %s\n", t, kernels[k].second, k.c_str());
  }
};
Profile& profile() {
  static Profile p;
  return p;
}

std::string Block::describe_block() {
  return std::string("kernel ") + kernel_name + ", block (" + std::to_string(block_index.x) + "," +
         std::to_string(block_index.y) + "," + std::to_string(block_index.z) + ")";
}

}  // namespace

void block_sync() { block().wait(State::block_barrier); }
void warp_sync() { block().wait(State::warp_barrier); }
uint64_t* exchange_slots() {
  Block& b = block();
  if (!b.running) fatal("a warp exchange outside a kernel");
  return b.slots.data() + (b.running->exchanges++ % 2) * kMaxThreads;
}
unsigned char* exchange_area() {
  Block& b = block();
  if (!b.running) fatal("a warp exchange outside a kernel");
  return b.area.data() + (b.running->exchanges++ % 2) * kMaxThreads * kExchangeBytes;
}
void* dynamic_shared() { return block().shared.data(); }

namespace {

// This lane's `bytes` handed to its warp, once every lane of the warp has handed its own: lane i's
// at lanes + i * kExchangeBytes.
struct Warp {
  const unsigned char* lanes;
  unsigned lane;  // this thread's
};
Warp exchange_in_warp(const void* mine, size_t bytes) {
  unsigned char* area = exchange_area();
  const unsigned me = current->linear, base = me & ~unsigned(kWarpSize - 1);
  std::memcpy(area + me * kExchangeBytes, mine, bytes);
  warp_sync();
  return Warp{area + base * kExchangeBytes, me - base};
}

// The bf16 of a 32-bit register: element 0 in the low half.
float bf16_half(uint32_t reg, int element) {
  return __uint_as_float(element == 0 ? reg << 16 : reg & 0xffff0000u);
}

}  // namespace

void ldmatrix_x4(uint32_t r[4], const void* row, bool trans) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
    fatal((Block::describe_block() + ": ldmatrix row address not 16-byte aligned").c_str());
  const Warp w = exchange_in_warp(&row, sizeof row);
  const unsigned lane = w.lane;
  auto row_of = [&](unsigned src_lane) {
    const uint16_t* p;
    std::memcpy(&p, w.lanes + src_lane * kExchangeBytes, sizeof p);
    return p;
  };
  const unsigned g = lane / 4, t = lane % 4;
  for (unsigned j = 0; j < 4; j++) {
    uint16_t lo, hi;
    if (!trans) {
      const uint16_t* p = row_of(8 * j + g);
      lo = p[2 * t];
      hi = p[2 * t + 1];
    } else {
      lo = row_of(8 * j + 2 * t)[g];
      hi = row_of(8 * j + 2 * t + 1)[g];
    }
    r[j] = uint32_t(lo) | uint32_t(hi) << 16;
  }
}

void mma_m16n8k16_bf16(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  const Warp w = exchange_in_warp(mine, sizeof mine);
  const unsigned lane = w.lane;
  auto reg = [&](unsigned src_lane, int i) {
    uint32_t v;
    std::memcpy(&v, w.lanes + src_lane * kExchangeBytes + 4 * i, 4);
    return v;
  };
  // A(row, k) and B(k, col) from the lanes that hold them.
  auto A = [&](unsigned row, unsigned k) {
    return bf16_half(reg((row % 8) * 4 + (k % 8) / 2, int(row / 8 + 2 * (k / 8))), int(k % 2));
  };
  auto B = [&](unsigned k, unsigned col) { return bf16_half(reg(col * 4 + (k % 8) / 2, 4 + int(k / 8)), int(k % 2)); };
  const unsigned g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; i++) {
    const unsigned row = g + 8 * unsigned(i / 2), col = 2 * t + unsigned(i % 2);
    float sum = 0.0f;  // products of two bf16 are exact in fp32
    for (unsigned k = 0; k < 16; k++) sum += A(row, k) * B(k, col);
    c[i] += sum;
  }
}

cudaError_t take_last_error() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

namespace {

// Each thread's cp.async copies: the groups it committed (oldest first) and the one still open.
struct AsyncCopy {
  void* dst;
  unsigned char bytes[16];
};
struct AsyncCopies {
  std::vector<std::vector<AsyncCopy>> groups;
  std::vector<AsyncCopy> open;
};
std::vector<AsyncCopies>& async_copies() {
  static std::vector<AsyncCopies> copies(kMaxThreads);
  return copies;
}

}  // namespace

void cp_async_16(void* dst, const void* src) {
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % 16 != 0)
    fatal("cp.async of 16 bytes at a misaligned address");
  AsyncCopy c;
  c.dst = dst;
  std::memcpy(c.bytes, src, sizeof c.bytes);
  async_copies()[current->linear].open.push_back(c);
}

void cp_async_commit() {
  AsyncCopies& a = async_copies()[current->linear];
  a.groups.push_back(std::move(a.open));
  a.open.clear();
}

void cp_async_wait(int pending) {
  AsyncCopies& a = async_copies()[current->linear];
  while (a.groups.size() > size_t(std::max(pending, 0))) {
    for (const AsyncCopy& c : a.groups.front()) std::memcpy(c.dst, c.bytes, sizeof c.bytes);
    a.groups.erase(a.groups.begin());
  }
}

namespace {

constexpr size_t kDefaultSharedLimit = size_t(48) << 10, kMaxShared = size_t(227) << 10;  // sm_90's

std::map<const void*, size_t>& shared_limits() {
  static std::map<const void*, size_t> limits;
  return limits;
}

}  // namespace

cudaError_t set_max_dynamic_shared(const void* entry, int bytes) {
  if (bytes < 0 || size_t(bytes) > kMaxShared) return cudaErrorInvalidValue;
  shared_limits()[entry] = size_t(bytes);
  return cudaSuccess;
}

bool shared_allowed(const void* entry, size_t shared) {
  if (shared <= kDefaultSharedLimit) return true;
  const auto it = shared_limits().find(entry);
  if (it != shared_limits().end() && shared <= it->second) return true;
  last_error = cudaErrorInvalidValue;  // as the GPU: a launch above its kernel's limit does not run
  return false;
}

void run_grid(const char* kernel, dim3 grid, dim3 blk, size_t shared, const std::function<void()>& body) {
  const size_t n = size_t(blk.x) * blk.y * blk.z;
  if (n == 0 || n > size_t(kMaxThreads) || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
      grid.z > 65535 || shared > kMaxShared) {
    last_error = cudaErrorInvalidConfiguration;  // as the GPU: nothing runs, the error waits to be read
    return;
  }
  // LLAMATRAIN_EMU_FAULT_AT_LAUNCH=N: the N-th launch faults (an illegal address) instead of running, as
  // a kernel's bad access would on a GPU: the error path of a real fault, made on purpose.
  static const long fault_at = [] {
    const char* v = std::getenv("LLAMATRAIN_EMU_FAULT_AT_LAUNCH");
    return v ? std::atol(v) : 0L;
  }();
  static long launches = 0;
  if (++launches == fault_at) {
    last_error = cudaErrorIllegalAddress;
    return;
  }
  Block& b = block();
  if (b.running) fatal("a kernel launched from inside a kernel");
  DeviceAccess access;  // device memory is readable while the kernel runs
  b.ensure_threads(n);
  for (size_t i = 0; i < n; i++) {
    Thread* t = b.threads[i].get();
    const unsigned u = unsigned(i);
    t->index.thread = uint3{u % blk.x, (u / blk.x) % blk.y, u / (blk.x * blk.y)};
    t->index.linear = u;
    t->warp = u / kWarpSize;
  }
  b.shared.resize(std::max<size_t>(shared, 64));  // garbage (filled per block below)
  for (AsyncCopies& a : async_copies()) a = AsyncCopies{};  // a kernel's copies never land in the next one
  b.body = &body;
  kernel_name = kernel;
  grid_dim = grid;
  block_dim = blk;
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        block_index = uint3{x, y, z};
        // Each block's dynamic shared memory starts as garbage (as on the GPU, where it holds whatever
        // an earlier block left): a kernel that reads a tile before it lands cannot find the previous
        // block's copy of the same tile there.
        std::fill(b.shared.begin(), b.shared.end(), static_cast<unsigned char>(0xff - (x + y + z) % 7));
        b.run(n);
      }
  if (profile().on) {
    auto& [seconds, launches] = profile().kernels[kernel];
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    launches++;
  }
  b.body = nullptr;
  kernel_name = "";
}

}  // namespace emu
