// A CPU emulation of the CUDA execution model, enough to run src/kernels/cuda's kernels with g++ and
// check their logic (indexing, tiling, barriers, reductions, the cuBLASLt layout mapping) without a
// GPU (tools/cuda_emulator/run.sh). The blocks of a grid run one after another; the threads of a
// block run as std::threads, __syncthreads is a std::barrier, and a warp shuffle is a store, a block
// barrier and a load (so every thread of the block must take part, as in the block reductions).
// What it cannot show: races between blocks, the GPU's memory model, warp-level behaviour, device
// math (host libm runs instead), speed.
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <thread>
#include <vector>
#undef __device__
#undef __global__
#undef __host__
#undef __forceinline__
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __shared__ static
namespace emu {
inline thread_local uint3 t_idx, b_idx;
inline dim3 g_dim, b_dim;
inline std::barrier<>* bar = nullptr;
alignas(256) inline unsigned char smem_buf[1 << 20];
inline uint64_t shfl_slots[1024];
inline void sync() { bar->arrive_and_wait(); }
template <typename T>
T shfl_xor(T v, int o) {
  const unsigned tid = t_idx.x + t_idx.y * b_dim.x;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  shfl_slots[tid] = bits;
  sync();
  uint64_t other = shfl_slots[tid ^ unsigned(o)];
  sync();
  T r;
  std::memcpy(&r, &other, sizeof(T));
  return r;
}
template <typename F, typename... A>
void launch(dim3 grid, dim3 block, size_t shared, void* stream, F f, A... args) {
  g_dim = grid;
  b_dim = block;
  const unsigned nt = block.x * block.y * block.z;
  std::memset(smem_buf, 0xff, std::min<size_t>(shared + 64, sizeof(smem_buf)));  // garbage
  std::barrier<> b(nt);
  bar = &b;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < nt; t++)
    threads.emplace_back([&, t] {
      t_idx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
      for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
          for (unsigned x = 0; x < grid.x; x++) {
            b_idx = uint3{x, y, z};
            f(args...);
            b.arrive_and_wait();
          }
    });
  for (auto& th : threads) th.join();
  bar = nullptr;
}
template <typename T>
T* dynamic_smem() { return reinterpret_cast<T*>(smem_buf); }
}  // namespace emu
#define threadIdx (emu::t_idx)
#define blockIdx (emu::b_idx)
#define blockDim (emu::b_dim)
#define gridDim (emu::g_dim)
#define __syncthreads() emu::sync()
#define __shfl_xor_sync(mask, v, o) emu::shfl_xor(v, o)
#define __fmul_rn(a, b) ((a) * (b))
#define __fadd_rn(a, b) ((a) + (b))
#define __fsub_rn(a, b) ((a) - (b))
#define cudaGetLastError() cudaSuccess
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
using std::min;
using std::max;
