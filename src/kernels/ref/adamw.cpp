// Reference AdamW in torch.optim.AdamW's order of operations (decoupled weight decay first, then
// the bias-corrected Adam step), fp32 state, scalars (bias corrections, step size) in fp64.
// The bf16 modes' variants are adamw_update on widened values followed by the rounding the mode
// prescribes. Also sum_squares for global grad-norm clipping and sum (a loss total). Derivation and torch mapping:
// docs/derivations.md#adamw.
#include <cmath>
#include <vector>

#include "core/rng.h"

#include "kernels/ref/ops.h"

namespace llamatrain::ref {

void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int step, float grad_scale) {
  // torch: bias_correction1 = 1 - beta1**step; bias_correction2 = 1 - beta2**step
  double bc1 = 1.0 - std::pow(double(beta1), step);
  double bc2 = 1.0 - std::pow(double(beta2), step);
  // torch: step_size = lr / bias_correction1; bias_correction2_sqrt = sqrt(bias_correction2)
  float step_size = float(double(lr) / bc1);
  float bc2_sqrt = float(std::sqrt(bc2));
  float decay = float(1.0 - double(lr) * weight_decay);
  float one_minus_b1 = float(1.0 - double(beta1)), one_minus_b2 = float(1.0 - double(beta2));
  for (int64_t i = 0; i < n; i++) {
    float g = grad[i] * grad_scale;
    // torch: param.mul_(1 - lr * weight_decay)
    param[i] = param[i] * decay;
    // torch: exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    m[i] = m[i] * beta1 + g * one_minus_b1;
    // torch: exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    v[i] = v[i] * beta2 + g * g * one_minus_b2;
    // torch: denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    // torch: param.addcdiv_(exp_avg, denom, value=-step_size)
    param[i] = param[i] - step_size * (m[i] / denom);
  }
}

void adamw_update_bf16_copy(float* param, bf16* param_bf16, float* m, float* v, const float* grad, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale) {
  adamw_update(param, m, v, grad, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
  for (int64_t i = 0; i < n; i++) param_bf16[i] = to_bf16(param[i]);
}

void adamw_update_bf16_sr(bf16* param, bf16* m, bf16* v, float* param_f32, const float* grad, int64_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale,
                          uint64_t seed, uint32_t tensor_id, uint64_t first_element) {
  std::vector<float> p(static_cast<size_t>(n)), mf(static_cast<size_t>(n)), vf(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) {
    p[size_t(i)] = to_float(param[i]);
    mf[size_t(i)] = to_float(m[i]);
    vf[size_t(i)] = to_float(v[i]);
  }
  adamw_update(p.data(), mf.data(), vf.data(), grad, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
  for (int64_t i = 0; i < n; i++) {
    const auto bits = random_u32x4(seed, uint32_t(step), tensor_id, first_element + uint64_t(i));
    param[i] = to_bf16_stochastic(p[size_t(i)], bits[0]);
    m[i] = to_bf16_stochastic(mf[size_t(i)], bits[1]);
    v[i] = to_bf16_stochastic(vf[size_t(i)], bits[2]);
    if (param_f32) param_f32[i] = to_float(param[i]);
  }
}

double sum_squares(const float* x, int64_t n) {
  // torch: x.double().pow(2).sum()
  double acc = 0.0;
  for (int64_t i = 0; i < n; i++) acc += double(x[i]) * x[i];
  return acc;
}

double sum(const float* x, int64_t n) {
  // torch: x.double().sum()
  double acc = 0.0;
  for (int64_t i = 0; i < n; i++) acc += x[i];
  return acc;
}

}  // namespace llamatrain::ref
