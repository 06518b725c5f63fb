// Finite-difference checks of ref::matmul_backward, alone and composed with cross-entropy.
// Objectives are evaluated in fp64 from ref::matmul_forward's outputs; central differences with step
// h. The matmul is linear, so the only error is fp32 rounding of the forward output (~1e-7 relative)
// divided by h; through cross-entropy add O(h^2) curvature. The CE here is a local fp64 one (the test
// must not depend on ref::cross_entropy, written elsewhere), so this also pins down the lm-head math
// of ref::lmhead_ce_backward, checked against the same differences, the oracle of the fused kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ref/ops.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using testing::all_close;
using testing::central_differences;
using testing::philox_uniform;

// Inputs: U(lo, hi) from the Philox streams of this seed, one per tensor id.
constexpr uint64_t kSeed = 7;

// sum_{n,o} out[n,o] * g[n,o], out = ref::matmul_forward(inp, weight)
double linear_objective(const std::vector<float>& inp, const std::vector<float>& weight, const std::vector<float>& g,
                        int N, int IC, int OC) {
  std::vector<float> out(size_t(N) * OC);
  ref::matmul_forward(out.data(), inp.data(), weight.data(), N, IC, OC);
  double s = 0.0;
  for (size_t i = 0; i < out.size(); i++) s += double(out[i]) * g[i];
  return s;
}

TEST(RefGradcheckMatmul, LinearObjective) {
  const int N = 3, IC = 5, OC = 4;
  auto inp = philox_uniform(size_t(N) * IC, kSeed, 1, -1, 1);      // (N,IC)
  auto weight = philox_uniform(size_t(OC) * IC, kSeed, 2, -1, 1);  // (OC,IC)
  auto g = philox_uniform(size_t(N) * OC, kSeed, 3, -1, 1);        // (N,OC) = dL/dout

  std::vector<float> dinp(size_t(N) * IC, 123.0f);  // overwritten
  auto dweight0 = philox_uniform(size_t(OC) * IC, kSeed, 4, -1, 1);
  std::vector<float> dweight = dweight0;  // accumulated
  ref::matmul_backward(dinp.data(), dweight.data(), g.data(), inp.data(), weight.data(), N, IC, OC);

  auto f = [&] { return linear_objective(inp, weight, g, N, IC, OC); };
  const double h = 1e-2;
  auto num_dinp = central_differences(inp, h, f);
  auto num_dweight = central_differences(weight, h, f);
  for (size_t i = 0; i < num_dweight.size(); i++) num_dweight[i] += dweight0[i];
  EXPECT_TRUE(all_close("dinp (want: central differences)", dinp, num_dinp, 1e-4, 1e-4));
  EXPECT_TRUE(all_close("dweight (want: central differences)", dweight, num_dweight, 1e-4, 1e-4));

  // dinp == nullptr skips the input gradient and still accumulates dweight
  std::vector<float> dweight2 = dweight0;
  ref::matmul_backward(nullptr, dweight2.data(), g.data(), inp.data(), weight.data(), N, IC, OC);
  EXPECT_EQ(dweight2, dweight);
}

// fp64 cross-entropy of one row: loss = logsumexp(l) - l[t]; dl = dloss * (softmax - onehot); t < 0 ignored.
double ce_row(std::vector<double>* dl, const float* l, int t, double dloss, int V) {
  if (dl) dl->assign(size_t(V), 0.0);
  if (t < 0) return 0.0;
  double mx = l[0];
  for (int j = 1; j < V; j++) mx = std::max(mx, double(l[j]));
  double s = 0.0;
  for (int j = 0; j < V; j++) s += std::exp(l[j] - mx);
  const double lse = mx + std::log(s);
  if (dl) {
    for (int j = 0; j < V; j++) (*dl)[size_t(j)] = dloss * std::exp(l[j] - lse);
    (*dl)[size_t(t)] -= dloss;
  }
  return lse - l[t];
}

TEST(RefGradcheckMatmul, LmHeadCrossEntropy) {
  const int N = 4, C = 6, V = 7;
  const double dloss = 1.0 / 3.0;  // mean over the 3 valid rows
  const std::vector<int32_t> targets = {2, -100, 6, 0};
  auto x = philox_uniform(size_t(N) * C, kSeed, 11, -1, 1);     // (N,C)
  auto wout = philox_uniform(size_t(V) * C, kSeed, 12, -1, 1);  // (V,C)

  // objective = sum_n dloss * loss_n, logits = ref matmul
  auto f = [&] {
    std::vector<float> logits(size_t(N) * V);
    ref::matmul_forward(logits.data(), x.data(), wout.data(), N, C, V);
    double s = 0.0;
    for (int n = 0; n < N; n++) s += dloss * ce_row(nullptr, &logits[size_t(n) * V], targets[size_t(n)], dloss, V);
    return s;
  };

  // analytic: logits -> dlogits (fp64 CE) -> ref::matmul_backward
  std::vector<float> logits(size_t(N) * V), dlogits(size_t(N) * V);
  ref::matmul_forward(logits.data(), x.data(), wout.data(), N, C, V);
  for (int n = 0; n < N; n++) {
    std::vector<double> dl;
    ce_row(&dl, &logits[size_t(n) * V], targets[size_t(n)], dloss, V);
    for (int j = 0; j < V; j++) dlogits[size_t(n) * V + j] = float(dl[size_t(j)]);
  }
  std::vector<float> dx(size_t(N) * C), dwout(size_t(V) * C, 0.0f);
  ref::matmul_backward(dx.data(), dwout.data(), dlogits.data(), x.data(), wout.data(), N, C, V);

  const double h = 1e-3;
  auto num_dx = central_differences(x, h, f);
  auto num_dwout = central_differences(wout, h, f);
  EXPECT_TRUE(all_close("dx (want: central differences)", dx, num_dx, 2e-4, 1e-3));
  EXPECT_TRUE(all_close("dwout (want: central differences)", dwout, num_dwout, 2e-4, 1e-3));
  // the ignored row has no gradient at all
  for (int c = 0; c < C; c++) EXPECT_EQ(dx[size_t(1) * C + c], 0.0f);

  std::vector<float> losses(static_cast<size_t>(N)), dx_lm(size_t(N) * C), dwout_lm(size_t(V) * C, 0.0f);
  ref::lmhead_ce_backward(losses.data(), dx_lm.data(), dwout_lm.data(), x.data(), wout.data(), targets.data(),
                          float(dloss), N, C, V);
  EXPECT_TRUE(all_close("ref::lmhead_ce_backward dx (want: central differences)", dx_lm, num_dx, 2e-4, 1e-3));
  EXPECT_TRUE(all_close("ref::lmhead_ce_backward dwout (want: central differences)", dwout_lm, num_dwout, 2e-4, 1e-3));
}

}  // namespace
}  // namespace llamatrain
