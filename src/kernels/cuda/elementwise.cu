// Row and elementwise kernels: embedding, RMSNorm (alone and fused with the residual add before it),
// RoPE, SwiGLU, residual, bias. Each the transcription of kernels/ref's loop; they match cpu:: to fp32
// rounding (tests/kernels/cuda_vs_cpu_test.cpp). Memory bound, so:
//   - rows whose width is a multiple of 4 on 16-byte aligned pointers are read and written 16 bytes
//     at a time (Vec<4> below; bf16 outputs as 8-byte stores of four), other shapes one element at a time;
//   - embedding_backward: a thread per column, the tokens in order (deterministic, no atomics);
//   - rmsnorm: one block per row, the sum of squares and the backward's dot in fp64 as ref does;
//     dweight in two passes: fp64 column sums per chunk of rows (sizes::norm_weight_chunks, enough
//     blocks to fill the GPU), then the chunks summed in order (deterministic, no atomics);
//   - residual_rmsnorm: the residual add and the next norm in one pass over the row;
//   - rope: cos and sin of pos * rope_inv_freq (core/rope.h) computed in fp64 once per shape into a
//     table of fp32 values (sizes::rope_table_rows positions), the same values the CPU's table holds;
//     a position past the table computes its own the same way;
//   - bias_backward: one thread per column, the rows summed in fp64 in order (no atomics).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/bf16.h"
#include "core/rope.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/sizes.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/store.cuh"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;

namespace {

constexpr int kRowThreads = 256;

// W consecutive floats: one 16-byte load or store (W = 4, 16-byte aligned), or W scalar ones.
template <int W>
struct Vec {
  float v[W];
};

template <int W>
__device__ __forceinline__ Vec<W> load_vec(const float* p) {
  Vec<W> r;
  if constexpr (W == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    r.v[0] = q.x;
    r.v[1] = q.y;
    r.v[2] = q.z;
    r.v[3] = q.w;
  } else {
    for (int j = 0; j < W; j++) r.v[j] = p[j];
  }
  return r;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(rng::bf16_bits_rne(lo)) | (uint32_t(rng::bf16_bits_rne(hi)) << 16);
}

// out[0..W) = v as T (float as is, bf16 values rounded to nearest even as detail::put rounds them).
template <int W, typename T>
__device__ __forceinline__ void store_vec(T* out, const Vec<W>& v) {
  if constexpr (W == 4 && std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(out) = make_float4(v.v[0], v.v[1], v.v[2], v.v[3]);
  } else if constexpr (W == 4 && std::is_same_v<T, bf16>) {
    *reinterpret_cast<uint2*>(out) = make_uint2(pack_bf16x2(v.v[0], v.v[1]), pack_bf16x2(v.v[2], v.v[3]));
  } else if constexpr (W == 4 && std::is_same_v<T, bf16_in_f32>) {
    float r[4];
    for (int j = 0; j < 4; j++) r[j] = rng::bf16_bits_to_float(rng::bf16_bits_rne(v.v[j]));
    *reinterpret_cast<float4*>(out) = make_float4(r[0], r[1], r[2], r[3]);
  } else {
    for (int j = 0; j < W; j++) detail::put(out + j, v.v[j]);
  }
}

// Whether rows of `width` elements at these pointers can move 4 at a time: width % 4 == 0 and every
// base 16-byte aligned for floats (8-byte for bf16 outputs: 4 of 2 bytes).
bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
template <typename... P>
bool vec4_floats(int64_t width, const P*... ptrs) {
  return width % 4 == 0 && (aligned(ptrs, 16) && ...);
}
template <typename T>
bool vec4_out(const T* out) {
  return aligned(out, 4 * sizeof(T));
}

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

// Elements c..c+3 of a row of C: one 16-byte access (kVec: C % 4 == 0, aligned rows) or four
// scalar ones, those past C read as 0 and not written. Either way a thread owns the same elements, so
// a row's sums come out in one order whatever the alignment (the fused norm equals the plain one).
template <bool kVec>
__device__ __forceinline__ Vec<4> load_row4(const float* row, int c, int C) {
  if constexpr (kVec) {
    return load_vec<4>(row + c);
  } else {
    Vec<4> r;
    for (int j = 0; j < 4; j++) r.v[j] = c + j < C ? row[c + j] : 0.0f;
    return r;
  }
}
template <bool kVec, typename T>
__device__ __forceinline__ void store_row4(T* row, int c, int C, const Vec<4>& v) {
  if constexpr (kVec) {
    store_vec<4>(row + c, v);
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

// cos and sin of angle p * inv_freq[i] for positions p < rows: (rows, D/2) pairs, in fp64 then fp32.
__global__ void rope_table_kernel(float* table, int rows, int D, RopeFreqs rope) {
  const int half = D / 2;
  const int64_t total = int64_t(rows) * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const double angle = double(idx / half) * rope_inv_freq(rope, int(idx % half), D);
    table[2 * idx] = float(cos(angle));
    table[2 * idx + 1] = float(sin(angle));
  }
}

// One thread per (row, head, pair i): x[i], x[i + D/2] rotated by sign * pos * inv_freq[i], its cos
// and sin from the table (positions below rows) or computed as the table computes them.
__global__ void rope_kernel(float* x, const int32_t* pos, const float* table, int rows, int N, int n_heads,
                            int row_stride, int D, RopeFreqs rope, float sign) {
  const int half = D / 2;
  const int64_t total = int64_t(N) * n_heads * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const int64_t nh = idx / half;
    const int h = int(nh % n_heads);
    const int64_t n = nh / n_heads;
    const int32_t p = pos[n];
    float c, s;
    if (p >= 0 && p < rows) {
      c = table[2 * (int64_t(p) * half + i)];
      s = table[2 * (int64_t(p) * half + i) + 1];
    } else {
      const double angle = double(p) * rope_inv_freq(rope, i, D);
      c = float(cos(angle));
      s = float(sin(angle));
    }
    s = __fmul_rn(sign, s);
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

// W consecutive columns f of a row per thread (F % W == 0).
template <typename T, int W>
__global__ void swiglu_forward_kernel(T* out, const float* h13, int N, int F) {
  const int64_t total = int64_t(N) * F / W;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i * W / F, f = i * W % F;
    const Vec<W> g = load_vec<W>(h13 + n * 2 * F + f), up = load_vec<W>(h13 + n * 2 * F + F + f);
    Vec<W> o;
    for (int j = 0; j < W; j++) o.v[j] = g.v[j] * sigmoid(g.v[j]) * up.v[j];  // silu(gate) * up
    store_vec<W>(out + n * F + f, o);
  }
}

template <typename T, int W>
__global__ void swiglu_backward_kernel(T* dh13, const float* dout, const float* h13, int N, int F) {
  const int64_t total = int64_t(N) * F / W;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i * W / F, f = i * W % F;
    const Vec<W> g = load_vec<W>(h13 + n * 2 * F + f), up = load_vec<W>(h13 + n * 2 * F + F + f);
    const Vec<W> d = load_vec<W>(dout + n * F + f);
    Vec<W> dg, du;
    for (int j = 0; j < W; j++) {
      const float sig = sigmoid(g.v[j]);
      dg.v[j] = d.v[j] * up.v[j] * sig * (1.0f + g.v[j] * (1.0f - sig));  // d silu/dg * up
      du.v[j] = d.v[j] * g.v[j] * sig;                                    // silu(g)
    }
    store_vec<W>(dh13 + n * 2 * F + f, dg);
    store_vec<W>(dh13 + n * 2 * F + F + f, du);
  }
}

// out = a + b: n / W groups of W, then (W = 4) the last n % 4 elements one at a time.
template <int W>
__global__ void residual_kernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t groups = n / W;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < groups; i += int64_t(gridDim.x) * blockDim.x) {
    Vec<W> x = load_vec<W>(a + i * W);
    const Vec<W> y = load_vec<W>(b + i * W);
    for (int j = 0; j < W; j++) x.v[j] = __fadd_rn(x.v[j], y.v[j]);
    store_vec<W>(out + i * W, x);
  }
  const int64_t tail = groups * W + blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (tail < n) out[tail] = __fadd_rn(a[tail], b[tail]);
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

// The table for (D, rope) over at least `rows` positions, in its scratch slot: built when the shape,
// the frequencies or the slot change, else the one built before.
const float* rope_table(int rows, int D, const RopeFreqs& rope) {
  struct Built {
    const void* at = nullptr;
    int rows = 0, D = 0;
    RopeFreqs rope;
  };
  static Built built;
  const int64_t half = D / 2;
  void* at = detail::scratch(detail::kScratchRope, size_t(sizes::rope_table_bytes(rows, D)));  // as planned
  if (at != built.at || D != built.D || !(rope == built.rope) || rows > built.rows) {
    rope_table_kernel<<<grid_for(int64_t(rows) * half), 256, 0, cuda_stream()>>>(static_cast<float*>(at), rows, D,
                                                                                rope);
    CUDA_CHECK_LAUNCH("rope_table_kernel");
    built = Built{at, rows, D, rope};
  }
  return static_cast<const float*>(at);
}

void rope_apply(float* x, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope,
                float sign, bool round_rows) {
  if (N <= 0 || n_heads <= 0 || D < 2) return;
  const int rows = int(sizes::rope_table_rows(N, D));
  const float* table = rope_table(rows, D, rope);
  const int64_t total = int64_t(N) * n_heads * (D / 2);
  rope_kernel<<<grid_for(total), 256, 0, cuda_stream()>>>(x, pos, table, rows, N, n_heads, row_stride, D, rope, sign);
  CUDA_CHECK_LAUNCH("rope_kernel");
  if (round_rows) {
    round_rows_kernel<<<grid_for(int64_t(N) * row_stride), 256, 0, cuda_stream()>>>(x, int64_t(N) * row_stride);
    CUDA_CHECK_LAUNCH("round_rows_kernel");
  }
}

template <typename T, bool kAdd>
void rmsnorm_launch(T* out, float* rstd, float* resid, const float* a, const float* b, const float* weight, int N,
                    int C, float eps) {
  if (N <= 0) return;
  const bool v4 = vec4_floats(C, a, weight) && vec4_out(out) && (!kAdd || vec4_floats(C, b, resid));
  if (v4)
    rmsnorm_forward_kernel<T, true, kAdd><<<N, kRowThreads, 0, cuda_stream()>>>(out, rstd, resid, a, b, weight, C, eps);
  else
    rmsnorm_forward_kernel<T, false, kAdd><<<N, kRowThreads, 0, cuda_stream()>>>(out, rstd, resid, a, b, weight, C,
                                                                                  eps);
  CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
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
  rmsnorm_launch<T, false>(out, rstd, nullptr, x, nullptr, weight, N, C, eps);
}
template void rmsnorm_forward(float*, float*, const float*, const float*, int, int, float);
template void rmsnorm_forward(bf16*, float*, const float*, const float*, int, int, float);
template void rmsnorm_forward(bf16_in_f32*, float*, const float*, const float*, int, int, float);

template <typename T>
void residual_rmsnorm_forward(float* resid, T* out, float* rstd, const float* a, const float* b, const float* weight,
                              int N, int C, float eps) {
  rmsnorm_launch<T, true>(out, rstd, resid, a, b, weight, N, C, eps);
}
template void residual_rmsnorm_forward(float*, float*, float*, const float*, const float*, const float*, int, int,
                                       float);
template void residual_rmsnorm_forward(float*, bf16*, float*, const float*, const float*, const float*, int, int,
                                       float);
template void residual_rmsnorm_forward(float*, bf16_in_f32*, float*, const float*, const float*, const float*, int,
                                       int, float);

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
  if (vec4_floats(F, h13) && vec4_out(out))
    swiglu_forward_kernel<T, 4><<<grid_for(int64_t(N) * F / 4), 256, 0, cuda_stream()>>>(out, h13, N, F);
  else
    swiglu_forward_kernel<T, 1><<<grid_for(int64_t(N) * F), 256, 0, cuda_stream()>>>(out, h13, N, F);
  CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

template <typename T>
void swiglu_backward(T* dh13, const float* dout, const float* h13, int N, int F) {
  if (int64_t(N) * F == 0) return;
  if (vec4_floats(F, dout, h13) && vec4_out(dh13))
    swiglu_backward_kernel<T, 4><<<grid_for(int64_t(N) * F / 4), 256, 0, cuda_stream()>>>(dh13, dout, h13, N, F);
  else
    swiglu_backward_kernel<T, 1><<<grid_for(int64_t(N) * F), 256, 0, cuda_stream()>>>(dh13, dout, h13, N, F);
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
  if (vec4_floats(4, out, a, b))
    residual_kernel<4><<<grid_for(n / 4 + 1), 256, 0, cuda_stream()>>>(out, a, b, n);
  else
    residual_kernel<1><<<grid_for(n), 256, 0, cuda_stream()>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH("residual_kernel");
}

}  // namespace llamatrain::cuda
