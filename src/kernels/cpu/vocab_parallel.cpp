// Fast vocabulary-parallel embedding and cross-entropy (the steps of ref::vocab_parallel_*, between
// which the model communicates over the TP ranks). OpenMP over rows, except the embedding's backward,
// whose threads split the columns in 64-float chunks and walk all tokens in order: repeated tokens
// sum in the order of one rank's embedding_backward. Each cross-entropy row goes through the fused
// lm head's own per-row steps (lmhead_ce.h: max, fast_exp sum, scaling), so a split vocabulary differs
// from one rank only in the order of the sum of exponentials.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/bf16.h"
#include "kernels/cpu/lmhead_ce.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {

namespace {
// The local row of a token, or -1 when another rank holds it.
int64_t local_row(int32_t token, int64_t vocab_begin, int V) {
  const int64_t t = int64_t(token) - vocab_begin;
  return t >= 0 && t < V ? t : -1;
}
}  // namespace

void vocab_parallel_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin, int V,
                                      int N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    const int64_t t = local_row(tokens[n], vocab_begin, V);
    if (t >= 0)
      std::memcpy(out + n * C, wte + t * C, sizeof(float) * size_t(C));
    else
      std::fill(out + n * C, out + (n + 1) * C, 0.0f);
  }
}

void vocab_parallel_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t vocab_begin,
                                       int V, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += 64) {
    const int c1 = std::min(C, c0 + 64);
    for (int64_t n = 0; n < N; n++) {
      const int64_t t = local_row(tokens[n], vocab_begin, V);
      if (t < 0) continue;
      for (int c = c0; c < c1; c++) dwte[t * C + c] += dout[n * C + c];
    }
  }
}

void vocab_parallel_ce_max(float* local_max, const float* logits, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) local_max[n] = cpu::detail::row_max(logits + n * V, V);
}

void vocab_parallel_ce_partials(float* partials, float* global_max, float* logits, const float* maxima, int P,
                                const int32_t* targets, int64_t vocab_begin, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    float mx = maxima[n];
    for (int64_t p = 1; p < P; p++) mx = std::max(mx, maxima[p * N + n]);
    global_max[n] = mx;
    float* row = logits + n * V;
    const int64_t t = targets[n] < 0 ? -1 : local_row(targets[n], vocab_begin, V);
    partials[2 * n + 1] = t >= 0 ? row[t] : 0.0f;
    partials[2 * n] = cpu::detail::row_exp_sum(row, mx, V);  // row now holds exp(logit - max)
  }
}

void vocab_parallel_ce_forward(float* losses, const float* global_max, const float* partials, const int32_t* targets,
                               int N) {
  for (int64_t n = 0; n < N; n++)
    losses[n] = targets[n] < 0 ? 0.0f : global_max[n] + std::log(partials[2 * n]) - partials[2 * n + 1];
}

void vocab_parallel_ce_backward(float* exps, const float* partials, const int32_t* targets, int64_t vocab_begin,
                                float dloss, int N, int V, bool bf16_values) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    float* row = exps + n * V;
    if (targets[n] < 0) {
      std::fill(row, row + V, 0.0f);
      continue;
    }
    const float sum = partials[2 * n], scale = dloss / sum;
    const int64_t t = local_row(targets[n], vocab_begin, V);
    const float dt = t >= 0 ? (row[t] / sum - 1.0f) * dloss : 0.0f;
    if (bf16_values) {
      cpu::detail::row_scale_bf16_values(row, row, scale, V);
      if (t >= 0) row[t] = to_float(to_bf16(dt));
    } else {
      cpu::detail::row_scale_f32(row, row, scale, V);
      if (t >= 0) row[t] = dt;
    }
  }
}

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT
