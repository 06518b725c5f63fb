// The softmax rows of the fused lm head (detail::lmhead_ce_rows, internal_list.inc): the part of
// lmhead_ce_forward / lmhead_ce_backward that is not a matmul, compiled once per CPU variant. Each
// row's result is independent of the thread count; exp is kernels/cpu/fast_exp.h.
#include <cmath>
#include <cstdint>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/cpu/lmhead_ce.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT::detail {

void lmhead_ce_rows(float* losses, float* lc, bf16* dlog_bf16, const int32_t* targets, int n0, int rows, int V,
                    float dloss, bool backward, bool round_values) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < rows; i++) {
    float* l = lc + int64_t(i) * V;  // (V)
    const int n = n0 + i;
    const int32_t t = targets[n];
    CHECK(t < V, "lmhead_ce: target {} at row {} is out of range for vocab {}", t, n, V);
    const float mx = cpu::detail::row_max(l, V);
    const float lt = t >= 0 ? l[t] : 0.0f;
    const float sum = cpu::detail::row_exp_sum(l, mx, V);
    const float lse = mx + std::log(sum);
    losses[n] = t >= 0 ? lse - lt : 0.0f;
    if (!backward) continue;
    // dlogits = dloss * (softmax - onehot); ignored rows contribute nothing
    const float scale = t >= 0 ? dloss / sum : 0.0f;
    const float dt = t >= 0 ? (l[t] / sum - 1.0f) * dloss : 0.0f;
    if (dlog_bf16 != nullptr) {
      bf16* d = dlog_bf16 + int64_t(i) * V;  // (V)
      cpu::detail::row_scale_bf16(d, l, scale, V);
      if (t >= 0) d[t] = to_bf16(dt);
    } else if (round_values) {
      cpu::detail::row_scale_bf16_values(l, l, scale, V);
      if (t >= 0) l[t] = to_float(to_bf16(dt));
    } else {
      cpu::detail::row_scale_f32(l, l, scale, V);
      if (t >= 0) l[t] = dt;
    }
  }
}

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT::detail
