// Bulk bf16 conversions (round to nearest even), parallel over elements.
#include "core/bf16.h"

namespace llamatrain {

void bf16_from_float(bf16* out, const float* in, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = to_bf16(in[i]);
}

void bf16_from_float(bf16_in_f32* out, const float* in, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) out[i].value = to_float(to_bf16(in[i]));
}

void float_from_bf16(float* out, const bf16* in, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = to_float(in[i]);
}

}  // namespace llamatrain
