// Fast RoPE (HF rotate_half layout), in place, OpenMP over rows, vectorized over the D/2 pairs of a
// head. cos/sin come from a table (P, D/2) built once per (frequencies, D) and grown to the largest
// position seen; its angles are computed in fp64 exactly as ref::rope_forward does, then stored as
// fp32, so results match ref within a few fp32 ulps. Positions past kMaxTableEntries fall back to
// per-row sincos. Backward uses the same table with sin negated (rotation by -angle).
#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {

namespace {

constexpr int64_t kMaxTableEntries = int64_t(1) << 22;  // positions * D/2 before rounding up: <= 64 MiB

struct RopeTable {
  RopeFreqs rope{0.0f};
  int D = 0;
  int n_pos = 0;
  std::vector<float> cos_;  // (n_pos, D/2)
  std::vector<float> sin_;  // (n_pos, D/2)
};

// Fills cos/sin (D/2 each) for one position, in fp64 like ref.
void rope_angles(float* cos_out /*(D/2)*/, float* sin_out /*(D/2)*/, int pos, int D, const RopeFreqs& rope) {
  for (int i = 0; i < D / 2; i++) {
    double angle = double(pos) * rope_inv_freq(rope, i, D);
    cos_out[i] = float(std::cos(angle));
    sin_out[i] = float(std::sin(angle));
  }
}

// The shared table for (rope, D) covering positions [0, n_pos); rebuilt when the key changes or a
// larger position shows up. The table is immutable once published, so readers need no lock.
std::shared_ptr<const RopeTable> rope_table(const RopeFreqs& rope, int D, int n_pos) {
  static std::mutex mutex;
  static std::shared_ptr<const RopeTable> cached;
  std::lock_guard<std::mutex> lock(mutex);
  if (cached && cached->rope == rope && cached->D == D && cached->n_pos >= n_pos) return cached;
  auto table = std::make_shared<RopeTable>();
  table->rope = rope;
  table->D = D;
  table->n_pos = std::max(64, int(std::bit_ceil(unsigned(n_pos))));
  int half = D / 2;
  table->cos_.resize(size_t(table->n_pos) * half);
  table->sin_.resize(size_t(table->n_pos) * half);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < table->n_pos; p++)
    rope_angles(table->cos_.data() + size_t(p) * half, table->sin_.data() + size_t(p) * half, p, D, rope);
  cached = table;
  return cached;
}

// Rotates heads [0, n_heads) of one row by the angle whose cos/sin are given; sign = -1 rotates
// backwards.
inline void rotate_row(float* row, const float* c /*(D/2)*/, const float* s /*(D/2)*/, int n_heads, int D, float sign) {
  int half = D / 2;
  for (int h = 0; h < n_heads; h++) {
    float* xh = row + int64_t(h) * D;
#pragma omp simd
    for (int i = 0; i < half; i++) {
      float x1 = xh[i], x2 = xh[i + half], si = sign * s[i];
      xh[i] = x1 * c[i] - x2 * si;
      xh[i + half] = x2 * c[i] + x1 * si;
    }
  }
}

// Rounds n floats to bf16 values (nearest even), in place.
inline void round_row(float* x, int n) {
#pragma omp simd
  for (int i = 0; i < n; i++) x[i] = to_float(to_bf16(x[i]));
}

void rope_apply(float* x, const int32_t* pos /*(N)*/, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope,
                float sign, bool round_rows) {
  if (N <= 0 || n_heads <= 0 || D < 2) return;
  int half = D / 2;
  int max_pos = 0;
  for (int n = 0; n < N; n++) {
    CHECK(pos[n] >= 0, "rope: position {} of row {} is negative", pos[n], n);
    max_pos = std::max(max_pos, int(pos[n]));
  }
  bool parallel = int64_t(N) * n_heads * D >= (1 << 14);
  if ((int64_t(max_pos) + 1) * half <= kMaxTableEntries) {
    auto table = rope_table(rope, D, max_pos + 1);
#pragma omp parallel for schedule(static) if (parallel)
    for (int n = 0; n < N; n++) {
      rotate_row(x + int64_t(n) * row_stride, table->cos_.data() + size_t(pos[n]) * half,
                 table->sin_.data() + size_t(pos[n]) * half, n_heads, D, sign);
      if (round_rows) round_row(x + int64_t(n) * row_stride, row_stride);
    }
    return;
  }
#pragma omp parallel if (parallel)
  {
    std::vector<float> c(half), s(half);
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      rope_angles(c.data(), s.data(), pos[n], D, rope);
      rotate_row(x + int64_t(n) * row_stride, c.data(), s.data(), n_heads, D, sign);
      if (round_rows) round_row(x + int64_t(n) * row_stride, row_stride);
    }
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

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT
