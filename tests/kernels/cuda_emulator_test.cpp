// The CUDA emulation itself (tools/cuda_emulator): kernels written here in CUDA's dialect run as a
// GPU would run them: warp shuffles exchange values across the 32 lanes as __shfl_xor_sync does,
// __syncthreads orders shared memory between the threads of a block, lanes of a warp waiting at
// different barriers stop the program naming the kernel instead of hanging, the host dereferencing device memory
// faults with a message, the device's memory runs out as cudaMalloc's does, and a bad launch
// configuration is an error the next check reports, a launch above 48 KiB of dynamic shared memory needs
// the kernel's opt-in, and the tensor-core instructions' twins (kernels/cuda/mma.cuh) hand each lane
// the fragments the PTX ISA lays out, and cp.async's copies land only at the wait that completes them.
// Built only with the emulation (CMakeLists.txt).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "emu.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"
#include "core/error.h"

namespace llamatrain {
namespace {

// out[t] = the sum over its warp of in[lane], by a butterfly of shuffles; then, through shared
// memory and a barrier, the block's threads in reverse order.
__global__ void warp_sum_kernel(float* out, int* reversed, const float* in) {
  const int t = threadIdx.x;
  float v = in[blockIdx.x * blockDim.x + t];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[blockIdx.x * blockDim.x + t] = v;
  __shared__ int ids[1024];
  ids[t] = t;
  __syncthreads();
  reversed[blockIdx.x * blockDim.x + t] = ids[blockDim.x - 1 - t];
}

// Half the warp waits at the block's barrier, the other half at a shuffle of the whole warp: neither
// barrier can open.
__global__ void divergent_barrier_kernel(float* out) {
  float v = 1.0f;
  if (threadIdx.x < 16)
    __syncthreads();
  else
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

__global__ void fill_kernel(float* out, float v) { out[threadIdx.x] = v; }

uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

// d (16x8) = a (16x16) * b (16x8) + c0, all row-major, one warp; each lane builds its fragments as
// the PTX ISA lays them out for mma.m16n8k16 (lane l: group g = l / 4, index t = l % 4).
__global__ void mma_kernel(float* d, const uint16_t* a, const uint16_t* b, const float* c0) {
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  uint32_t af[4], bf[2];
  float c[4];
  for (int i = 0; i < 4; i++) {
    const int row = g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
    af[i] = pair(a[row * 16 + col], a[row * 16 + col + 1]);
  }
  for (int i = 0; i < 2; i++) {
    const int k = 2 * t + 8 * i;
    bf[i] = pair(b[k * 8 + g], b[(k + 1) * 8 + g]);
  }
  for (int i = 0; i < 4; i++) c[i] = c0[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
  llamatrain::cuda::detail::mma_bf16_16x8x16(c, af, bf);
  for (int i = 0; i < 4; i++) d[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = c[i];
}

// Four 8x8 matrices of b16 (element (j, r, c) = j * 64 + r * 8 + c) in shared memory, rows padded to
// 24 elements; lane l gives row l % 8 of matrix l / 8 and stores its four registers.
__global__ void ldmatrix_kernel(uint32_t* out, bool trans) {
  alignas(16) __shared__ uint16_t m[32 * 24];
  for (int i = threadIdx.x; i < 32 * 24; i += 32) m[i] = uint16_t((i / 24) * 8 + i % 24);
  __syncthreads();
  uint32_t r[4];
  llamatrain::cuda::detail::ldmatrix_x4(r, m + threadIdx.x * 24, trans);
  for (int j = 0; j < 4; j++) out[threadIdx.x * 4 + j] = r[j];
}

__global__ void big_shared_kernel(float* out) {
  float* big = emu::dynamic_smem<float>();  // extern __shared__ float big[], as to_host.py writes it
  big[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = big[31 - threadIdx.x];
}

template <typename T>
T* device_array(size_t n) {
  return static_cast<T*>(cuda::device_alloc(n * sizeof(T)));
}

TEST(CudaEmulator, WarpShufflesAndBlockBarriers) {
  for (unsigned threads : {32u, 96u, 256u}) {
    const unsigned blocks = 3, n = blocks * threads;
    std::vector<float> in(n);
    std::iota(in.begin(), in.end(), 1.0f);
    float* d_in = device_array<float>(n);
    float* d_out = device_array<float>(n);
    int* d_rev = device_array<int>(n);
    cuda::copy_to_device(d_in, in.data(), n * sizeof(float));
    emu::launch("warp_sum_kernel", dim3(blocks), dim3(threads), 0, nullptr, warp_sum_kernel, d_out, d_rev,
                static_cast<const float*>(d_in));
    std::vector<float> out(n);
    std::vector<int> rev(n);
    cuda::copy_to_host(out.data(), d_out, n * sizeof(float));
    cuda::copy_to_host(rev.data(), d_rev, n * sizeof(int));
    for (unsigned i = 0; i < n; i++) {
      const unsigned warp0 = i / 32 * 32;
      float want = 0;
      for (unsigned l = 0; l < 32; l++) want += in[warp0 + l];
      ASSERT_EQ(out[i], want) << "thread " << i << " of blocks of " << threads;
      ASSERT_EQ(rev[i], int(threads - 1 - i % threads)) << "thread " << i;
    }
    for (void* p : {static_cast<void*>(d_in), static_cast<void*>(d_out), static_cast<void*>(d_rev)})
      cuda::device_free(p);
  }
}

TEST(CudaEmulatorDeathTest, ABarrierSomeThreadsSkipIsNamed) {
  float* d = device_array<float>(32);
  EXPECT_DEATH(emu::launch("divergent_barrier_kernel", dim3(1), dim3(32), 0, nullptr, divergent_barrier_kernel, d),
               "kernel divergent_barrier_kernel, block \\(0,0,0\\): threads wait at barriers that never open");
  cuda::device_free(d);
}

TEST(CudaEmulatorDeathTest, TheHostCannotReadDeviceMemory) {
  float* d = device_array<float>(64);
  cuda::fill_zero(d, 64 * sizeof(float));
  volatile float* p = d;
  EXPECT_DEATH((void)p[3], "host code touched device memory");
  float x = -1;
  cuda::copy_to_host(&x, d + 3, sizeof(float));  // through the runtime it reads
  EXPECT_EQ(x, 0.0f);
  cuda::device_free(d);
}

TEST(CudaEmulator, MemoryRunsOutAsOnADevice) {
  const int64_t total = cuda::device_memory_total();
  ASSERT_GT(total, 0);
  const int64_t before = cuda::device_memory_used();
  void* p = cuda::device_alloc(1 << 20);
  EXPECT_GE(cuda::device_memory_used(), before + (1 << 20));
  try {
    cuda::device_alloc(size_t(total));
    FAIL() << "an allocation of the whole device after another succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  cuda::device_free(p);
  EXPECT_EQ(cuda::device_memory_used(), before);
  // Copies must stay inside one allocation.
  float* d = device_array<float>(8);
  std::vector<float> h(16);
  EXPECT_THROW(cuda::copy_to_host(h.data(), d, 16 * sizeof(float)), Error);
  cuda::device_free(d);
}

TEST(CudaEmulator, ABadLaunchIsTheNextCheck) {
  float* d = device_array<float>(32);
  emu::launch("fill_kernel", dim3(1), dim3(2048), 0, nullptr, fill_kernel, d, 1.0f);  // > 1024 threads
  try {
    CUDA_CHECK_LAUNCH("fill_kernel");
    FAIL() << "a block of 2048 threads launched";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid configuration argument"), std::string::npos) << e.what();
  }
  CUDA_CHECK_LAUNCH("fill_kernel");  // read once, then cleared, as cudaGetLastError
  cuda::device_free(d);
}

TEST(CudaEmulator, TensorCoreMmaMultipliesFragmentsAsLaidOut) {
  // Small integers: exact in bf16, and every product and sum exact in fp32.
  std::vector<uint16_t> a(16 * 16), b(16 * 8);
  std::vector<float> c0(16 * 8), want(16 * 8);
  auto bf16_of = [](int v) { return to_bf16(float(v)).bits; };
  for (int i = 0; i < 256; i++) a[size_t(i)] = bf16_of((i * 7 + 3) % 9 - 4);
  for (int i = 0; i < 128; i++) b[size_t(i)] = bf16_of((i * 5 + 1) % 7 - 3);
  for (int i = 0; i < 128; i++) c0[size_t(i)] = float(i % 11) - 5.0f;
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 8; c++) {
      float s = c0[size_t(r * 8 + c)];
      for (int k = 0; k < 16; k++) s += to_float(bf16{a[size_t(r * 16 + k)]}) * to_float(bf16{b[size_t(k * 8 + c)]});
      want[size_t(r * 8 + c)] = s;
    }
  auto* d_a = device_array<uint16_t>(a.size());
  auto* d_b = device_array<uint16_t>(b.size());
  auto* d_c0 = device_array<float>(c0.size());
  auto* d_d = device_array<float>(want.size());
  cuda::copy_to_device(d_a, a.data(), a.size() * 2);
  cuda::copy_to_device(d_b, b.data(), b.size() * 2);
  cuda::copy_to_device(d_c0, c0.data(), c0.size() * 4);
  emu::launch("mma_kernel", dim3(1), dim3(32), 0, nullptr, mma_kernel, d_d, d_a, d_b, d_c0);
  CUDA_CHECK_LAUNCH("mma_kernel");
  std::vector<float> got(want.size());
  cuda::copy_to_host(got.data(), d_d, got.size() * 4);
  EXPECT_EQ(got, want);
  for (void* p : {static_cast<void*>(d_a), static_cast<void*>(d_b), static_cast<void*>(d_c0), static_cast<void*>(d_d)})
    cuda::device_free(p);
}

TEST(CudaEmulator, LdmatrixHandsEachLaneItsRowsOrColumns) {
  auto* d = device_array<uint32_t>(128);
  for (bool trans : {false, true}) {
    emu::launch("ldmatrix_kernel", dim3(1), dim3(32), 0, nullptr, ldmatrix_kernel, d, trans);
    CUDA_CHECK_LAUNCH("ldmatrix_kernel");
    std::vector<uint32_t> got(128);
    cuda::copy_to_host(got.data(), d, got.size() * 4);
    for (uint32_t l = 0; l < 32; l++)
      for (uint32_t j = 0; j < 4; j++) {
        const uint32_t g = l / 4, t = l % 4;
        // Register j: matrix j's (row g, columns 2t, 2t+1), or transposed its (rows 2t, 2t+1, column g).
        const uint32_t lo = trans ? j * 64 + 2 * t * 8 + g : j * 64 + g * 8 + 2 * t;
        const uint32_t hi = trans ? lo + 8 : lo + 1;
        EXPECT_EQ(got[l * 4 + j], lo | hi << 16) << "lane " << l << " register " << j << (trans ? " (trans)" : "");
      }
  }
  cuda::device_free(d);
}

TEST(CudaEmulator, SharedMemoryAbove48KiBNeedsTheKernelsOptIn) {
  float* d = device_array<float>(32);
  const size_t bytes = size_t(64) << 10;
  emu::launch("big_shared_kernel", dim3(1), dim3(32), bytes, nullptr, big_shared_kernel, d);
  EXPECT_THROW(CUDA_CHECK_LAUNCH("big_shared_kernel"), Error);
  ASSERT_EQ(cudaFuncSetAttribute(big_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
            cudaSuccess);
  emu::launch("big_shared_kernel", dim3(1), dim3(32), bytes, nullptr, big_shared_kernel, d);
  CUDA_CHECK_LAUNCH("big_shared_kernel");
  std::vector<float> got(32);
  cuda::copy_to_host(got.data(), d, got.size() * 4);
  EXPECT_EQ(got[0], 31.0f);
  EXPECT_EQ(got[31], 0.0f);
  EXPECT_NE(cudaFuncSetAttribute(big_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 << 10),
            cudaSuccess);  // more than the device has
  cuda::device_free(d);
}

// Two groups of cp.async copies per thread (4 floats each, from src[0..] and src[4*32..]) into shared
// memory that holds -1 first: what a thread reads of its own destination before any wait, after
// waiting for all but the newest group, and after waiting for all.
__global__ void cp_async_kernel(float* seen, const float* src) {
  alignas(16) __shared__ float tile[2 * 32 * 4];
  const int t = threadIdx.x;
  for (int j = 0; j < 4; j++) tile[t * 4 + j] = tile[128 + t * 4 + j] = -1.0f;
  llamatrain::cuda::detail::cp_async_16(tile + t * 4, src + t * 4);
  llamatrain::cuda::detail::cp_async_commit();
  llamatrain::cuda::detail::cp_async_16(tile + 128 + t * 4, src + 128 + t * 4);
  llamatrain::cuda::detail::cp_async_commit();
  seen[t * 3] = tile[t * 4] + tile[128 + t * 4];  // neither landed: -2
  llamatrain::cuda::detail::cp_async_wait<1>();
  seen[t * 3 + 1] = tile[t * 4] + tile[128 + t * 4];  // the first landed
  llamatrain::cuda::detail::cp_async_wait<0>();
  seen[t * 3 + 2] = tile[t * 4] + tile[128 + t * 4];  // both
}

__global__ void cp_async_misaligned_kernel(const float* src) {
  alignas(16) __shared__ float tile[8];
  llamatrain::cuda::detail::cp_async_16(tile, src + 1);
}

}  // namespace

// cp.async's copies land only when a wait lets their group complete (the latest moment the ISA
// allows), so a kernel that reads a tile before waiting for it fails here.
TEST(CudaEmulator, AsyncCopiesLandAtTheirWait) {
  std::vector<float> host(256);
  std::iota(host.begin(), host.end(), 1.0f);
  float* d_src = static_cast<float*>(cuda::device_alloc(host.size() * sizeof(float)));
  float* d_seen = static_cast<float*>(cuda::device_alloc(96 * sizeof(float)));
  cuda::copy_to_device(d_src, host.data(), host.size() * sizeof(float));
  emu::launch("cp_async_kernel", dim3(1), dim3(32), 0, nullptr, cp_async_kernel, d_seen, d_src);
  CUDA_CHECK_LAUNCH("cp_async_kernel");
  std::vector<float> seen(96);
  cuda::copy_to_host(seen.data(), d_seen, seen.size() * sizeof(float));
  for (int t = 0; t < 32; t++) {
    const float first = host[size_t(t) * 4], second = host[128 + size_t(t) * 4];
    EXPECT_EQ(seen[size_t(t) * 3], -2.0f) << "thread " << t << ": read before any wait";
    EXPECT_EQ(seen[size_t(t) * 3 + 1], first - 1.0f) << "thread " << t << ": after wait_group 1";
    EXPECT_EQ(seen[size_t(t) * 3 + 2], first + second) << "thread " << t << ": after wait_group 0";
  }
  cuda::device_free(d_seen);
  cuda::device_free(d_src);
}

TEST(CudaEmulatorDeathTest, AMisalignedAsyncCopyStopsTheProgram) {
  float* d = static_cast<float*>(cuda::device_alloc(64 * sizeof(float)));
  EXPECT_DEATH(emu::launch("cp_async_misaligned_kernel", dim3(1), dim3(1), 0, nullptr, cp_async_misaligned_kernel, d),
               "misaligned");
  cuda::device_free(d);
}

}  // namespace llamatrain
