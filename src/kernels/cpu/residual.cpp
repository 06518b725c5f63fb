// Fast residual add: out = a + b, one vectorized OpenMP loop (memory bound). out may alias a or b.
// Bitwise equal to ref::residual_forward.
#include "kernels/cpu/ops.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT
