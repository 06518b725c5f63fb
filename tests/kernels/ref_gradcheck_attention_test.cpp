// Checks ref::attention_forward against a naive fp64 attention that materializes the full (B,H,T,T)
// score tensor, and ref::attention_backward against central finite differences of that naive fp64
// function with objective L = sum(dout * out). Tiny shapes: B 1..2, T 5, D 4, GQA (H 4, Hkv 2) and
// MHA (H = Hkv = 4), causal and with sliding windows of 1 and 3 keys (key u visible to query t iff
// t - window < u <= t).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/ref/ops.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using testing::mt19937_uniform;

struct Shape {
  int B, T, H, Hkv, D;
  int window = 0;
  int64_t width() const { return int64_t(H + 2 * Hkv) * D; }
  int64_t qkv_size() const { return int64_t(B) * T * width(); }
  int64_t out_size() const { return int64_t(B) * T * H * D; }
};

// Naive attention in fp64: full scores S (B,H,T,T) with -inf above the diagonal (and before the
// window), softmax, P @ V.
void naive_attention(std::vector<double>& out /*(B,T,H*D)*/, std::vector<double>& lse /*(B,H,T)*/,
                     const std::vector<double>& qkv /*(B,T,(H+2*Hkv)*D)*/, const Shape& s) {
  const int B = s.B, T = s.T, H = s.H, Hkv = s.Hkv, D = s.D;
  const int64_t W = s.width();
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> S(size_t(B) * H * T * T);
  auto at = [&](int b, int h, int t, int u) -> double& { return S[((size_t(b) * H + h) * T + t) * T + u]; };
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < T; t++)
        for (int u = 0; u < T; u++) {
          if (u > t || (s.window > 0 && u <= t - s.window)) {
            at(b, h, t, u) = -std::numeric_limits<double>::infinity();
            continue;
          }
          const int kvh = h / (H / Hkv);
          double dot = 0.0;
          for (int d = 0; d < D; d++)
            dot += qkv[(b * T + t) * W + h * D + d] * qkv[(b * T + u) * W + (H + kvh) * D + d];
          at(b, h, t, u) = dot * scale;
        }
  out.assign(s.out_size(), 0.0);
  lse.assign(size_t(B) * H * T, 0.0);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < T; t++) {
        double m = -std::numeric_limits<double>::infinity();
        for (int u = 0; u < T; u++) m = std::max(m, at(b, h, t, u));
        double sum = 0.0;
        for (int u = 0; u < T; u++) sum += std::exp(at(b, h, t, u) - m);
        lse[(b * H + h) * T + t] = m + std::log(sum);
        const int kvh = h / (H / Hkv);
        for (int u = 0; u < T; u++) {
          const double p = std::exp(at(b, h, t, u) - m) / sum;
          for (int d = 0; d < D; d++)
            out[(b * T + t) * H * D + h * D + d] += p * qkv[(b * T + u) * W + (H + Hkv + kvh) * D + d];
        }
      }
}

double objective(const std::vector<double>& qkv, const std::vector<float>& dout, const Shape& s) {
  std::vector<double> out, lse;
  naive_attention(out, lse, qkv, s);
  double L = 0.0;
  for (size_t i = 0; i < out.size(); i++) L += double(dout[i]) * out[i];
  return L;
}

class RefAttention : public ::testing::TestWithParam<Shape> {};

TEST_P(RefAttention, ForwardMatchesNaiveFullScores) {
  const Shape s = GetParam();
  const auto qkv = mt19937_uniform(size_t(s.qkv_size()), 1, -2.0f, 2.0f);
  std::vector<float> out(s.out_size(), NAN), lse(size_t(s.B) * s.H * s.T, NAN);
  ref::attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window);
  std::vector<double> out_n, lse_n;
  naive_attention(out_n, lse_n, std::vector<double>(qkv.begin(), qkv.end()), s);
  // ref sums in fp64 and rounds once to fp32: the only difference is that rounding (2^-24 relative).
  for (size_t i = 0; i < out.size(); i++)
    ASSERT_NEAR(out[i], out_n[i], 1e-6 * (1.0 + std::abs(out_n[i]))) << "out[" << i << "]";
  for (size_t i = 0; i < lse.size(); i++)
    ASSERT_NEAR(lse[i], lse_n[i], 1e-6 * (1.0 + std::abs(lse_n[i]))) << "lse[" << i << "]";
  // The first query of every head sees only key 0: out = v_0 exactly, lse = q.k_0 / sqrt(D).
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.H; h++) {
      const int kvh = h / (s.H / s.Hkv);
      for (int d = 0; d < s.D; d++)
        EXPECT_EQ(out[(b * s.T) * s.H * s.D + h * s.D + d], qkv[b * s.T * s.width() + (s.H + s.Hkv + kvh) * s.D + d]);
    }
}

TEST_P(RefAttention, BackwardMatchesFiniteDifferences) {
  const Shape s = GetParam();
  const auto qkv = mt19937_uniform(size_t(s.qkv_size()), 2, -2.0f, 2.0f);
  const auto dout = mt19937_uniform(size_t(s.out_size()), 3, -1.0f, 1.0f);
  std::vector<float> out(s.out_size()), lse(size_t(s.B) * s.H * s.T);
  ref::attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window);
  std::vector<float> dqkv(s.qkv_size(), 123.0f);  // must be overwritten, not accumulated
  ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.H, s.Hkv, s.D,
                          s.window);

  // Central differences of the fp64 objective: truncation error ~ eps^2 * |L'''| / 6 ~ 1e-9 for O(1)
  // inputs, cancellation ~ 1e-16 * |L| / eps ~ 1e-11. The analytic gradient is summed in fp64 and
  // rounded once to fp32 (<= 6e-8 relative). A tolerance of 1e-6 (abs + rel) is far above both, and
  // far below any formula error (a wrong term is O(0.01..1) on these inputs).
  const double eps = 1e-4;
  std::vector<double> x(qkv.begin(), qkv.end());
  double max_err = 0.0;
  int n_nonzero = 0;
  for (int64_t i = 0; i < s.qkv_size(); i++) {
    const double x0 = x[i];
    x[i] = x0 + eps;
    const double lp = objective(x, dout, s);
    x[i] = x0 - eps;
    const double lm = objective(x, dout, s);
    x[i] = x0;
    const double fd = (lp - lm) / (2 * eps);
    const double err = std::abs(double(dqkv[i]) - fd);
    max_err = std::max(max_err, err / (1.0 + std::abs(fd)));
    n_nonzero += std::abs(fd) > 1e-3;
    ASSERT_LE(err, 1e-6 * (1.0 + std::abs(fd))) << "dqkv[" << i << "] analytic " << dqkv[i] << " fd " << fd;
  }
  // Guard against a vacuous check: most entries must carry a real gradient (k of the last position
  // gets only its own query's dS, which is 0 for T=1 but not here).
  // A window of 1 leaves each query its own key only (out = v_t): then only the v entries do.
  const int64_t carrying = s.window == 1 ? s.qkv_size() / s.width() * s.Hkv * s.D : s.qkv_size();
  EXPECT_GT(n_nonzero, carrying * 3 / 4);
  std::printf("B=%d T=%d H=%d Hkv=%d D=%d: max |analytic - fd| / (1 + |fd|) = %.2e\n", s.B, s.T, s.H, s.Hkv, s.D,
              max_err);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RefAttention,
                         ::testing::Values(Shape{1, 5, 4, 2, 4}, Shape{2, 5, 4, 2, 4}, Shape{2, 5, 4, 4, 4},
                                           Shape{1, 5, 4, 1, 4}, Shape{2, 5, 4, 2, 4, 3}, Shape{1, 5, 4, 4, 4, 1}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           const Shape& s = info.param;
                           return fmt::format("B{}_T{}_H{}_Hkv{}_D{}_W{}", s.B, s.T, s.H, s.Hkv, s.D, s.window);
                         });

}  // namespace
}  // namespace llamatrain
