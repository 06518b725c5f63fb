// Fast SwiGLU on packed gate|up rows, OpenMP over rows, vectorized over F. sigmoid uses fast_exp
// below (a polynomial that vectorizes, unlike libm's expf without -ffast-math), accurate to a few
// fp32 ulps; results match ref::swiglu_* (fp64) to ~1e-6 relative. Outputs are float, or bf16
// (rounded to nearest even, stored as bf16 or bf16_in_f32) when they only feed bf16 matmuls.
#include <bit>
#include <cstdint>

#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/operand_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/put.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {

namespace {

inline float sigmoid(float g) { return 1.0f / (1.0f + fast_exp(-g)); }

}  // namespace

template <typename T>
void swiglu_forward(T* out /*(N,F)*/, const float* h13 /*(N,2F)*/, int N, int F) {
#pragma omp parallel for schedule(static) if (int64_t(N) * F >= (1 << 14))
  for (int n = 0; n < N; n++) {
    const float* gate = h13 + int64_t(n) * 2 * F;
    const float* up = gate + F;
    T* on = out + int64_t(n) * F;
#pragma omp simd
    for (int f = 0; f < F; f++) {
      float g = gate[f];
      put(on + f, g * sigmoid(g) * up[f]);
    }
  }
}

template <typename T>
void swiglu_backward(T* dh13 /*(N,2F)*/, const float* dout /*(N,F)*/, const float* h13 /*(N,2F)*/, int N, int F) {
#pragma omp parallel for schedule(static) if (int64_t(N) * F >= (1 << 14))
  for (int n = 0; n < N; n++) {
    const float* gate = h13 + int64_t(n) * 2 * F;
    const float* up = gate + F;
    const float* dn = dout + int64_t(n) * F;
    T* dgate = dh13 + int64_t(n) * 2 * F;
    T* dup = dgate + F;
#pragma omp simd
    for (int f = 0; f < F; f++) {
      float g = gate[f], sig = sigmoid(g);
      put(dgate + f, dn[f] * up[f] * sig * (1.0f + g * (1.0f - sig)));
      put(dup + f, dn[f] * g * sig);
    }
  }
}

LLAMATRAIN_CPU_FOR_EACH_OPERAND(LLAMATRAIN_CPU_INSTANTIATE_SWIGLU)

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT
