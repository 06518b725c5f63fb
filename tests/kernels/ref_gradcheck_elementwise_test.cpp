// Finite-difference gradient checks of the elementwise ref:: backwards (embedding, rmsnorm incl.
// dweight, rope, swiglu, cross-entropy), plus a few hand-computed forward values. The ref kernels
// run in fp32, so each check perturbs one fp32 input by +-h (dividing by the step actually stored),
// evaluates the scalar objective sum(dout * out) in fp64 and compares the central difference with
// the analytic gradient. Accumulating gradients (+=) are checked as (after - before).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernels/ref/ops.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using testing::mt19937_normal;

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); i++) s += double(a[i]) * b[i];
  return s;
}

// Checks every element of `analytic` against the central difference of objective() w.r.t. `input`.
void expect_gradient(const char* what, std::vector<float>& input, const std::vector<float>& analytic, float h,
                     double atol, double rtol, const std::function<double()>& objective) {
  const std::vector<double> fd = testing::central_differences(input, h, objective);
  EXPECT_TRUE(testing::all_close(std::string(what) + " (want: central differences)", analytic, fd, atol, rtol));
  std::printf("%-24s max |fd - analytic| = %.3g\n", what, testing::max_difference(analytic, fd).max_abs);
}

// Tolerances. ref rounds every output once to fp32 (rel. error ~6e-8), so the fp64 objective of
// ~20-60 O(1) terms is off by < ~3e-6 and the difference quotient by < 3e-6 / (2h); with h = 1e-2
// that is < 1.5e-4, and the O(h^2) truncation of smooth O(1) functions adds ~1e-5. A real bug (a
// missing or mis-signed term) moves gradients by O(0.1).
constexpr float kStep = 1e-2f;
constexpr double kAtol = 1e-3, kRtol = 1e-3;

TEST(RefGradcheck, Embedding) {
  const int N = 5, C = 4, V = 3;
  std::vector<int32_t> tokens = {2, 0, 2, 1, 2};  // token 2 repeats: its gradient rows must add up
  auto wte = mt19937_normal(V * C, 1), dout = mt19937_normal(N * C, 2);
  std::vector<float> out(N * C);
  auto objective = [&] {
    ref::embedding_forward(out.data(), tokens.data(), wte.data(), N, C);
    return dot(out, dout);
  };
  auto dwte0 = mt19937_normal(V * C, 3);  // accumulated into: start from non-zero
  auto dwte = dwte0;
  ref::embedding_backward(dwte.data(), dout.data(), tokens.data(), N, C);
  for (size_t i = 0; i < dwte.size(); i++) dwte[i] -= dwte0[i];
  // linear in wte: no truncation error, only fp32 rounding of the outputs (see kAtol)
  expect_gradient("embedding dwte", wte, dwte, kStep, kAtol, kRtol, objective);
}

TEST(RefGradcheck, RmsnormInputAndWeight) {
  const int N = 3, C = 5;
  const float eps = 1e-5f;
  auto x = mt19937_normal(N * C, 4), weight = mt19937_normal(C, 5), dout = mt19937_normal(N * C, 6);
  for (auto& w : weight) w += 1.0f;  // near HF's init of ones
  std::vector<float> out(N * C), rstd(N);
  auto objective = [&] {
    ref::rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), N, C, eps);
    return dot(out, dout);
  };
  objective();
  auto dx0 = mt19937_normal(N * C, 7), dw0 = mt19937_normal(C, 8);  // both accumulated into
  auto dx = dx0, dw = dw0;
  ref::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), weight.data(), rstd.data(), N, C);
  for (size_t i = 0; i < dx.size(); i++) dx[i] -= dx0[i];
  for (size_t i = 0; i < dw.size(); i++) dw[i] -= dw0[i];
  // rmsnorm is smooth with O(1) derivatives for rows of O(1) norm: tolerance as in kAtol
  expect_gradient("rmsnorm dx", x, dx, kStep, kAtol, kRtol, objective);
  expect_gradient("rmsnorm dweight", weight, dw, kStep, kAtol, kRtol, objective);
}

TEST(RefGradcheck, RopeRotatesOnlyTheFirstHeads) {
  // Packed rows of 3 heads of D = 4 plus 2 extra values; rope touches heads [0, 2) only, so the
  // gradient of the untouched values is dout itself (the identity), which backward leaves in place.
  const int N = 3, D = 4, n_heads = 2, row_stride = 3 * D + 2;
  const float theta = 10000.0f;
  std::vector<int32_t> pos = {0, 5, 17};
  auto x = mt19937_normal(N * row_stride, 9), dout = mt19937_normal(N * row_stride, 10);
  std::vector<float> out;
  auto objective = [&] {
    out = x;
    ref::rope_forward(out.data(), pos.data(), N, n_heads, row_stride, D, theta);
    return dot(out, dout);
  };
  auto dx = dout;
  ref::rope_backward(dx.data(), pos.data(), N, n_heads, row_stride, D, theta);
  // linear in x: only output rounding enters (see kAtol)
  expect_gradient("rope dx", x, dx, kStep, kAtol, kRtol, objective);
}

TEST(RefGradcheck, Swiglu) {
  const int N = 3, F = 4;
  auto h13 = mt19937_normal(N * 2 * F, 11, 2.0f), dout = mt19937_normal(N * F, 12);
  std::vector<float> out(N * F);
  auto objective = [&] {
    ref::swiglu_forward(out.data(), h13.data(), N, F);
    return dot(out, dout);
  };
  std::vector<float> dh13(N * 2 * F, 123.0f);  // overwritten: garbage must not leak through
  ref::swiglu_backward(dh13.data(), dout.data(), h13.data(), N, F);
  // silu has |third derivative| < 1 and gates of O(2): truncation h^2/6 * O(|up|) ~ 1e-4
  expect_gradient("swiglu dh13", h13, dh13, kStep, kAtol, kRtol, objective);
}

TEST(RefGradcheck, CrossEntropyWithIgnoredRow) {
  const int N = 4, V = 7;
  const float dloss = 1.0f / 3.0f;  // mean over the 3 valid rows
  std::vector<int32_t> targets = {3, -100, 0, 6};
  auto logits = mt19937_normal(N * V, 13, 2.0f);
  std::vector<float> losses(N);
  auto objective = [&] {
    ref::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
    double s = 0.0;
    for (float l : losses) s += double(dloss) * l;
    return s;
  };
  objective();
  EXPECT_EQ(losses[1], 0.0f) << "ignored row must have zero loss";
  std::vector<float> dlogits(N * V, 55.0f);  // overwritten
  ref::cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dloss, N, V);
  for (int v = 0; v < V; v++) EXPECT_EQ(dlogits[1 * V + v], 0.0f) << "ignored row must have zero gradient";
  // log-sum-exp is smooth with bounded derivatives (softmax entries < 1): tolerance as kAtol
  expect_gradient("cross_entropy dlogits", logits, dlogits, kStep, kAtol, kRtol, objective);
}

// ---- forward values computed by hand ----

TEST(RefForward, RmsnormHandValues) {
  // x = [3, 4]: mean(x^2) = 12.5, rstd = 1/sqrt(12.5); weight [1, 2] -> [3, 8] * rstd.
  std::vector<float> x = {3.0f, 4.0f}, w = {1.0f, 2.0f}, out(2), rstd(1);
  ref::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), 1, 2, 0.0f);
  EXPECT_NEAR(rstd[0], 0.28284271f, 1e-7);
  EXPECT_NEAR(out[0], 0.84852814f, 1e-6);
  EXPECT_NEAR(out[1], 2.26274170f, 1e-6);
}

TEST(RefForward, RopeHandValuesD4) {
  // D = 4, theta = 1e4: pair (0, 2) turns by pos * 1, pair (1, 3) by pos * 1e4^(-1/2) = pos / 100.
  // pos 1, x = [1, 2, 3, 4]: out0 = cos1 - 3 sin1, out2 = 3 cos1 + sin1,
  //                          out1 = 2 cos.01 - 4 sin.01, out3 = 4 cos.01 + 2 sin.01.
  // Values below also agree with HF's q*cos + rotate_half(q)*sin in torch (fp64).
  std::vector<float> x = {1, 2, 3, 4, 1, 2, 3, 4};
  std::vector<int32_t> pos = {1, 3};
  ref::rope_forward(x.data(), pos.data(), 2, 1, 4, 4, 10000.0f);
  const double want[8] = {-1.9841106485555495, 1.959900667496664,  2.4623779024123156, 4.019799668334994,
                          -1.413352520780047,  1.8791180666879925, -2.828857481741469, 4.058191135400942};
  for (int i = 0; i < 8; i++) EXPECT_NEAR(x[i], want[i], 1e-6) << "element " << i;
  EXPECT_NEAR(want[0], std::cos(1.0) - 3 * std::sin(1.0), 1e-12);
  EXPECT_NEAR(want[1], 2 * std::cos(0.01) - 4 * std::sin(0.01), 1e-12);
  // backward undoes forward (rotation by -angle)
  ref::rope_backward(x.data(), pos.data(), 2, 1, 4, 4, 10000.0f);
  for (int i = 0; i < 8; i++) EXPECT_NEAR(x[i], float(1 + i % 4), 1e-6) << "element " << i;
}

TEST(RefForward, SwigluAndCrossEntropyHandValues) {
  // gate 1, up 2: silu(1) * 2 = 2 / (1 + e^-1); gate 0 gives 0.
  std::vector<float> h13 = {1.0f, 0.0f, 2.0f, 5.0f}, out(2);
  ref::swiglu_forward(out.data(), h13.data(), 1, 2);
  EXPECT_NEAR(out[0], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(out[1], 0.0f);
  // uniform logits over V = 4: loss = log 4; logits [0, log 3]: softmax = [1/4, 3/4].
  std::vector<float> logits = {7, 7, 7, 7, 0, float(std::log(3.0))};
  std::vector<int32_t> targets = {2};
  std::vector<float> loss(1), dl(2);
  ref::cross_entropy_forward(loss.data(), logits.data(), targets.data(), 1, 4);
  EXPECT_NEAR(loss[0], std::log(4.0), 1e-6);
  targets = {1};
  ref::cross_entropy_forward(loss.data(), logits.data() + 4, targets.data(), 1, 2);
  EXPECT_NEAR(loss[0], -std::log(0.75), 1e-6);
  ref::cross_entropy_backward(dl.data(), logits.data() + 4, targets.data(), 2.0f, 1, 2);
  EXPECT_NEAR(dl[0], 2.0 * 0.25, 1e-6);
  EXPECT_NEAR(dl[1], 2.0 * (0.75 - 1.0), 1e-6);
}

}  // namespace
}  // namespace llamatrain
