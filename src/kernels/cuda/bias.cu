// The bias of a linear layer (Qwen2's q/k/v), as ref::bias_forward / bias_backward: the forward a
// thread per element; the backward a thread per column, the rows summed in fp64 in order (no atomics,
// the same bits every run).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/ops.h"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;

namespace {

__global__ void bias_forward_kernel(float* x, const float* bias, int OC, int64_t n) {
  GRID_STRIDE(i, n) x[i] += bias[i % OC];
}

__global__ void bias_backward_kernel(float* dbias, const float* dout, int N, int OC) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  double total = 0.0;
  for (int n = 0; n < N; n++) total += dout[int64_t(n) * OC + c];
  dbias[c] += float(total);
}

}  // namespace

void bias_forward(float* x, const float* bias, int N, int OC) {
  if (int64_t(N) * OC == 0) return;
  bias_forward_kernel<<<grid_for(int64_t(N) * OC), 256, 0, cuda_stream()>>>(x, bias, OC, int64_t(N) * OC);
  CUDA_CHECK_LAUNCH("bias_forward_kernel");
}

void bias_backward(float* dbias, const float* dout, int N, int OC) {
  if (N <= 0 || OC <= 0) return;
  bias_backward_kernel<<<(OC + 255) / 256, 256, 0, cuda_stream()>>>(dbias, dout, N, OC);
  CUDA_CHECK_LAUNCH("bias_backward_kernel");
}

}  // namespace llamatrain::cuda
