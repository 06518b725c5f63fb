// Embedding, as ref::embedding_forward / embedding_backward: the forward a thread per element of out;
// the backward a thread per column over the tokens in order, so a repeated token's rows add in token
// order as ref's loop adds them, with no atomics and the same bits every run (a resumed run repeats
// them). They match cpu:: exactly (tests/kernels/cuda_vs_cpu_test.cpp).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/ops.h"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;

namespace {

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte, int N, int C) {
  GRID_STRIDE(i, int64_t(N) * C) {
    const int64_t n = i / C, c = i % C;
    out[i] = wte[int64_t(tokens[n]) * C + c];
  }
}

__global__ void embedding_backward_kernel(float* dwte, const float* __restrict__ dout,
                                          const int32_t* __restrict__ tokens, int N, int C) {
  GRID_STRIDE(c, C) {
    for (int n = 0; n < N; n++) dwte[int64_t(tokens[n]) * C + c] += dout[int64_t(n) * C + c];
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C) {
  if (int64_t(N) * C == 0) return;
  embedding_forward_kernel<<<grid_for(int64_t(N) * C), 256, 0, cuda_stream()>>>(out, tokens, wte, N, C);
  CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C) {
  if (int64_t(N) * C == 0) return;
  embedding_backward_kernel<<<grid_for(C, 128), 128, 0, cuda_stream()>>>(dwte, dout, tokens, N, C);
  CUDA_CHECK_LAUNCH("embedding_backward_kernel");
}

}  // namespace llamatrain::cuda
