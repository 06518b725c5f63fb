// Reference lm head + cross-entropy: the logits of each row in fp64 (never rounded), the softmax
// cross-entropy of cross_entropy.cpp on them, and the two matmuls of the backward in fp64: the oracle
// of the fused kernels (kernels/cpu/lmhead_ce.cpp), which must match it within their fp32 (or bf16
// operand) rounding. One row at a time; dwout's sum over the rows is kept in fp64 and added once.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ref/ops.h"

namespace llamatrain::ref {

namespace {

// losses[n] and, when dx != nullptr, the row's gradients: dx[n] = dlogits @ wout, dwout += dlogits^T x[n].
void lmhead_ce_rows(float* losses, float* dx, float* dwout, const float* x, const float* wout, const int32_t* targets,
                    double dloss, int N, int C, int V) {
  std::vector<double> logits(static_cast<size_t>(V)), dx_row(static_cast<size_t>(C));
  std::vector<double> dw(dx ? size_t(V) * C : 0, 0.0);  // (V,C) sum over the rows of dlogits^T x
  for (int n = 0; n < N; n++) {
    const float* xn = x + int64_t(n) * C;
    // torch: logits = x @ wout.T
    for (int v = 0; v < V; v++) {
      double s = 0;
      for (int c = 0; c < C; c++) s += double(xn[c]) * wout[int64_t(v) * C + c];
      logits[size_t(v)] = s;
    }
    if (dx) std::fill(dx + int64_t(n) * C, dx + int64_t(n + 1) * C, 0.0f);
    const int t = targets[n];
    if (t < 0) {  // ignored: loss 0, no gradient
      losses[n] = 0.0f;
      continue;
    }
    // torch: F.cross_entropy; loss = logsumexp(logits) - logits[target]
    double mx = logits[0];
    for (int v = 1; v < V; v++) mx = std::fmax(mx, logits[size_t(v)]);
    double sum = 0;
    for (int v = 0; v < V; v++) sum += std::exp(logits[size_t(v)] - mx);
    const double lse = mx + std::log(sum);
    losses[n] = float(lse - logits[size_t(t)]);
    if (!dx) continue;
    // dlogits = dloss * (softmax - onehot); dx = dlogits @ wout; dwout += dlogits^T @ x
    std::fill(dx_row.begin(), dx_row.end(), 0.0);
    for (int v = 0; v < V; v++) {
      const double d = dloss * (std::exp(logits[size_t(v)] - lse) - (v == t ? 1.0 : 0.0));
      for (int c = 0; c < C; c++) {
        dx_row[size_t(c)] += d * wout[int64_t(v) * C + c];
        dw[size_t(v) * C + c] += d * xn[c];
      }
    }
    for (int c = 0; c < C; c++) dx[int64_t(n) * C + c] = float(dx_row[size_t(c)]);
  }
  for (size_t i = 0; i < dw.size(); i++) dwout[i] = float(double(dwout[i]) + dw[i]);
}

}  // namespace

void lmhead_ce_forward(float* losses, const float* x, const float* wout, const int32_t* targets, int N, int C, int V) {
  lmhead_ce_rows(losses, nullptr, nullptr, x, wout, targets, 0.0, N, C, V);
}

void lmhead_ce_backward(float* losses, float* dx, float* dwout, const float* x, const float* wout,
                        const int32_t* targets, float dloss, int N, int C, int V) {
  lmhead_ce_rows(losses, dx, dwout, x, wout, targets, dloss, N, C, V);
}

}  // namespace llamatrain::ref
