// cpu::attention_forward / attention_backward against ref:: on awkward sizes (T not a multiple of
// the 64-row tile, D with and without a compiled-in specialization, MHA and GQA groups of 2..6),
// and bitwise equality of 1 vs 2 OpenMP threads (which also switches the backward between its
// one-pass and two-pass schedules for some shapes).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"

namespace llamatrain {
namespace {

struct Shape {
  int B, T, H, Hkv, D;
  int64_t qkv_size() const { return int64_t(B) * T * (H + 2 * Hkv) * D; }
  int64_t out_size() const { return int64_t(B) * T * H * D; }
  int64_t lse_size() const { return int64_t(B) * H * T; }
  std::string name() const { return fmt::format("B={} T={} H={} Hkv={} D={}", B, T, H, Hkv, D); }
};

std::vector<float> random_vector(int64_t n, float amplitude, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-amplitude, amplitude);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Largest err / (|want| + max|want|) seen per tensor name, printed at the end of a test.
std::map<std::string, double>& worst_seen() {
  static std::map<std::string, double> m;
  return m;
}

// Counts entries with |got - want| > tol * (|want| + max|want|) and prints the first few.
// The max|want| term is the "-ish" in relative-ish: gradients are differences of O(1) terms
// (dS = P (dP - Di)), so an entry near 0 carries the absolute error of its largest neighbours.
int64_t count_mismatches(const char* what, const std::vector<float>& got, const std::vector<float>& want, double tol,
                         const std::string& shape) {
  double max_abs = 0.0;
  for (float w : want) max_abs = std::max(max_abs, double(std::abs(w)));
  int64_t bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); i++) {
    const double err = std::abs(double(got[i]) - double(want[i]));
    const double bound = tol * (std::abs(double(want[i])) + max_abs);
    worst = std::max(worst, err / (std::abs(double(want[i])) + max_abs));
    if (!(err <= bound)) {
      if (bad < 5)
        std::printf("  %s %s: [%zu] cpu %.8g ref %.8g err %.3g bound %.3g\n", shape.c_str(), what, i, got[i],
                    want[i], err, bound);
      bad++;
    }
  }
  double& w = worst_seen()[what];
  w = std::max(w, worst);
  return bad;
}

// fp32 with u = 6e-8: each output sums at most T*H/Hkv = 1200 products in fp32, whose error grows
// like sqrt(n) u ~ 2e-6 for random signs, plus ~2 ulp from the polynomial exp; 1e-5 leaves a margin
// of ~5x over the worst error seen and is far below a wrong mask, scale or group mapping (O(1e-2+)).
constexpr double kTol = 1e-5;

void check_shape(const Shape& s) {
  const auto qkv = random_vector(s.qkv_size(), 2.0f, 11);
  const auto dout = random_vector(s.out_size(), 1.0f, 12);
  std::vector<float> out_r(s.out_size()), lse_r(s.lse_size()), dqkv_r(s.qkv_size());
  ref::attention_forward(out_r.data(), lse_r.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D);
  ref::attention_backward(dqkv_r.data(), dout.data(), qkv.data(), out_r.data(), lse_r.data(), s.B, s.T, s.H, s.Hkv,
                          s.D);
  std::vector<float> out_c(s.out_size(), NAN), lse_c(s.lse_size(), NAN), dqkv_c(s.qkv_size(), NAN);
  cpu::attention_forward(out_c.data(), lse_c.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D);
  EXPECT_EQ(count_mismatches("out", out_c, out_r, kTol, s.name()), 0);
  EXPECT_EQ(count_mismatches("lse", lse_c, lse_r, kTol, s.name()), 0);
  // Backward from cpu's own saved out and lse, as the model will call it.
  cpu::attention_backward(dqkv_c.data(), dout.data(), qkv.data(), out_c.data(), lse_c.data(), s.B, s.T, s.H, s.Hkv,
                          s.D);
  EXPECT_EQ(count_mismatches("dqkv", dqkv_c, dqkv_r, kTol, s.name()), 0);
}

TEST(CpuVsRefAttention, AwkwardSizes) {
  const int Ts[] = {1, 17, 127, 200};
  const int Ds[] = {8, 16, 64};
  const int heads[][2] = {{4, 4}, {8, 2}, {6, 1}, {5, 5}};
  for (int B : {1, 3})
    for (int T : Ts)
      for (int D : Ds)
        for (const auto& hh : heads) {
          const Shape s{B, T, hh[0], hh[1], D};
          SCOPED_TRACE(s.name());
          check_shape(s);
        }
  for (const auto& [what, w] : worst_seen())
    std::printf("worst scaled error of %s: %.3g (tolerance %.0e)\n", what.c_str(), w, kTol);
}

TEST(CpuVsRefAttention, HeadDim128) {
  check_shape(Shape{1, 130, 8, 2, 128});
  check_shape(Shape{2, 65, 2, 2, 128});
}

// The cpu kernels sum every value in a fixed order, so the thread count (and, for B*Hkv < 2*threads,
// the backward's two-pass schedule instead of the one-pass one) must not change a single bit.
TEST(CpuVsRefAttention, ThreadCountIsBitwiseInvariant) {
  const int saved = omp_get_max_threads();
  for (const Shape& s : {Shape{1, 200, 8, 2, 64}, Shape{1, 130, 6, 1, 16}, Shape{3, 127, 4, 4, 64},
                         Shape{1, 300, 4, 2, 8}}) {
    SCOPED_TRACE(s.name());
    const auto qkv = random_vector(s.qkv_size(), 2.0f, 21);
    const auto dout = random_vector(s.out_size(), 1.0f, 22);
    std::vector<float> out[2], lse[2], dqkv[2];
    for (int r = 0; r < 2; r++) {
      omp_set_num_threads(r + 1);
      out[r].assign(s.out_size(), NAN);
      lse[r].assign(s.lse_size(), NAN);
      dqkv[r].assign(s.qkv_size(), NAN);
      cpu::attention_forward(out[r].data(), lse[r].data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D);
      cpu::attention_backward(dqkv[r].data(), dout.data(), qkv.data(), out[r].data(), lse[r].data(), s.B, s.T, s.H,
                              s.Hkv, s.D);
    }
    EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(lse[0].data(), lse[1].data(), lse[0].size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(dqkv[0].data(), dqkv[1].data(), dqkv[0].size() * sizeof(float)), 0);
    EXPECT_FALSE(std::isnan(dqkv[0][0]));
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace llamatrain
