// Fused lm head + cross-entropy (+ backward); must match ref::matmul_forward followed by
// ref::cross_entropy_forward/backward and ref::matmul_backward, without ever holding (N,V) fp32 logits.
// Algorithm, per block of G rows (all N rows when G*V dlogits fit in 128 MiB), per chunk of R rows in it:
//   logits (R,V) = x_c @ wout^T                     oneDNN, into a chunk buffer (fp32 backward: straight
//                                                   into the fp32 dlogits block)
//   per row (OpenMP over rows): max, e = exp(l - max) kept in place, lse = max + log(sum e),
//   loss = lse - l[target]; backward only: dlogits = dloss * (e / sum - onehot) (0 for target < 0)
//   into the block's dlogits (G,V), bf16 in bf16 mode;
// then, once per block: dx_g (G,C) = dlogits @ wout and dwout (V,C) += dlogits^T @ x_g (K = G).
// One dwout update per block instead of one per chunk: the (V,C) fp32 dwout is streamed once per call
// at G = N, and both backward matmuls run at their full size. Evaluation (dx == nullptr) keeps only
// the chunk. bf16 mode: x and dlogits are bf16 operands (with wout_bf16); softmax and accumulation are
// fp32. Each row's softmax is independent of the thread count. exp is kernels/cpu/fast_exp.h.
#include "kernels/cpu/lmhead_ce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/ops.h"

namespace llamatrain::cpu {

namespace detail {

// R = largest multiple of 16 with R*V*4 bytes <= 32 MiB (one Zen CCD's L3), clamped to [64, 256]: 256
// rows for V = 32000, so the softmax reads the logits the gemm just wrote from cache. Larger R gained
// nothing measurable once the backward matmuls left the chunk loop (bench_matmul, M = 2048).
int lmhead_chunk_rows(int V) {
  if (lmhead_chunk_rows_override() > 0) return lmhead_chunk_rows_override();
  int64_t r = (int64_t(32) << 20) / (4 * int64_t(std::max(V, 1)));
  r = r / 16 * 16;
  return int(std::clamp<int64_t>(r, 64, 256));
}

// G = N when G*V dlogits (bf16: 2 bytes, fp32: 4) fit in 128 MiB, else the largest multiple of R that
// fits: memory stays bounded whatever B*T. N = 2048, V = 32000: bf16 one block of 2048 rows (131 MB);
// fp32 two blocks of 1024 (131 MB), measured as fast as one of 2048 (262 MB) and ~3% faster than
// blocks of 256 (bench_matmul, interleaved, 2 threads).
int lmhead_block_rows(int N, int V, ComputeType ct) {
  const int R = lmhead_chunk_rows(V);
  if (lmhead_block_rows_override() > 0) return (lmhead_block_rows_override() + R - 1) / R * R;
  const int64_t elem = ct == ComputeType::bf16 ? 2 : 4;
  const int64_t fit = (int64_t(128) << 20) / (elem * int64_t(std::max(V, 1)));
  if (N <= fit) return std::max(N, 1);
  return int(std::max<int64_t>(fit / R, 1) * R);
}

int& lmhead_chunk_rows_override() {
  static int rows = 0;
  return rows;
}

int& lmhead_block_rows_override() {
  static int rows = 0;
  return rows;
}

}  // namespace detail

int64_t lmhead_ce_scratch_bytes(int N, int C, int V, ComputeType ct) {
  const int64_t R = std::min(detail::lmhead_chunk_rows(V), std::max(N, 1));
  const int64_t G = std::min(detail::lmhead_block_rows(N, V, ct), std::max(N, 1));
  if (ct == ComputeType::f32) return 4 * G * V;  // the dlogits block doubles as the logits chunk
  return 4 * R * V + 2 * G * V + 2 * G * C;      // logits chunk, bf16 dlogits block, bf16 x block
}

void lmhead_ce_fused(float* losses /*(N)*/, float* dx /*(N,C)*/, float* dwout /*(V,C)*/, const float* x /*(N,C)*/,
                     const float* wout /*(V,C)*/, const bf16* wout_bf16 /*(V,C)*/, const int32_t* targets /*(N)*/,
                     float dloss, int N, int C, int V, ComputeType ct) {
  const bool is_bf16 = ct == ComputeType::bf16;
  CHECK(!is_bf16 || wout_bf16 != nullptr, "lmhead_ce_fused: bf16 compute needs wout_bf16");
  const bool backward = dx != nullptr;
  const int R = std::min(detail::lmhead_chunk_rows(V), std::max(N, 1));
  const int G = backward ? std::min(detail::lmhead_block_rows(N, V, ct), std::max(N, 1)) : R;
  const int64_t elem = is_bf16 ? 2 : 4;
  const void* w = is_bf16 ? static_cast<const void*>(wout_bf16) : static_cast<const void*>(wout);
  // fp32 backward: the logits gemm writes straight into the dlogits block, the softmax works in place.
  float* dlog_f = !is_bf16 && backward ? detail::f32_scratch(0, int64_t(G) * V) : nullptr;          // (G,V)
  float* logits = dlog_f != nullptr ? nullptr : detail::f32_scratch(0, int64_t(R) * V);             // (R,V)
  bf16* dlog_b = is_bf16 && backward ? detail::bf16_scratch(1, int64_t(G) * V) : nullptr;           // (G,V)
  bf16* x_b = is_bf16 ? detail::bf16_scratch(0, int64_t(G) * C) : nullptr;                          // (G,C)

  for (int g0 = 0; g0 < N; g0 += G) {
    const int rows_g = std::min(G, N - g0);
    const void* xg = x + int64_t(g0) * C;  // (rows_g,C)
    if (is_bf16) {
      bf16_from_float(x_b, x + int64_t(g0) * C, int64_t(rows_g) * C);
      xg = x_b;
    }
    for (int r0 = g0; r0 < g0 + rows_g; r0 += R) {
      const int rows = std::min(R, g0 + rows_g - r0);
      float* lc = dlog_f != nullptr ? dlog_f + int64_t(r0 - g0) * V : logits;  // (rows,V)
      detail::gemm(lc, static_cast<const char*>(xg) + (r0 - g0) * int64_t(C) * elem, false, w, true, rows, V, C,
                   is_bf16, false);
#pragma omp parallel for schedule(static)
      for (int i = 0; i < rows; i++) {
        float* l = lc + int64_t(i) * V;  // (V)
        const int n = r0 + i;
        const int32_t t = targets[n];
        CHECK(t < V, "lmhead_ce_fused: target {} at row {} is out of range for vocab {}", t, n, V);
        // one exp per logit; evaluation takes the same steps, so its losses are bitwise the same
        const float mx = detail::row_max(l, V);
        const float lt = t >= 0 ? l[t] : 0.0f;
        const float sum = detail::row_exp_sum(l, mx, V);
        const float lse = mx + std::log(sum);
        losses[n] = t >= 0 ? lse - lt : 0.0f;
        if (!backward) continue;
        // dlogits = dloss * (softmax - onehot); ignored rows contribute nothing
        const float scale = t >= 0 ? dloss / sum : 0.0f;
        const float dt = t >= 0 ? (l[t] / sum - 1.0f) * dloss : 0.0f;
        if (is_bf16) {
          bf16* d = dlog_b + int64_t(n - g0) * V;  // (V)
          detail::row_scale_bf16(d, l, scale, V);
          if (t >= 0) d[t] = to_bf16(dt);
        } else {
          detail::row_scale_f32(l, l, scale, V);
          if (t >= 0) l[t] = dt;
        }
      }
    }
    if (!backward) continue;

    const void* da = is_bf16 ? static_cast<const void*>(dlog_b) : static_cast<const void*>(dlog_f);
    // dx_g (rows_g,C) = dlogits (rows_g,V) @ wout (V,C)
    detail::gemm(dx + int64_t(g0) * C, da, false, w, false, rows_g, C, V, is_bf16, false);
    // dwout (V,C) += dlogits^T (V,rows_g) @ x_g (rows_g,C)
    detail::gemm(dwout, da, true, xg, false, V, C, rows_g, is_bf16, true);
  }
}

}  // namespace llamatrain::cpu
