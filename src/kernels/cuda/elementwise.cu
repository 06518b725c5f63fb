// Row and elementwise kernels: embedding, RMSNorm, RoPE, SwiGLU, residual, bias. Plain kernels, one
// thread per output element or one block per row, each the obvious transcription of kernels/ref's
// loop; they match cpu:: to fp32 rounding (tests/kernels/cuda_vs_cpu_test.cpp).
//   - embedding_backward: a thread per column, the tokens in order (deterministic, no atomics);
//   - rmsnorm: one block per row, the sum of squares and the backward's dot in fp64 as ref does;
//     dweight's column sums run over the rows in a fixed order (no atomics);
//   - rope: angle = pos * rope_inv_freq (core/rope.h) in fp64 (as kernels/cpu/rope.cpp builds its
//     table), then cos/sin rounded to fp32;
//   - bias_backward: one thread per column, the rows summed in fp64 in order (no atomics).
#include <cuda_runtime.h>

#include "core/bf16.h"
#include "core/rope.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/store.cuh"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;

namespace {

constexpr int kRowThreads = 256;

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte, int N, int C) {
  const int64_t total = int64_t(N) * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    out[i] = wte[int64_t(tokens[n]) * C + c];
  }
}

// One thread per column, over the tokens in order: a repeated token's rows add in token order, as
// ref's loop adds them, and every run the same (no atomics: a resumed run repeats its bits).
__global__ void embedding_backward_kernel(float* dwte, const float* __restrict__ dout,
                                          const int32_t* __restrict__ tokens, int N, int C) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x)
    for (int n = 0; n < N; n++) dwte[int64_t(tokens[n]) * C + c] += dout[int64_t(n) * C + c];
}

// One block per row: rstd = 1/sqrt(mean(x^2) + eps) (fp64 sum), out = (x * rstd) * weight.
template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const float* x, const float* weight, int C, float eps) {
  __shared__ double shared[32];
  const int64_t n = blockIdx.x;
  const float* xn = x + n * C;
  double ss = 0.0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) ss += double(xn[c]) * xn[c];
  ss = detail::block_sum(ss, shared);
  const float r = float(1.0 / sqrt(ss / C + double(eps)));
  if (threadIdx.x == 0) rstd[n] = r;
  for (int c = threadIdx.x; c < C; c += blockDim.x) detail::put(out + n * C + c, __fmul_rn(__fmul_rn(xn[c], r), weight[c]));
}

// dx[n,c] += rstd*w_c*dout_c - rstd^3/C * x_c * sum_c' dout_c' w_c' x_c'.
__global__ void rmsnorm_backward_dx_kernel(float* dx, const float* dout, const float* x, const float* weight,
                                           const float* rstd, int C) {
  __shared__ double shared[32];
  const int64_t n = blockIdx.x;
  const float *xn = x + n * C, *dn = dout + n * C;
  double dot = 0.0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dot += double(dn[c]) * weight[c] * xn[c];
  dot = detail::block_sum(dot, shared);
  const double r = rstd[n], k = r * r * r * dot / C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) dx[n * C + c] += float(r * weight[c] * dn[c] - k * xn[c]);
}

// dweight[c] += sum_n dout[n,c] * x[n,c] * rstd[n]: 32 columns per block, 8 row groups summed in fp64,
// the groups combined in a fixed order.
__global__ void rmsnorm_backward_dweight_kernel(float* dweight, const float* dout, const float* x, const float* rstd,
                                                int N, int C) {
  __shared__ double partial[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  double acc = 0.0;
  if (c < C)
    for (int n = threadIdx.y; n < N; n += 8) acc += double(dout[int64_t(n) * C + c]) * x[int64_t(n) * C + c] * rstd[n];
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double total = 0.0;
    for (int g = 0; g < 8; g++) total += partial[g][threadIdx.x];
    dweight[c] += float(total);
  }
}

// One thread per (row, head, pair i): x[i], x[i + D/2] rotated by sign * pos * inv_freq[i].
__global__ void rope_kernel(float* x, const int32_t* pos, int N, int n_heads, int row_stride, int D, RopeFreqs rope,
                            float sign) {
  const int half = D / 2;
  const int64_t total = int64_t(N) * n_heads * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const int64_t nh = idx / half;
    const int h = int(nh % n_heads);
    const int64_t n = nh / n_heads;
    const double angle = double(pos[n]) * rope_inv_freq(rope, i, D);
    const float c = float(cos(angle)), s = __fmul_rn(sign, float(sin(angle)));
    float* xh = x + n * row_stride + int64_t(h) * D;
    const float x1 = xh[i], x2 = xh[i + half];
    xh[i] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
    xh[i + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  }
}

// Rows [0, N) of row_stride floats each rounded to bf16 values (nearest even), in place.
__global__ void round_rows_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = rng::bf16_bits_to_float(rng::bf16_bits_rne(x[i]));
}

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const float* h13, int N, int F) {
  const int64_t total = int64_t(N) * F;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / F, f = i % F;
    const float g = h13[n * 2 * F + f], up = h13[n * 2 * F + F + f];
    detail::put(out + i, g * sigmoid(g) * up);  // silu(gate) * up
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dh13, const float* dout, const float* h13, int N, int F) {
  const int64_t total = int64_t(N) * F;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / F, f = i % F;
    const float g = h13[n * 2 * F + f], up = h13[n * 2 * F + F + f], d = dout[i], sig = sigmoid(g);
    detail::put(dh13 + n * 2 * F + f, d * up * sig * (1.0f + g * (1.0f - sig)));  // d silu/dg * up
    detail::put(dh13 + n * 2 * F + F + f, d * g * sig);                              // silu(g)
  }
}

__global__ void residual_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void bias_forward_kernel(float* x, const float* bias, int OC, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += bias[i % OC];
}

__global__ void bias_backward_kernel(float* dbias, const float* dout, int N, int OC) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  double total = 0.0;
  for (int n = 0; n < N; n++) total += dout[int64_t(n) * OC + c];
  dbias[c] += float(total);
}

void rope_apply(float* x, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope,
                float sign, bool round_rows) {
  if (N <= 0 || n_heads <= 0 || D < 2) return;
  const int64_t total = int64_t(N) * n_heads * (D / 2);
  rope_kernel<<<grid_for(total), 256, 0, cuda_stream()>>>(x, pos, N, n_heads, row_stride, D, rope, sign);
  CUDA_CHECK_LAUNCH("rope_kernel");
  if (round_rows) {
    round_rows_kernel<<<grid_for(int64_t(N) * row_stride), 256, 0, cuda_stream()>>>(x, int64_t(N) * row_stride);
    CUDA_CHECK_LAUNCH("round_rows_kernel");
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

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const float* x, const float* weight, int N, int C, float eps) {
  if (N <= 0) return;
  rmsnorm_forward_kernel<T><<<N, kRowThreads, 0, cuda_stream()>>>(out, rstd, x, weight, C, eps);
  CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}
template void rmsnorm_forward(float*, float*, const float*, const float*, int, int, float);
template void rmsnorm_forward(bf16*, float*, const float*, const float*, int, int, float);
template void rmsnorm_forward(bf16_in_f32*, float*, const float*, const float*, int, int, float);

void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_backward_dx_kernel<<<N, kRowThreads, 0, cuda_stream()>>>(dx, dout, x, weight, rstd, C);
  CUDA_CHECK_LAUNCH("rmsnorm_backward_dx_kernel");
  if (dweight) {
    rmsnorm_backward_dweight_kernel<<<(C + 31) / 32, dim3(32, 8), 0, cuda_stream()>>>(dweight, dout, x, rstd, N, C);
    CUDA_CHECK_LAUNCH("rmsnorm_backward_dweight_kernel");
  }
}

void rope_forward(float* x, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope) {
  rope_apply(x, pos, N, n_heads, row_stride, D, rope, 1.0f, false);
}

void rope_backward(float* dx, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope,
                   bool round_rows) {
  rope_apply(dx, pos, N, n_heads, row_stride, D, rope, -1.0f, round_rows);
}

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

template <typename T>
void swiglu_forward(T* out, const float* h13, int N, int F) {
  if (int64_t(N) * F == 0) return;
  swiglu_forward_kernel<T><<<grid_for(int64_t(N) * F), 256, 0, cuda_stream()>>>(out, h13, N, F);
  CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

template <typename T>
void swiglu_backward(T* dh13, const float* dout, const float* h13, int N, int F) {
  if (int64_t(N) * F == 0) return;
  swiglu_backward_kernel<T><<<grid_for(int64_t(N) * F), 256, 0, cuda_stream()>>>(dh13, dout, h13, N, F);
  CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}
template void swiglu_forward(float*, const float*, int, int);
template void swiglu_forward(bf16*, const float*, int, int);
template void swiglu_forward(bf16_in_f32*, const float*, int, int);
template void swiglu_backward(float*, const float*, const float*, int, int);
template void swiglu_backward(bf16*, const float*, const float*, int, int);
template void swiglu_backward(bf16_in_f32*, const float*, const float*, int, int);

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  residual_kernel<<<grid_for(n), 256, 0, cuda_stream()>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH("residual_kernel");
}

}  // namespace llamatrain::cuda
