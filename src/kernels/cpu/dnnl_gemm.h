// Internal to kernels/cpu: the one oneDNN matmul entry point that matmul.cpp and lmhead_ce.cpp share,
// plus per-thread bf16 scratch buffers. Implemented in matmul.cpp (the only file that includes oneDNN).
// Transposes are expressed through memory-descriptor strides (format tags ab / ba), never by copying.
// Not thread-safe to call from several caller threads at once (oneDNN's default global scratchpad);
// kernels are called from one thread and parallelize inside.
#pragma once

#include <cstdint>

#include "core/bf16.h"

namespace llamatrain::cpu::detail {

// c (M,N) = op(a) @ op(b), or c += ... when accumulate (oneDNN sum post-op); c is always fp32.
// a is stored row-major as (M,K), or as (K,M) when trans_a; b as (K,N), or as (N,K) when trans_b.
// a and b are both float (is_bf16 == false) or both bf16; accumulation is fp32 either way.
// Primitives are created on first use of each (M, N, K, dtype, trans_a, trans_b, accumulate) and cached.
void gemm(float* c, const void* a, bool trans_a, const void* b, bool trans_b, int M, int N, int K, bool is_bf16,
          bool accumulate);

// A bf16 buffer of at least n elements owned by the calling thread, one per slot (0..3); contents are
// kept until the next call with the same slot. Grows, never shrinks.
bf16* bf16_scratch(int slot, int64_t n);
// Same for fp32 (slot 0..1).
float* f32_scratch(int slot, int64_t n);

}  // namespace llamatrain::cpu::detail
