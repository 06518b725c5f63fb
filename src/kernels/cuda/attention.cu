// Causal grouped-query attention on packed qkv, as ref::attention_forward / attention_backward:
// the plain kernels, written to be obviously right, not fast. Row n = b*T + t of qkv holds q heads
// [0,H), k heads [0,Hkv), v heads [0,Hkv), each D wide; query head h reads kv head h / (H/Hkv).
//   forward: one block per (b, h, query t); keys in tiles of kThreads (one score per thread), an
//     online softmax over the tiles (running max, rescaled sum and output); thread j owns output
//     dims j, j + kThreads, ...; saves lse = max + log(sum) per query.
//   backward, two kernels and no atomics:
//     dq: one block per (b, h, query t): delta = dout . out, p = exp(s - lse), dp = dout . v,
//         dq = scale * sum_u p (dp - delta) k_u; it also stores delta (B,H,T) for the next kernel;
//     dk, dv: one block per (b, kv head, key u), over every query head of the group and every query
//         t >= u: dk = scale * sum p (dp - delta) q_t, dv = sum p dout_t.
//   decode: one block per query head against the cached rows 0..pos (attention_decode).
// A sliding window (window > 0: key u visible to query t iff t - window < u <= t) only moves the
// first key of a query (and the last query of a key): the loops start (or stop) there. So do
// documents (doc_start, per token the position its document starts at: key u visible to query t
// only if doc_start[t] <= u).
// flash_attention.cu computes the same on tensor cores; these kernels are its reference.
// D <= kMaxD (kThreads * kDimsPerThread).
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"

namespace llamatrain::cuda {

using detail::cuda_stream;

namespace {

constexpr int kThreads = 128;
constexpr int kDimsPerThread = 4;
constexpr int kMaxD = kThreads * kDimsPerThread;

// The first key query t sees: 0, or t - window + 1 under a sliding window, and not before its
// document's start (doc: this sequence's doc_start, or nullptr).
__device__ __forceinline__ int first_key(int t, int window, const int32_t* doc = nullptr) {
  const int u = window > 0 ? max(0, t - window + 1) : 0;
  return doc != nullptr ? max(u, int(doc[t])) : u;
}

__device__ __forceinline__ float dot(const float* a, const float* b, int D) {
  float s = 0.0f;
  for (int d = 0; d < D; d++) s += a[d] * b[d];
  return s;
}

__global__ void attention_forward_kernel(float* out, float* lse, const float* qkv, const int32_t* doc_start, int T,
                                         int H, int Hkv, int D, int window, float scale) {
  extern __shared__ float smem[];
  float* q_sh = smem;      // (D)
  float* p_sh = smem + D;  // (kThreads) probabilities of the current key tile
  __shared__ float red[32];
  const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  const int64_t W = int64_t(H + 2 * Hkv) * D;
  const int kvh = h / (H / Hkv);
  const float* base = qkv + int64_t(b) * T * W;
  const float* k0 = base + int64_t(H + kvh) * D;
  const float* v0 = base + int64_t(H + Hkv + kvh) * D;
  for (int d = tid; d < D; d += kThreads) q_sh[d] = base[int64_t(t) * W + int64_t(h) * D + d];
  __syncthreads();
  float acc[kDimsPerThread] = {};
  float m = -INFINITY, l = 0.0f;
  const int32_t* doc = doc_start != nullptr ? doc_start + int64_t(b) * T : nullptr;
  for (int u0 = first_key(t, window, doc); u0 <= t; u0 += kThreads) {
    const int u = u0 + tid;
    const float s = u <= t ? dot(q_sh, k0 + int64_t(u) * W, D) * scale : -INFINITY;
    const float m_new = fmaxf(m, detail::block_max(s, red));  // finite: key u0 <= t is in the tile
    const float p = u <= t ? expf(s - m_new) : 0.0f;
    p_sh[tid] = p;
    const float tile_sum = detail::block_sum(p, red);  // its barriers also publish p_sh
    const float corr = expf(m - m_new);                // 0 on the first tile (m = -inf)
    l = l * corr + tile_sum;
    const int count = min(kThreads, t - u0 + 1);
#pragma unroll
    for (int j = 0; j < kDimsPerThread; j++) {
      const int d = tid + j * kThreads;
      if (d >= D) break;
      float a = acc[j] * corr;
      for (int i = 0; i < count; i++) a += p_sh[i] * v0[int64_t(u0 + i) * W + d];
      acc[j] = a;
    }
    m = m_new;
    __syncthreads();  // p_sh is rewritten by the next tile
  }
  float* o = out + (int64_t(b) * T + t) * H * D + int64_t(h) * D;
#pragma unroll
  for (int j = 0; j < kDimsPerThread; j++) {
    const int d = tid + j * kThreads;
    if (d < D) o[d] = acc[j] / l;
  }
  if (tid == 0) lse[(int64_t(b) * H + h) * T + t] = m + logf(l);
}

__global__ void attention_backward_dq_kernel(float* dqkv, float* delta_out, const float* dout, const float* qkv,
                                             const float* out, const float* lse, const int32_t* doc_start, int T, int H,
                                             int Hkv, int D, int window, float scale) {
  extern __shared__ float smem[];
  float* q_sh = smem;           // (D)
  float* do_sh = smem + D;      // (D)
  float* ds_sh = smem + 2 * D;  // (kThreads)
  __shared__ float red[32];
  const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  const int64_t W = int64_t(H + 2 * Hkv) * D;
  const int kvh = h / (H / Hkv);
  const float* base = qkv + int64_t(b) * T * W;
  const float* k0 = base + int64_t(H + kvh) * D;
  const float* v0 = base + int64_t(H + Hkv + kvh) * D;
  const int64_t orow = (int64_t(b) * T + t) * H * D + int64_t(h) * D;
  float part = 0.0f;
  for (int d = tid; d < D; d += kThreads) {
    q_sh[d] = base[int64_t(t) * W + int64_t(h) * D + d];
    do_sh[d] = dout[orow + d];
    part += do_sh[d] * out[orow + d];
  }
  const float delta = detail::block_sum(part, red);  // rowdot = sum_u p dp = dout . out; barriers publish q_sh, do_sh
  const int64_t row = (int64_t(b) * H + h) * T + t;
  if (tid == 0) delta_out[row] = delta;
  const float L = lse[row];
  float acc[kDimsPerThread] = {};
  const int32_t* doc = doc_start != nullptr ? doc_start + int64_t(b) * T : nullptr;
  for (int u0 = first_key(t, window, doc); u0 <= t; u0 += kThreads) {
    const int u = u0 + tid;
    float ds = 0.0f;
    if (u <= t) {
      const float p = expf(dot(q_sh, k0 + int64_t(u) * W, D) * scale - L);
      const float dp = dot(do_sh, v0 + int64_t(u) * W, D);
      ds = p * (dp - delta) * scale;
    }
    ds_sh[tid] = ds;
    __syncthreads();
    const int count = min(kThreads, t - u0 + 1);
#pragma unroll
    for (int j = 0; j < kDimsPerThread; j++) {
      const int d = tid + j * kThreads;
      if (d >= D) break;
      float a = acc[j];
      for (int i = 0; i < count; i++) a += ds_sh[i] * k0[int64_t(u0 + i) * W + d];
      acc[j] = a;
    }
    __syncthreads();
  }
  float* dq = dqkv + (int64_t(b) * T + t) * W + int64_t(h) * D;
#pragma unroll
  for (int j = 0; j < kDimsPerThread; j++) {
    const int d = tid + j * kThreads;
    if (d < D) dq[d] = acc[j];
  }
}

__global__ void attention_backward_dkv_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                              const float* delta, const int32_t* doc_start, int T, int H, int Hkv,
                                              int D, int window, float scale) {
  extern __shared__ float smem[];
  float* k_sh = smem;                     // (D)
  float* v_sh = smem + D;                 // (D)
  float* ds_sh = smem + 2 * D;            // (kThreads)
  float* p_sh = smem + 2 * D + kThreads;  // (kThreads)
  const int u = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  const int64_t W = int64_t(H + 2 * Hkv) * D;
  const int group = H / Hkv;
  const float* base = qkv + int64_t(b) * T * W;
  for (int d = tid; d < D; d += kThreads) {
    k_sh[d] = base[int64_t(u) * W + int64_t(H + kvh) * D + d];
    v_sh[d] = base[int64_t(u) * W + int64_t(H + Hkv + kvh) * D + d];
  }
  __syncthreads();
  float dk[kDimsPerThread] = {}, dv[kDimsPerThread] = {};
  const int t_end = window > 0 ? min(T, u + window) : T;  // queries [u, t_end) see key u (if in its document)
  const int32_t* doc = doc_start != nullptr ? doc_start + int64_t(b) * T : nullptr;
  for (int h = kvh * group; h < (kvh + 1) * group; h++) {
    const float* q0 = base + int64_t(h) * D;                            // q of (b, t = 0, h), row stride W
    const float* do0 = dout + int64_t(b) * T * H * D + int64_t(h) * D;  // dout of (b, t = 0, h), row stride H*D
    for (int t0 = u; t0 < t_end; t0 += kThreads) {
      const int t = t0 + tid;
      float p = 0.0f, ds = 0.0f;
      if (t < t_end && (doc == nullptr || doc[t] <= u)) {
        const int64_t row = (int64_t(b) * H + h) * T + t;
        p = expf(dot(q0 + int64_t(t) * W, k_sh, D) * scale - lse[row]);
        const float dp = dot(do0 + int64_t(t) * H * D, v_sh, D);
        ds = p * (dp - delta[row]) * scale;
      }
      p_sh[tid] = p;
      ds_sh[tid] = ds;
      __syncthreads();
      const int count = min(kThreads, t_end - t0);
#pragma unroll
      for (int j = 0; j < kDimsPerThread; j++) {
        const int d = tid + j * kThreads;
        if (d >= D) break;
        float a = dk[j], c = dv[j];
        for (int i = 0; i < count; i++) {
          a += ds_sh[i] * q0[int64_t(t0 + i) * W + d];
          c += p_sh[i] * do0[int64_t(t0 + i) * H * D + d];
        }
        dk[j] = a;
        dv[j] = c;
      }
      __syncthreads();
    }
  }
  float* row = dqkv + (int64_t(b) * T + u) * W;
#pragma unroll
  for (int j = 0; j < kDimsPerThread; j++) {
    const int d = tid + j * kThreads;
    if (d >= D) break;
    row[int64_t(H + kvh) * D + d] = dk[j];
    row[int64_t(H + Hkv + kvh) * D + d] = dv[j];
  }
}

// Decode: one block per query head h at position pos, against cache rows 0..pos ([k heads | v heads]):
// scores = scale * q.k_t (fp32, as ref), p = exp(s - max) / sum (sum in fp64), out = sum_t p_t v_t.
__global__ void attention_decode_kernel(float* out, float* scores, const float* q, const float* kv_cache, int pos,
                                        int H, int Hkv, int D, int window, float scale) {
  __shared__ float red_f[32];
  __shared__ double red_d[32];
  const int h = blockIdx.x, tid = threadIdx.x;
  const int64_t KV = 2 * int64_t(Hkv) * D;
  const int kvh = h / (H / Hkv);
  const float* k = kv_cache + int64_t(kvh) * D;
  const float* v = kv_cache + int64_t(Hkv) * D + int64_t(kvh) * D;
  const float* qh = q + int64_t(h) * D;
  float* s = scores + int64_t(h) * (pos + 1);
  float mx = -INFINITY;
  const int t0 = first_key(pos, window);
  for (int t = t0 + tid; t <= pos; t += kThreads) {
    s[t] = dot(qh, k + t * KV, D) * scale;
    mx = fmaxf(mx, s[t]);
  }
  mx = detail::block_max(mx, red_f);  // its barriers also publish s
  double sum = 0.0;
  for (int t = t0 + tid; t <= pos; t += kThreads) sum += exp(double(s[t]) - mx);
  sum = detail::block_sum(sum, red_d);
  for (int d = tid; d < D; d += kThreads) {
    double acc = 0.0;
    for (int t = t0; t <= pos; t++) acc += exp(double(s[t]) - mx) / sum * v[t * KV + d];
    out[int64_t(h) * D + d] = float(acc);
  }
}

void check_shape(const char* op, int B, int T, int H, int Hkv, int D) {
  if (Hkv > 0 && H % Hkv == 0 && D > 0 && D <= kMaxD && H <= 65535 && B <= 65535) return;  // grid (T, H, B)
  detail::raise_error(std::string("cuda::") + op + ": unsupported shape B=" + std::to_string(B) +
                      " T=" + std::to_string(T) + " H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) +
                      " D=" + std::to_string(D) + ", expected H a multiple of Hkv, D <= " + std::to_string(kMaxD) +
                      " and B, H <= 65535");
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv, int D, int window,
                       const int32_t* doc_start) {
  if (B <= 0 || T <= 0 || H <= 0) return;
  check_shape("attention_forward", B, T, H, Hkv, D);
  const float scale = float(1.0 / std::sqrt(double(D)));
  const size_t shared = size_t(D + kThreads) * sizeof(float);
  attention_forward_kernel<<<dim3(T, H, B), kThreads, shared, cuda_stream()>>>(out, lse, qkv, doc_start, T, H, Hkv, D,
                                                                               window, scale);
  CUDA_CHECK_LAUNCH("attention_forward_kernel");
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                        int T, int H, int Hkv, int D, int window, const int32_t* doc_start) {
  if (B <= 0 || T <= 0 || H <= 0) return;
  check_shape("attention_backward", B, T, H, Hkv, D);
  const float scale = float(1.0 / std::sqrt(double(D)));
  auto* delta = static_cast<float*>(detail::scratch(detail::kScratchAttention, size_t(B) * H * T * sizeof(float)));
  attention_backward_dq_kernel<<<dim3(T, H, B), kThreads, size_t(2 * D + kThreads) * sizeof(float), cuda_stream()>>>(
      dqkv, delta, dout, qkv, out, lse, doc_start, T, H, Hkv, D, window, scale);
  CUDA_CHECK_LAUNCH("attention_backward_dq_kernel");
  attention_backward_dkv_kernel<<<dim3(T, Hkv, B), kThreads, size_t(2 * D + 2 * kThreads) * sizeof(float),
                                  cuda_stream()>>>(dqkv, dout, qkv, lse, delta, doc_start, T, H, Hkv, D, window, scale);
  CUDA_CHECK_LAUNCH("attention_backward_dkv_kernel");
}

void attention_decode(float* out, float* scores, const float* q, const float* kv_cache, int pos, int H, int Hkv, int D,
                      int window) {
  if (H <= 0 || pos < 0) return;
  check_shape("attention_decode", 1, pos + 1, H, Hkv, D);
  const float scale = 1.0f / std::sqrt(float(D));
  attention_decode_kernel<<<H, kThreads, 0, cuda_stream()>>>(out, scores, q, kv_cache, pos, H, Hkv, D, window, scale);
  CUDA_CHECK_LAUNCH("attention_decode_kernel");
}

}  // namespace llamatrain::cuda
