// Reference RMSNorm (HF LlamaRMSNorm): out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps).
// Row sums are accumulated in fp64; rstd is saved for the backward. Backward derivation:
// docs/derivations.md#rmsnorm-backward. dx and dweight are both accumulated (+=).
#include <cmath>

#include "kernels/ref/ops.h"

namespace llamatrain::ref {

void rmsnorm_forward(float* out /*(N,C)*/, float* rstd /*(N)*/, const float* x /*(N,C)*/, const float* weight /*(C)*/,
                     int N, int C, float eps) {
  for (int n = 0; n < N; n++) {
    const float* xn = x + int64_t(n) * C;
    float* on = out + int64_t(n) * C;
    // HF: variance = hidden_states.pow(2).mean(-1, keepdim=True)
    double ss = 0.0;
    for (int c = 0; c < C; c++) ss += double(xn[c]) * xn[c];
    // HF: torch.rsqrt(variance + eps)
    float r = float(1.0 / std::sqrt(ss / C + double(eps)));
    rstd[n] = r;
    // HF: self.weight * (hidden_states * rstd)
    for (int c = 0; c < C; c++) on[c] = (xn[c] * r) * weight[c];
  }
}

void rmsnorm_backward(float* dx /*(N,C)*/, float* dweight /*(C)*/, const float* dout /*(N,C)*/,
                      const float* x /*(N,C)*/, const float* weight /*(C)*/, const float* rstd /*(N)*/, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float* xn = x + int64_t(n) * C;
    const float* dn = dout + int64_t(n) * C;
    float* dxn = dx + int64_t(n) * C;
    double r = rstd[n];
    // dot = sum_c dout_c * weight_c * x_c  (the projection of the upstream grad onto x)
    double dot = 0.0;
    for (int c = 0; c < C; c++) dot += double(dn[c]) * weight[c] * xn[c];
    // dx_c += rstd * weight_c * dout_c - rstd^3 / C * x_c * dot
    double k = r * r * r * dot / C;
    for (int c = 0; c < C; c++) dxn[c] += float(r * weight[c] * dn[c] - k * xn[c]);
  }
  // dweight_c += sum_n dout[n,c] * x[n,c] * rstd[n]   (the normalized input times the upstream grad)
  for (int c = 0; c < C; c++) {
    double acc = 0.0;
    for (int n = 0; n < N; n++) acc += double(dout[int64_t(n) * C + c]) * x[int64_t(n) * C + c] * rstd[n];
    dweight[c] += float(acc);
  }
}

}  // namespace llamatrain::ref
