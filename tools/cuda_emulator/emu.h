// The CUDA emulator's device side: what a src/kernels/cuda/*.cu file sees once to_host.py has
// rewritten it as C++ (its launches as emu::launch calls). A grid runs its blocks one after another
// on the calling thread; the threads of a block run as fibers (emu_scheduler.cpp) that switch only at
// a barrier, so __syncthreads is a block barrier and a warp shuffle a barrier of the 32 lanes of the
// warp, as the PTX ISA orders them (a thread that has returned no longer counts, as on Volta and
// later); lanes of a warp left waiting at barriers that cannot open (some at __syncthreads, the rest
// at a shuffle) stop the program with an error naming the kernel and the block, not a hang. Device memory (emu_memory.cpp) is readable only while a kernel or a
// runtime copy runs, so host code that dereferences a device pointer faults here as it would on a
// GPU. What it cannot show: races between blocks or within a warp, the GPU's memory model, device
// math (host libm runs instead), speed.
#pragma once

// Tells device code it runs here (kernels/cuda/mma.cuh takes the emulated twins of the tensor-core
// instructions).
#define LLAMATRAIN_CUDA_EMULATION 1

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#undef __device__
#undef __global__
#undef __host__
#undef __forceinline__
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Shared memory: one static object per kernel instantiation, which every fiber of the running block
// sees (blocks run one at a time).
#define __shared__ static
#define __restrict__

namespace emu {

constexpr int kWarpSize = 32;
constexpr int kMaxThreads = 1024;  // per block

// The emulated thread now running.
struct ThreadIndex {
  uint3 thread;
  unsigned linear;  // threadIdx.x + threadIdx.y * blockDim.x + ...
};
extern ThreadIndex* current;
extern uint3 block_index;
extern dim3 grid_dim, block_dim;

// __syncthreads: waits until every thread of the block (that has not returned) is here.
void block_sync();
// Waits until every lane of this thread's warp (that has not returned) is here.
void warp_sync();
// One 64-bit slot per thread of the block for this thread's next exchange within its warp: two sets
// that alternate, so that one barrier per exchange suffices (a lane cannot write the set its warp is
// still reading: it would first pass the next exchange's barrier, which waits for every lane).
uint64_t* exchange_slots();
// The same for exchanges of up to kExchangeBytes per lane (a tensor-core instruction's fragments): lane
// i's bytes at area + i * kExchangeBytes (i the thread's linear index in the block).
constexpr size_t kExchangeBytes = 32;
unsigned char* exchange_area();
// The block's dynamic shared memory (the launch's `shared` bytes, filled with garbage at each block's start).
void* dynamic_shared();

// Runs body once per thread of every block of the grid; an invalid configuration is kept as the last
// error (cudaGetLastError). kernel: the kernel's name, for errors.
void run_grid(const char* kernel, dim3 grid, dim3 block, size_t shared, const std::function<void()>& body);

// Whether `entry` (a kernel) may launch with `shared` bytes of dynamic shared memory: up to 48 KiB, or
// what cudaFuncSetAttribute(entry, cudaFuncAttributeMaxDynamicSharedMemorySize, n) allowed.
bool shared_allowed(const void* entry, size_t shared);

template <typename F, typename... A>
void launch(const char* kernel, dim3 grid, dim3 block, size_t shared, cudaStream_t, F f, A... args) {
  if constexpr (std::is_pointer_v<F>) {
    if (!shared_allowed(reinterpret_cast<const void*>(f), shared)) return;  // the launch error is kept
  }
  run_grid(kernel, grid, block, shared, [&] { f(args...); });
}

template <typename T>
T* dynamic_smem() {
  return static_cast<T*>(dynamic_shared());
}

// __shfl_xor_sync over the full warp: lane i gets the value of lane i ^ mask.
template <typename T>
T shfl_xor(T v, int mask) {
  static_assert(sizeof(T) <= 8);
  uint64_t* slots = exchange_slots();
  const unsigned me = current->linear;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  slots[me] = bits;
  warp_sync();
  const uint64_t other = slots[me ^ unsigned(mask)];
  T r;
  std::memcpy(&r, &other, sizeof(T));
  return r;
}

// The PTX ISA's warp-wide matrix instructions, as kernels/cuda/mma.cuh names them (see there). Each
// lane hands its part to the warp and takes back what the ISA's fragment layout gives it: lane l is in
// group g = l / 4 with index t = l % 4 in its group.

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lanes 8j..8j+7 give the addresses of rows 0..7
// of matrix j (16-byte aligned); register j of lane l gets row g, elements 2t and 2t+1 of matrix j
// (trans: elements (2t, g) and (2t+1, g), so that the matrix arrives transposed).
void ldmatrix_x4(uint32_t r[4], const void* row, bool trans);

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, d = a * b + c with a 16x16 and b 16x8, both
// bf16 (two per register, the lower index in the low half), c and d 16x8 fp32:
//   a[i]: row g + 8 * (i % 2), columns 2t + 8 * (i / 2) and the next;
//   b[i]: column g, rows 2t + 8 * i and the next;
//   c[i]: row g + 8 * (i / 2), column 2t + i % 2.
void mma_m16n8k16_bf16(float c[4], const uint32_t a[4], const uint32_t b[2]);

// cp.async.cg.shared.global (16 bytes), cp.async.commit_group and cp.async.wait_group n: the source is
// read when the copy is issued; the 16 bytes land in shared memory only when a wait lets the copy's
// group complete (the latest moment the ISA allows), so reading a tile before its wait reads the old
// one, as it may on the GPU. Unaligned addresses stop the program, as a misaligned access faults there.
void cp_async_16(void* dst, const void* src);
void cp_async_commit();
void cp_async_wait(int pending);

}  // namespace emu

#define threadIdx (emu::current->thread)
#define blockIdx (emu::block_index)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)
#define __syncthreads() emu::block_sync()
#define __shfl_xor_sync(mask, v, o) emu::shfl_xor(v, o)

// Device intrinsics with their IEEE meaning (each one rounded on its own: g++ is told not to fuse).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline double atomicAdd(double* p, double v) { return std::atomic_ref<double>(*p).fetch_add(v); }
using std::max;
using std::min;
