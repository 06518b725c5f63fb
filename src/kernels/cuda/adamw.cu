// AdamW (fp32, fp32 + bf16 copy, bf16 with stochastic rounding) and the sums (sum_squares, sum), as
// kernels/cpu/adamw.cpp: one thread per element (grid-stride), each element computed by rng_device.cuh's
// functions, the same code the tests run on the host against cpu::, so bf16-sr rounds exactly as the
// CPU backend does. The per-call AdamW scalars are core/adamw_scalars.h's, as kernels/cpu/adamw.cpp's.
// sum_squares and sum: each block sums its elements (squared) in fp64 in a fixed order, the block
// partials are summed on the host in block order: the result does not depend on timing.
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "core/adamw_scalars.h"
#include "core/bf16.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/operand_types.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/rng_device.cuh"
#include "kernels/cuda/store.cuh"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;

namespace {

// T = void: the fp32 update alone; else also param_bf16[i] = the new param as T (adamw_update_bf16_copy).
template <typename T>
__global__ void adamw_kernel(float* param, T* param_bf16, float* m, float* v, const float* grad, int64_t n,
                             AdamwScalars s) {
  GRID_STRIDE(i, n) {
    float p = param[i], mi = m[i], vi = v[i];
    rng::adamw_element(p, mi, vi, grad[i], s);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
    if constexpr (!std::is_void_v<T>) detail::put(param_bf16 + i, p);
  }
}

__global__ void adamw_bf16_sr_kernel(bf16* param, bf16* m, bf16* v, float* param_f32, const float* grad, int64_t n,
                                     AdamwScalars s, uint64_t seed, uint32_t step, uint32_t tensor_id,
                                     uint64_t first_element) {
  GRID_STRIDE(i, n) {
    uint16_t p = param[i].bits, mi = m[i].bits, vi = v[i].bits;
    rng::adamw_bf16_sr_element(p, mi, vi, grad[i], s, seed, step, tensor_id, first_element + uint64_t(i));
    param[i].bits = p;
    m[i].bits = mi;
    v[i].bits = vi;
    if (param_f32) param_f32[i] = rng::bf16_bits_to_float(p);
  }
}

constexpr int kReduceThreads = 256;
constexpr int kReduceBlocks = 1024;

// Each block's fp64 sum of x (kSquares: of x^2) over its grid-stride elements.
template <bool kSquares>
__global__ void sum_kernel(double* partials, const float* x, int64_t n) {
  __shared__ double shared[32];
  double acc = 0.0;
  GRID_STRIDE(i, n) acc += kSquares ? double(x[i]) * x[i] : double(x[i]);
  acc = detail::block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// The block partials summed on the host in block order.
template <bool kSquares>
double sum_of(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const unsigned blocks = std::min(grid_for(n, kReduceThreads), unsigned(kReduceBlocks));
  auto* partials = static_cast<double*>(detail::scratch(detail::kScratchReduce, blocks * sizeof(double)));
  sum_kernel<kSquares><<<blocks, kReduceThreads, 0, cuda_stream()>>>(partials, x, n);
  CUDA_CHECK_LAUNCH("sum_kernel");
  std::vector<double> host(blocks);
  copy_to_host(host.data(), partials, blocks * sizeof(double));
  double total = 0.0;
  for (double p : host) total += p;
  return total;
}

}  // namespace

void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int step, float grad_scale) {
  if (n <= 0) return;
  adamw_kernel<void><<<grid_for(n), 256, 0, cuda_stream()>>>(
      param, nullptr, m, v, grad, n, adamw_scalars(lr, beta1, beta2, eps, weight_decay, step, grad_scale));
  CUDA_CHECK_LAUNCH("adamw_kernel");
}

template <typename T>
void adamw_update_bf16_copy(float* param, T* param_bf16, float* m, float* v, const float* grad, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale) {
  if (n <= 0) return;
  adamw_kernel<T><<<grid_for(n), 256, 0, cuda_stream()>>>(
      param, param_bf16, m, v, grad, n, adamw_scalars(lr, beta1, beta2, eps, weight_decay, step, grad_scale));
  CUDA_CHECK_LAUNCH("adamw_kernel");
}
LLAMATRAIN_CUDA_FOR_EACH_BF16_COPY(LLAMATRAIN_CUDA_INSTANTIATE_ADAMW_UPDATE_BF16_COPY)

void adamw_update_bf16_sr(bf16* param, bf16* m, bf16* v, float* param_f32, const float* grad, int64_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale,
                          uint64_t seed, uint32_t tensor_id, uint64_t first_element) {
  if (n <= 0) return;
  adamw_bf16_sr_kernel<<<grid_for(n), 256, 0, cuda_stream()>>>(
      param, m, v, param_f32, grad, n, adamw_scalars(lr, beta1, beta2, eps, weight_decay, step, grad_scale), seed,
      uint32_t(step), tensor_id, first_element);
  CUDA_CHECK_LAUNCH("adamw_bf16_sr_kernel");
}

double sum_squares(const float* x, int64_t n) { return sum_of<true>(x, n); }

double sum(const float* x, int64_t n) { return sum_of<false>(x, n); }

}  // namespace llamatrain::cuda
