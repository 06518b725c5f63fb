// RMSNorm, as ref::rmsnorm_forward / rmsnorm_backward, and the residual add fused with the norm after
// it (residual_rmsnorm_forward: resid = a + b, then the norm of resid, in one pass over the row).
//   - one block per row; the sum of squares and the backward's dot in fp64, as ref does;
//   - dweight in two passes: fp64 column sums per chunk of rows (sizes::norm_weight_chunks, enough
//     blocks to fill the GPU), then the chunks summed in order (deterministic, no atomics);
//   - rows whose width is a multiple of 4 on 16-byte aligned pointers move 16 bytes a thread (vec.cuh);
//     each thread owns the same elements of a row either way, so a row's sums come out in one order
//     and the fused norm equals the plain one bit for bit.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/bf16.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/operand_types.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/sizes.h"
#include "kernels/cuda/store.cuh"
#include "kernels/cuda/vec.cuh"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::Vec;
using detail::vec4_floats;
using detail::vec4_out;

namespace {

constexpr int kRowThreads = 256;

// Elements c..c+3 of a row of C: one 16-byte access (kVec: C % 4 == 0, aligned rows) or four
// scalar ones, those past C read as 0 and not written. Either way a thread owns the same elements, so
// a row's sums come out in one order whatever the alignment (the fused norm equals the plain one).
template <bool kVec>
__device__ __forceinline__ Vec<4> load_row4(const float* row, int c, int C) {
  if constexpr (kVec) {
    return detail::load_vec<4>(row + c);
  } else {
    Vec<4> r;
    for (int j = 0; j < 4; j++) r.v[j] = c + j < C ? row[c + j] : 0.0f;
    return r;
  }
}
template <bool kVec, typename T>
__device__ __forceinline__ void store_row4(T* row, int c, int C, const Vec<4>& v) {
  if constexpr (kVec) {
    detail::store_vec<4>(row + c, v);
  } else {
    for (int j = 0; j < 4; j++)
      if (c + j < C) detail::put(row + c + j, v.v[j]);
  }
}

// One block per row: rstd = 1/sqrt(mean(x^2) + eps) (fp64 sum), out = (x * rstd) * weight. kAdd:
// x = a + b first, stored to resid (residual_rmsnorm; each thread reads back what it wrote).
template <typename T, bool kVec, bool kAdd>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, float* resid, const float* a, const float* b,
                                       const float* weight, int C, float eps) {
  __shared__ double shared[32];
  const int64_t n = blockIdx.x;
  const float* xn = (kAdd ? resid : a) + n * C;
  double ss = 0.0;
  for (int c = threadIdx.x * 4; c < C; c += blockDim.x * 4) {
    Vec<4> x = load_row4<kVec>(a + n * C, c, C);
    if constexpr (kAdd) {
      const Vec<4> y = load_row4<kVec>(b + n * C, c, C);
      for (int j = 0; j < 4; j++) x.v[j] = __fadd_rn(x.v[j], y.v[j]);
      store_row4<kVec>(resid + n * C, c, C, x);
    }
    for (int j = 0; j < 4; j++) ss += double(x.v[j]) * x.v[j];
  }
  ss = detail::block_sum(ss, shared);
  const float r = float(1.0 / sqrt(ss / C + double(eps)));
  if (threadIdx.x == 0) rstd[n] = r;
  for (int c = threadIdx.x * 4; c < C; c += blockDim.x * 4) {
    Vec<4> x = load_row4<kVec>(xn, c, C);
    const Vec<4> w = load_row4<kVec>(weight, c, C);
    for (int j = 0; j < 4; j++) x.v[j] = __fmul_rn(__fmul_rn(x.v[j], r), w.v[j]);
    store_row4<kVec>(out + n * C, c, C, x);
  }
}

// dx[n,c] += rstd*w_c*dout_c - rstd^3/C * x_c * sum_c' dout_c' w_c' x_c'.
template <bool kVec>
__global__ void rmsnorm_backward_dx_kernel(float* dx, const float* dout, const float* x, const float* weight,
                                           const float* rstd, int C) {
  __shared__ double shared[32];
  const int64_t n = blockIdx.x;
  const float *xn = x + n * C, *dn = dout + n * C;
  double dot = 0.0;
  for (int c = threadIdx.x * 4; c < C; c += blockDim.x * 4) {
    const Vec<4> d = load_row4<kVec>(dn, c, C), w = load_row4<kVec>(weight, c, C), v = load_row4<kVec>(xn, c, C);
    for (int j = 0; j < 4; j++) dot += double(d.v[j]) * w.v[j] * v.v[j];
  }
  dot = detail::block_sum(dot, shared);
  const double r = rstd[n], k = r * r * r * dot / C;
  for (int c = threadIdx.x * 4; c < C; c += blockDim.x * 4) {
    const Vec<4> d = load_row4<kVec>(dn, c, C), w = load_row4<kVec>(weight, c, C), v = load_row4<kVec>(xn, c, C);
    Vec<4> g = load_row4<kVec>(dx + n * C, c, C);
    for (int j = 0; j < 4; j++) g.v[j] += float(r * w.v[j] * d.v[j] - k * v.v[j]);
    store_row4<kVec>(dx + n * C, c, C, g);
  }
}

// dweight[c] += sum_n dout[n,c] * x[n,c] * rstd[n], first pass: block (column tile of 32, chunk of
// rows); 8 row groups summed in fp64, combined in a fixed order into partials[chunk, c].
__global__ void rmsnorm_dweight_partials_kernel(double* partials, const float* dout, const float* x, const float* rstd,
                                                int N, int C, int rows_per_chunk) {
  __shared__ double partial[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int first = blockIdx.y * rows_per_chunk, last = min(N, first + rows_per_chunk);
  double acc = 0.0;
  if (c < C)
    for (int n = first + threadIdx.y; n < last; n += 8)
      acc += double(dout[int64_t(n) * C + c]) * x[int64_t(n) * C + c] * rstd[n];
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double total = 0.0;
    for (int g = 0; g < 8; g++) total += partial[g][threadIdx.x];
    partials[int64_t(blockIdx.y) * C + c] = total;
  }
}

// Second pass: each column's chunks summed in chunk order.
__global__ void rmsnorm_dweight_sum_kernel(float* dweight, const double* partials, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double total = 0.0;
  for (int k = 0; k < chunks; k++) total += partials[int64_t(k) * C + c];
  dweight[c] += float(total);
}

template <typename T, bool kAdd>
void rmsnorm_launch(T* out, float* rstd, float* resid, const float* a, const float* b, const float* weight, int N,
                    int C, float eps) {
  if (N <= 0) return;
  const bool v4 = vec4_floats(C, a, weight) && vec4_out(out) && (!kAdd || vec4_floats(C, b, resid));
  if (v4)
    rmsnorm_forward_kernel<T, true, kAdd><<<N, kRowThreads, 0, cuda_stream()>>>(out, rstd, resid, a, b, weight, C, eps);
  else
    rmsnorm_forward_kernel<T, false, kAdd>
        <<<N, kRowThreads, 0, cuda_stream()>>>(out, rstd, resid, a, b, weight, C, eps);
  CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

}  // namespace

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const float* x, const float* weight, int N, int C, float eps) {
  rmsnorm_launch<T, false>(out, rstd, nullptr, x, nullptr, weight, N, C, eps);
}
LLAMATRAIN_CUDA_FOR_EACH_OPERAND(LLAMATRAIN_CUDA_INSTANTIATE_RMSNORM_FORWARD)

template <typename T>
void residual_rmsnorm_forward(float* resid, T* out, float* rstd, const float* a, const float* b, const float* weight,
                              int N, int C, float eps) {
  rmsnorm_launch<T, true>(out, rstd, resid, a, b, weight, N, C, eps);
}
LLAMATRAIN_CUDA_FOR_EACH_OPERAND(LLAMATRAIN_CUDA_INSTANTIATE_RESIDUAL_RMSNORM_FORWARD)

void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  if (vec4_floats(C, dx, dout, x, weight))
    rmsnorm_backward_dx_kernel<true><<<N, kRowThreads, 0, cuda_stream()>>>(dx, dout, x, weight, rstd, C);
  else
    rmsnorm_backward_dx_kernel<false><<<N, kRowThreads, 0, cuda_stream()>>>(dx, dout, x, weight, rstd, C);
  CUDA_CHECK_LAUNCH("rmsnorm_backward_dx_kernel");
  if (dweight) {
    const int chunks = int(sizes::norm_weight_chunks(N, C)), rows_per_chunk = (N + chunks - 1) / chunks;
    auto* partials = static_cast<double*>(
        detail::scratch(detail::kScratchNormWeight, size_t(sizes::norm_weight_scratch_bytes(N, C))));
    rmsnorm_dweight_partials_kernel<<<dim3((C + 31) / 32, chunks), dim3(32, 8), 0, cuda_stream()>>>(
        partials, dout, x, rstd, N, C, rows_per_chunk);
    CUDA_CHECK_LAUNCH("rmsnorm_dweight_partials_kernel");
    rmsnorm_dweight_sum_kernel<<<(C + 255) / 256, 256, 0, cuda_stream()>>>(dweight, partials, chunks, C);
    CUDA_CHECK_LAUNCH("rmsnorm_dweight_sum_kernel");
  }
}

}  // namespace llamatrain::cuda
