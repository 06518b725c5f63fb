// Fast parameter init: ref::fill_constant / fill_normal split over OpenMP threads. Each element's
// value depends on its index only, so the result is bitwise the reference's for any thread count.
#include "core/rng.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {

void fill_constant(float* out, int64_t n, float value) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; i++) out[i] = value;
}

void fill_normal(float* out, int64_t n, float std, uint64_t seed, uint32_t stream, uint64_t first) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = std * random_normal(seed, stream, first + uint64_t(i));
}

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT
