// Fast AdamW (fp32 and bf16 with stochastic rounding), sum_squares and sum, OpenMP + vectorized over
// elements. Both AdamW variants compute each element with adamw_element(), in ref::adamw_update's
// (= torch.optim.AdamW's) order of operations, so they match ref to an ulp or two.
// bf16-mixed: adamw_update_bf16_copy also writes the bf16 matmul copy of each new param (round to
// nearest even) in the same pass, instead of a second pass over the whole arena.
// bf16-sr: param, m, v are loaded from bf16, updated in fp32 and each is rounded stochastically
// with its own 32-bit word of one Philox draw random_u32x4(seed, step, tensor_id, i) (core/rng.h):
// word 0 for param, 1 for m, 2 for v (the words of one Philox output are independent). The draw
// depends only on the element, never on the thread, so results are bitwise identical for any
// thread count. philox_u32x3 below is random_u32x4 restated with scalar lanes so the loop
// vectorizes (core/rng.h's std::array version does not; ~25x slower); the tests check every
// rounding bit against random_u32x4 itself.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/adamw_scalars.h"
#include "kernels/cpu/operand_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/put.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {

namespace {

// Words 0, 1, 2 of random_u32x4(seed, step, tensor_id, index) of core/rng.h (Philox4x32-10), in scalars.
struct Words3 {
  uint32_t w0, w1, w2;
};
inline Words3 philox_u32x3(uint64_t seed, uint32_t step, uint32_t tensor_id, uint64_t index) {
  uint32_t c0 = uint32_t(index), c1 = uint32_t(index >> 32), c2 = tensor_id, c3 = step;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
#pragma GCC unroll 10
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2};
}

// One AdamW element in fp32, torch.optim.AdamW order: decay, moments, bias-corrected step.
inline void adamw_element(float& p, float& m, float& v, float grad, const AdamwScalars& s) {
  float g = grad * s.grad_scale;
  p = p * s.decay;
  m = m * s.beta1 + g * s.one_minus_b1;
  v = v * s.beta2 + g * g * s.one_minus_b2;
  float denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
  p = p - s.step_size * (m / denom);
}

template <bool kWriteF32>
void adamw_bf16_sr_loop(bf16* param, bf16* m, bf16* v, float* param_f32, const float* grad, int64_t n,
                        const AdamwScalars& s, uint64_t seed, uint32_t step, uint32_t tensor_id,
                        uint64_t first_element) {
  // No `omp simd` here: it would privatize the memcpy temporaries of the bf16 helpers into arrays
  // and block vectorization; -O3 vectorizes the plain loop.
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (int64_t i = 0; i < n; i++) {
    float p = to_float(param[i]), mi = to_float(m[i]), vi = to_float(v[i]);
    adamw_element(p, mi, vi, grad[i], s);
    const Words3 bits = philox_u32x3(seed, step, tensor_id, first_element + uint64_t(i));
    bf16 pb = to_bf16_stochastic(p, bits.w0);
    m[i] = to_bf16_stochastic(mi, bits.w1);
    v[i] = to_bf16_stochastic(vi, bits.w2);
    param[i] = pb;
    if constexpr (kWriteF32) param_f32[i] = to_float(pb);
  }
}

}  // namespace

void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int step, float grad_scale) {
  AdamwScalars s = adamw_scalars(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
#pragma omp parallel for simd schedule(static) if (n >= (1 << 15))
  for (int64_t i = 0; i < n; i++) adamw_element(param[i], m[i], v[i], grad[i], s);
}

template <typename T>
void adamw_update_bf16_copy(float* param, T* param_bf16, float* m, float* v, const float* grad, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale) {
  AdamwScalars s = adamw_scalars(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
#pragma omp parallel for simd schedule(static) if (n >= (1 << 15))
  for (int64_t i = 0; i < n; i++) {
    adamw_element(param[i], m[i], v[i], grad[i], s);
    put(param_bf16 + i, param[i]);
  }
}
LLAMATRAIN_CPU_FOR_EACH_BF16_COPY(LLAMATRAIN_CPU_INSTANTIATE_ADAMW_UPDATE_BF16_COPY)

void adamw_update_bf16_sr(bf16* param, bf16* m, bf16* v, float* param_f32, const float* grad, int64_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale,
                          uint64_t seed, uint32_t tensor_id, uint64_t first_element) {
  AdamwScalars s = adamw_scalars(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
  if (param_f32)
    adamw_bf16_sr_loop<true>(param, m, v, param_f32, grad, n, s, seed, uint32_t(step), tensor_id, first_element);
  else
    adamw_bf16_sr_loop<false>(param, m, v, nullptr, grad, n, s, seed, uint32_t(step), tensor_id, first_element);
}

double sum_squares(const float* x, int64_t n) {
  double acc = 0.0;
#pragma omp parallel for simd reduction(+ : acc) schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; i++) acc += double(x[i]) * x[i];
  return acc;
}

// Chunks of kSumChunk values, each summed in order by one thread, then the chunks' sums in order:
// the same bits for any thread count and CPU variant (a loss total is reproducible), and for
// n <= kSumChunk bitwise ref::sum.
double sum(const float* x, int64_t n) {
  constexpr int64_t kSumChunk = int64_t(1) << 14;
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(size_t(std::max<int64_t>(chunks, 1)), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t k = 0; k < chunks; k++) {
    double acc = 0.0;
    for (int64_t i = k * kSumChunk; i < std::min(n, (k + 1) * kSumChunk); i++) acc += double(x[i]);
    partial[size_t(k)] = acc;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT
