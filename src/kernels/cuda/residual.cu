// The residual add, as ref::residual_forward: out = a + b, each sum rounded on its own (__fadd_rn),
// 16 bytes a thread where the three pointers are 16-byte aligned (vec.cuh), else one element. out may
// alias a or b. (residual_rmsnorm_forward, the add fused with the norm after it, is rmsnorm.cu's.)
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vec.cuh"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;

namespace {

// out = a + b: n / W groups of W, then (W = 4) the last n % 4 elements one at a time.
template <int W>
__global__ void residual_kernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t groups = n / W;
  GRID_STRIDE(i, groups) {
    detail::Vec<W> x = detail::load_vec<W>(a + i * W);
    const detail::Vec<W> y = detail::load_vec<W>(b + i * W);
    for (int j = 0; j < W; j++) x.v[j] = __fadd_rn(x.v[j], y.v[j]);
    detail::store_vec<W>(out + i * W, x);
  }
  const int64_t tail = groups * W + blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (tail < n) out[tail] = __fadd_rn(a[tail], b[tail]);
}

}  // namespace

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  if (detail::vec4_floats(4, out, a, b))
    residual_kernel<4><<<grid_for(n / 4 + 1), 256, 0, cuda_stream()>>>(out, a, b, n);
  else
    residual_kernel<1><<<grid_for(n), 256, 0, cuda_stream()>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH("residual_kernel");
}

}  // namespace llamatrain::cuda
