// Internal to kernels/cuda: checking CUDA runtime and cuBLASLt calls, and the module's stream and
// scratch. A failed call throws llamatrain::Error naming the call and the CUDA error string
// (raise_cuda_error is defined in runtime.cpp, so the .cu files never include fmt). Used by the
// folder's .cu and .cpp files only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace llamatrain::cuda::detail {

[[noreturn]] void raise_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void raise_cublas_error(int status, const char* call, const char* file, int line);
// Throws llamatrain::Error(message) (for .cu files, which do not include fmt-based core/error.h).
[[noreturn]] void raise_error(const std::string& message);

// The module's stream (created on first use, on the current device).
cudaStream_t cuda_stream();
// LLAMATRAIN_CUDA_SYNC=1: wait for each kernel and gemm as it is queued (CUDA_CHECK_LAUNCH).
bool sync_each_kernel();

// Device scratch that stays allocated between calls and grows to the largest request; slot k is
// independent of the others. Work on it is ordered by the one stream; growing frees the old block
// (cudaFree waits for the device). One host thread at a time uses the kernels, so a slot's block
// stays valid until the same slot is asked for again.
void* scratch(int slot, size_t bytes);
enum ScratchSlot : int {
  kScratchInpBf16 = 0,     // a matmul operand rounded to bf16
  kScratchDoutBf16 = 1,    // the other operand rounded to bf16
  kScratchLogits = 2,      // lmhead_ce: a chunk of fp32 logits
  kScratchDlogits = 3,     // lmhead_ce: the chunk's bf16 dlogits
  kScratchAttention = 4,   // attention_backward: rowdot (B,H,T)
  kScratchReduce = 5,      // sum_squares partials
  kScratchNormWeight = 6,  // rmsnorm_backward: the weight gradient's fp64 partials per chunk of rows
  kScratchRope = 7,        // rope: the cos/sin table of positions (kept while its shape lasts)
  kScratchSlots = 8
};

// Blocks of 256 threads over n elements, at most a bounded grid (grid-stride loops cover the rest).
inline unsigned grid_for(int64_t n, int threads = 256) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > (int64_t(1) << 20)) blocks = int64_t(1) << 20;
  return unsigned(blocks);
}

}  // namespace llamatrain::cuda::detail

#define CUDA_CHECK(call)                                                                        \
  do {                                                                                          \
    cudaError_t cuda_check_err_ = (call);                                                       \
    if (cuda_check_err_ != cudaSuccess)                                                         \
      ::llamatrain::cuda::detail::raise_cuda_error(cuda_check_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad configuration shows up here; a fault inside the kernel at the next
// synchronizing call, or here with LLAMATRAIN_CUDA_SYNC=1 (sync_each_kernel), which waits for every
// kernel and gemm, so that the error names the one that faulted (slow: for finding a fault).
#define CUDA_CHECK_LAUNCH(name)                                                                \
  do {                                                                                         \
    cudaError_t cuda_check_err_ = cudaGetLastError();                                          \
    if (cuda_check_err_ == cudaSuccess && ::llamatrain::cuda::detail::sync_each_kernel())      \
      cuda_check_err_ = cudaStreamSynchronize(::llamatrain::cuda::detail::cuda_stream());      \
    if (cuda_check_err_ != cudaSuccess)                                                        \
      ::llamatrain::cuda::detail::raise_cuda_error(cuda_check_err_, name, __FILE__, __LINE__); \
  } while (0)
