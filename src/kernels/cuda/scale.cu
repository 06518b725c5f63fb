// x[i] *= s in place, a thread per element, each product rounded on its own (__fmul_rn): the mean of
// a sum (a CUDA-only op: the host backends divide on the host).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/ops.h"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;

namespace {

__global__ void scale_kernel(float* x, int64_t n, float s) { GRID_STRIDE(i, n) x[i] = __fmul_rn(x[i], s); }

}  // namespace

void scale(float* x, int64_t n, float s) {
  if (n <= 0) return;
  scale_kernel<<<grid_for(n), 256, 0, cuda_stream()>>>(x, n, s);
  CUDA_CHECK_LAUNCH("scale_kernel");
}

}  // namespace llamatrain::cuda
