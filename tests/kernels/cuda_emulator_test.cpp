// The CUDA emulation itself (tools/cuda_emulator): kernels written here in CUDA's dialect run as a
// GPU would run them: warp shuffles exchange values across the 32 lanes as __shfl_xor_sync does,
// __syncthreads orders shared memory between the threads of a block, lanes of a warp waiting at
// different barriers stop the program naming the kernel instead of hanging, the host dereferencing device memory
// faults with a message, the device's memory runs out as cudaMalloc's does, and a bad launch
// configuration is an error the next check reports. Built only with the emulation (CMakeLists.txt).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "emu.h"
#include "kernels/cuda/check.h"
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

}  // namespace
}  // namespace llamatrain
