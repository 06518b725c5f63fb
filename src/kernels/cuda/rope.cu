// RoPE, as ref::rope_forward / rope_backward (rotate_half layout, in place), a thread per (row, head,
// pair): cos and sin of pos * rope_inv_freq (core/rope.h) computed in fp64 once per shape into a table
// of fp32 values (sizes::rope_table_rows positions, kept in its scratch slot), the same values the
// CPU's table holds; a position past the table computes its own the same way. The backward rotates
// by -angle, then (round_rows) rounds whole rows to bf16 values for the matmul that reads them.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/rope.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rng_device.cuh"
#include "kernels/cuda/sizes.h"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;

namespace {

// cos and sin of angle p * inv_freq[i] for positions p < rows: (rows, D/2) pairs, in fp64 then fp32.
__global__ void rope_table_kernel(float* table, int rows, int D, RopeFreqs rope) {
  const int half = D / 2;
  GRID_STRIDE(idx, int64_t(rows) * half) {
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
  GRID_STRIDE(idx, int64_t(N) * n_heads * half) {
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
  GRID_STRIDE(i, n) x[i] = rng::bf16_bits_to_float(rng::bf16_bits_rne(x[i]));
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

}  // namespace

void rope_forward(float* x, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope) {
  rope_apply(x, pos, N, n_heads, row_stride, D, rope, 1.0f, false);
}

void rope_backward(float* dx, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope,
                   bool round_rows) {
  rope_apply(dx, pos, N, n_heads, row_stride, D, rope, -1.0f, round_rows);
}

}  // namespace llamatrain::cuda
