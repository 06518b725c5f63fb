// Fused lm head + cross-entropy (+ backward); must match ref::matmul_forward followed by
// ref::cross_entropy_forward/backward and ref::matmul_backward, without ever holding (N,V) logits.
// Algorithm, per chunk of R rows (x_c = x[r0 : r0+R]):
//   logits (R,V) = x_c @ wout^T                      oneDNN, into a per-thread chunk buffer
//   per row (OpenMP over rows): max, lse = max + log(sum exp(l - max)), loss = lse - l[target];
//   backward only: dlogits = dloss * (softmax - onehot) (0 for target < 0), in place (f32) or into a
//   bf16 chunk buffer (bf16 mode), then dx_c (R,C) = dlogits @ wout and dwout (V,C) += dlogits^T @ x_c.
// bf16 mode: x_c and dlogits become bf16 operands (with wout_bf16); accumulation and softmax stay fp32.
// exp is a vectorizable polynomial (kernels/cpu/fast_exp.h) instead of libm's scalar expf.
#include "kernels/cpu/lmhead_ce.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/ops.h"

namespace llamatrain::cpu {

namespace detail {

// R = largest multiple of 16 with R*V*4 bytes <= 32 MiB (one Zen CCD's L3), clamped to [64, 256]: 256 rows
// for V = 32000 (31 MiB of fp32 logits, 1/8 of the full (2048,V) at B*T = 2048). Larger R helps twice:
// the forward matmul runs at larger M, and dwout += dlogits^T @ x_c (K = R) streams the whole (V,C)
// dwout once per chunk, doing only R/4 flop per byte of it. Measured on the shared 2-core EPYC
// (bench/matmul_shapes.cpp, M=2048, C=768, V=32000): fwd+bwd 1.2-1.6x faster at R=256 than at R=64.
int lmhead_chunk_rows(int V) {
  if (lmhead_chunk_rows_override() > 0) return lmhead_chunk_rows_override();
  int64_t r = (int64_t(32) << 20) / (4 * int64_t(std::max(V, 1)));
  r = r / 16 * 16;
  return int(std::clamp<int64_t>(r, 64, 256));
}

int& lmhead_chunk_rows_override() {
  static int rows = 0;
  return rows;
}

}  // namespace detail

namespace {

// log-sum-exp of one row of logits (V).
inline float row_lse(const float* l, int V) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < V; j++) mx = std::max(mx, l[j]);
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int j = 0; j < V; j++) s += fast_exp(l[j] - mx);
  return mx + std::log(s);
}

// l (V) = scale * exp(l - lse), in place.
inline void row_softmax_f32(float* __restrict l, float lse, float scale, int V) {
#pragma omp simd
  for (int j = 0; j < V; j++) l[j] = fast_exp(l[j] - lse) * scale;
}

// d (V) = bf16(scale * exp(l - lse)); written through the raw bits so the loop vectorizes.
inline void row_softmax_bf16(bf16* __restrict d, const float* __restrict l, float lse, float scale, int V) {
  uint16_t* bits = reinterpret_cast<uint16_t*>(d);
#pragma omp simd
  for (int j = 0; j < V; j++) bits[j] = to_bf16(fast_exp(l[j] - lse) * scale).bits;
}

}  // namespace

void lmhead_ce_fused(float* losses /*(N)*/, float* dx /*(N,C)*/, float* dwout /*(V,C)*/, const float* x /*(N,C)*/,
                     const float* wout /*(V,C)*/, const bf16* wout_bf16 /*(V,C)*/, const int32_t* targets /*(N)*/,
                     float dloss, int N, int C, int V, ComputeType ct) {
  const bool is_bf16 = ct == ComputeType::bf16;
  CHECK(!is_bf16 || wout_bf16 != nullptr, "lmhead_ce_fused: bf16 compute needs wout_bf16");
  const bool backward = dx != nullptr;
  const int R = std::min(detail::lmhead_chunk_rows(V), std::max(N, 1));
  float* logits = detail::f32_scratch(0, int64_t(R) * V);                          // (R,V)
  bf16* x_b = is_bf16 ? detail::bf16_scratch(0, int64_t(R) * C) : nullptr;          // (R,C)
  bf16* dlogits_b = is_bf16 && backward ? detail::bf16_scratch(1, int64_t(R) * V) : nullptr;  // (R,V)
  const void* w = is_bf16 ? static_cast<const void*>(wout_bf16) : static_cast<const void*>(wout);

  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    const float* x_c = x + int64_t(r0) * C;  // (rows,C)
    const void* xa = x_c;
    if (is_bf16) {
      bf16_from_float(x_b, x_c, int64_t(rows) * C);
      xa = x_b;
    }
    detail::gemm(logits, xa, false, w, true, rows, V, C, is_bf16, false);

#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++) {
      float* l = logits + int64_t(i) * V;  // (V)
      const int32_t t = targets[r0 + i];
      CHECK(t < V, "lmhead_ce_fused: target {} at row {} is out of range for vocab {}", t, r0 + i, V);
      const float lse = row_lse(l, V);
      const float lt = t >= 0 ? l[t] : 0.0f;
      losses[r0 + i] = t >= 0 ? lse - lt : 0.0f;
      if (!backward) continue;
      // dlogits = dloss * (softmax - onehot); ignored rows contribute nothing
      const float scale = t >= 0 ? dloss : 0.0f;
      if (is_bf16) {
        bf16* d = dlogits_b + int64_t(i) * V;  // (V)
        row_softmax_bf16(d, l, lse, scale, V);
        if (t >= 0) d[t] = to_bf16((fast_exp(lt - lse) - 1.0f) * scale);
      } else {
        row_softmax_f32(l, lse, scale, V);
        if (t >= 0) l[t] = (fast_exp(lt - lse) - 1.0f) * scale;
      }
    }
    if (!backward) continue;

    const void* da = is_bf16 ? static_cast<const void*>(dlogits_b) : static_cast<const void*>(logits);
    // dx_c (rows,C) = dlogits (rows,V) @ wout (V,C)
    detail::gemm(dx + int64_t(r0) * C, da, false, w, false, rows, C, V, is_bf16, false);
    // dwout (V,C) += dlogits^T (V,rows) @ x_c (rows,C)
    detail::gemm(dwout, da, true, xa, false, V, C, rows, is_bf16, true);
  }
}

}  // namespace llamatrain::cpu
