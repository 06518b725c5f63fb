// Internal to kernels/cpu (and its tests and benches): the blocking of cpu::lmhead_ce_forward /
// lmhead_ce_backward and their per-row softmax helpers (shared with the vocabulary-parallel
// cross-entropy and the bench's copy of the earlier chunked algorithm).
// Forward chunks hold R rows of fp32 logits (R*V floats); backward blocks hold G rows of dlogits
// (G*V, bf16 or fp32); see lmhead_ce.cpp for why R and G are what they are.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/bf16.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/ops.h"

namespace llamatrain::cpu::detail {

// Rows per forward chunk for vocabulary size V (>= 1): lmhead_chunk_rows_for(V, this machine's
// last-level cache), or the override.
int lmhead_chunk_rows(int V);
// Rows per forward chunk for vocabulary size V with a last-level cache of cache_bytes (<= 0: unknown).
int lmhead_chunk_rows_for(int V, int64_t cache_bytes);
// Rows per backward block for N rows (>= 1): a multiple of lmhead_chunk_rows(V), or N when all fit.
// ct is the dlogits dtype: bf16 (2 bytes) for the bf16 kernel, f32 (4 bytes) otherwise.
int lmhead_block_rows(int N, int V, ComputeType ct);
// When > 0, replace lmhead_chunk_rows() / lmhead_block_rows() (tests force many small chunks and
// blocks; benches sweep them). The block override is rounded up to a multiple of the chunk rows.
// Not thread-safe.
int& lmhead_chunk_rows_override();
int& lmhead_block_rows_override();

// Max of one row of logits (V).
inline float row_max(const float* l, int V) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < V; j++) mx = std::max(mx, l[j]);
  return mx;
}

// l (V) = exp(l - mx) in place; returns their sum.
inline float row_exp_sum(float* l, float mx, int V) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int j = 0; j < V; j++) {
    l[j] = fast_exp(l[j] - mx);
    s += l[j];
  }
  return s;
}

// d (V) = scale * e, fp32 (d may be e) or bf16 (written through the raw bits so the loop vectorizes).
inline void row_scale_f32(float* d, const float* e, float scale, int V) {
#pragma omp simd
  for (int j = 0; j < V; j++) d[j] = e[j] * scale;
}
inline void row_scale_bf16(bf16* __restrict d, const float* __restrict e, float scale, int V) {
  uint16_t* bits = reinterpret_cast<uint16_t*>(d);
#pragma omp simd
  for (int j = 0; j < V; j++) bits[j] = to_bf16(e[j] * scale).bits;
}
// d (V) = scale * e rounded to nearest even bf16, kept in fp32 (d may be e): the values row_scale_bf16
// stores, for the fp32 kernel on bf16 values.
inline void row_scale_bf16_values(float* d, const float* e, float scale, int V) {
#pragma omp simd
  for (int j = 0; j < V; j++) d[j] = to_float(to_bf16(e[j] * scale));
}

}  // namespace llamatrain::cpu::detail
