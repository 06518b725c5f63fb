// Device memory the CUDA backend holds besides the model's arenas, as formulas: what plan and
// preflight count for a GPU, on any machine (a login node without a GPU or a CUDA build plans for
// one too). Pure arithmetic, compiled in every build; the kernels size their scratch with the same
// functions (lmhead_ce.cu, runtime.cpp), so the plan and the allocation cannot drift apart. The fixed
// runtime figures are estimates that scripts/device_check.sh measures on the GPU.
#pragma once

#include <algorithm>
#include <cstdint>

namespace llamatrain::cuda::sizes {

// Logits the fused lm head + cross-entropy computes at a time: chunks of rows within this many bytes.
constexpr int64_t kLogitsBytes = int64_t(256) << 20;
// cuBLASLt's one workspace, shared by every gemm (gemm.cpp).
constexpr int64_t kGemmWorkspaceBytes = int64_t(32) << 20;
// The CUDA context and the kernels it loads (lazily: the ones a run calls), cuBLASLt's handle: an
// estimate (CUDA 12-13 on Hopper: 0.5-0.6 GB); scripts/device_check.sh reports the measured figure.
constexpr int64_t kContextBytes = int64_t(640) << 20;
// cudaMalloc hands out large blocks in 2 MiB pages: each of the model's ~40 buffers may waste up to one.
constexpr int64_t kAllocatorSlackBytes = int64_t(40) * (int64_t(2) << 20);
// A scratch slot grows to its largest request plus an eighth (runtime.cpp's detail::scratch).
constexpr int64_t grown(int64_t bytes) { return bytes + bytes / 8; }

// Rows of logits per chunk for N rows of a V-wide vocabulary.
constexpr int64_t lmhead_chunk_rows(int64_t N, int64_t V, int64_t logits_bytes = kLogitsBytes) {
  return std::max<int64_t>(1, std::min<int64_t>(N, logits_bytes / (std::max<int64_t>(V, 1) * 4)));
}

// The lm head's scratch for N tokens: the chunk's fp32 logits; in bf16 compute also its bf16
// dlogits and the chunk of x rounded to bf16 (or x as bf16 values in floats, with a float weight).
constexpr int64_t lmhead_scratch_bytes(int64_t N, int64_t C, int64_t V, bool bf16_compute, bool float_weight = false,
                                       int64_t logits_bytes = kLogitsBytes) {
  if (N <= 0) return 0;
  const int64_t R = lmhead_chunk_rows(N, V, logits_bytes);
  int64_t bytes = R * V * 4;
  if (bf16_compute && !float_weight) bytes += R * V * 2 + R * C * 2;
  if (bf16_compute && float_weight) bytes += R * C * 4;
  return bytes;
}

// rmsnorm_backward's weight gradient in two passes: the rows in chunks of at least 32, each chunk's
// fp64 column sums (at most kNormWeightPartials of them, 64 chunks), then the chunks summed in order.
constexpr int64_t kNormWeightPartials = int64_t(1) << 20;
constexpr int64_t norm_weight_chunks(int64_t N, int64_t C) {
  return std::max<int64_t>(
      1, std::min<int64_t>({int64_t(64), kNormWeightPartials / std::max<int64_t>(C, 1), (N + 31) / 32}));
}
constexpr int64_t norm_weight_scratch_bytes(int64_t N, int64_t C) { return norm_weight_chunks(N, C) * C * 8; }

// RoPE's table: cos and sin (fp32) of every (position, pair) for positions below rope_table_rows
// (the tokens of a call, within kRopeTableEntries pairs); a larger position computes its own.
constexpr int64_t kRopeTableEntries = int64_t(1) << 20;
constexpr int64_t rope_table_rows(int64_t N, int64_t D) {
  return std::max<int64_t>(1, std::min<int64_t>(N, kRopeTableEntries / std::max<int64_t>(D / 2, 1)));
}
constexpr int64_t rope_table_bytes(int64_t N, int64_t D) {
  return rope_table_rows(N, D) * std::max<int64_t>(D / 2, 1) * 8;
}

// The runtime's memory for micro-batches of N = B x T tokens on a rank whose widest matmul operand
// row has `widest` elements (max of C, the q/k/v width and 2F) and whose attention has H query heads:
// context, workspace, allocator rounding, the two operand-conversion slots (bf16 compute rounds
// float operands into them: at most N x widest bf16 values each), attention's backward row sums
// (B, H, T), the gradient norm's fp64 partials, the norm weight gradient's partials and the RoPE
// table (each at most 8 MB, or a row of `widest` where that is larger).
constexpr int64_t runtime_bytes(int64_t B, int64_t T, int64_t widest, int64_t H, bool bf16_compute) {
  const int64_t N = B * T;
  const int64_t conversions = bf16_compute ? 2 * grown(N * widest * 2) : 0;
  const int64_t tables =
      grown(std::max(kNormWeightPartials * 8, widest * 8)) + grown(std::max(kRopeTableEntries * 8, widest * 4));
  return kContextBytes + kGemmWorkspaceBytes + kAllocatorSlackBytes + conversions + grown(B * H * T * 4) +
         grown(int64_t(1) << 23) + tables;
}

}  // namespace llamatrain::cuda::sizes
