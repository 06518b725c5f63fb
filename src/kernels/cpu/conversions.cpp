// The bf16 operand conversions around the matmuls (internal.h: convert_operands,
// bf16_transpose_from_float, bf16_transpose, round_to_bf16_values), compiled once per CPU variant. All round to
// nearest even through core/bf16.h's bit arithmetic, written on raw bits so the loops vectorize.
#include <algorithm>
#include <cstdint>

#include "core/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT::detail {

void convert_operands(const cpu::detail::OperandConversion* jobs, int count) {
  using Kind = cpu::detail::OperandConversion::Kind;
  int64_t total = 0;
  for (int j = 0; j < count; j++) total += jobs[j].n;
#pragma omp parallel if (total >= (1 << 16))
  for (int j = 0; j < count; j++) {
    const cpu::detail::OperandConversion& job = jobs[j];
    if (job.kind == Kind::to_bf16) {
      const float* src = static_cast<const float*>(job.src);
      uint16_t* dst = static_cast<uint16_t*>(job.dst);
#pragma omp for simd schedule(static) nowait
      for (int64_t i = 0; i < job.n; i++) dst[i] = to_bf16(src[i]).bits;
    } else if (job.kind == Kind::widen) {
      const bf16* src = static_cast<const bf16*>(job.src);
      float* dst = static_cast<float*>(job.dst);
#pragma omp for simd schedule(static) nowait
      for (int64_t i = 0; i < job.n; i++) dst[i] = to_float(src[i]);
    } else {
      const float* src = static_cast<const float*>(job.src);
      float* dst = static_cast<float*>(job.dst);
#pragma omp for simd schedule(static) nowait
      for (int64_t i = 0; i < job.n; i++) dst[i] = to_float(to_bf16(src[i]));
    }
  }
}

namespace {

// xt (C,R) = as_bf16(x (R,C)), in 32 x 32 blocks (rows of both sides stay in cache while a block is
// transposed).
template <typename T, typename AsBf16>
void transpose_to_bf16(bf16* xt, const T* x, int R, int C, AsBf16 as_bf16) {
  constexpr int kT = 32;
  const int rb = (R + kT - 1) / kT, cb = (C + kT - 1) / kT;
#pragma omp parallel for schedule(static) if (int64_t(R) * C >= (1 << 16))
  for (int b = 0; b < rb * cb; b++) {
    const int r0 = b / cb * kT, c0 = b % cb * kT;
    const int r1 = std::min(R, r0 + kT), c1 = std::min(C, c0 + kT);
    for (int c = c0; c < c1; c++)
      for (int r = r0; r < r1; r++) xt[int64_t(c) * R + r] = as_bf16(x[int64_t(r) * C + c]);
  }
}

}  // namespace

void bf16_transpose_from_float(bf16* xt /*(C,R)*/, const float* x /*(R,C)*/, int R, int C) {
  transpose_to_bf16(xt, x, R, C, [](float v) { return to_bf16(v); });
}

void bf16_transpose(bf16* xt /*(C,R)*/, const bf16* x /*(R,C)*/, int R, int C) {
  transpose_to_bf16(xt, x, R, C, [](bf16 v) { return v; });
}

void round_to_bf16_values(float* out, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; i++) out[i] = to_float(to_bf16(x[i]));
}

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT::detail
