// cpu:: elementwise kernels against their ref:: twins on random inputs and awkward sizes (1, 17,
// 127 rows; C like 1, 40, 107; sizes large enough to take the OpenMP paths), with a tolerance per
// op and the first mismatches printed. AdamW: cpu vs ref over several steps, both against a
// 2-step torch.optim.AdamW example; bf16 stochastic rounding: thread-count independence,
// unbiasedness, results always a neighbouring bf16 of the fp32 update, independent draws for
// param / m / v. The q/k/v bias kernels (bitwise), and RoPE with llama3 frequency scaling.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/bf16.h"
#include "core/rng.h"
#include "core/rope.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using testing::all_close;
using testing::bitwise_equal;
using testing::mt19937_ints;
using testing::mt19937_normal;
using testing::to_bf16_vector;

std::string shape(int N, int C) { return "N=" + std::to_string(N) + " C=" + std::to_string(C); }

// (rows, cols): awkward sizes plus two large enough for the OpenMP paths.
const std::vector<std::pair<int, int>> kShapes = {{1, 1},   {1, 40},   {17, 107},  {127, 17},
                                                  {3, 300}, {127, 40}, {64, 1024}, {33, 1000}};

TEST(CpuVsRef, Embedding) {
  for (auto [N, C] : kShapes) {
    const int V = 13;
    auto wte = mt19937_normal(size_t(V) * C, 1), dout = mt19937_normal(size_t(N) * C, 2);
    auto tokens = mt19937_ints(N, 3, 0, V - 1);  // repeats when N > V
    std::vector<float> out_ref(size_t(N) * C), out_cpu(size_t(N) * C, -1.0f);
    ref::embedding_forward(out_ref.data(), tokens.data(), wte.data(), N, C);
    cpu::embedding_forward(out_cpu.data(), tokens.data(), wte.data(), N, C);
    EXPECT_TRUE(all_close("embedding_forward " + shape(N, C), out_cpu, out_ref, 0, 0));
    auto dwte_ref = mt19937_normal(size_t(V) * C, 4), dwte_cpu = dwte_ref;  // accumulated into
    ref::embedding_backward(dwte_ref.data(), dout.data(), tokens.data(), N, C);
    cpu::embedding_backward(dwte_cpu.data(), dout.data(), tokens.data(), N, C);
    // same per-element summation order as ref: bitwise equal
    EXPECT_TRUE(all_close("embedding_backward " + shape(N, C), dwte_cpu, dwte_ref, 0, 0));
  }
}

TEST(CpuVsRef, Rmsnorm) {
  for (auto [N, C] : kShapes) {
    auto x = mt19937_normal(size_t(N) * C, 5, 2.0f), w = mt19937_normal(C, 6), dout = mt19937_normal(size_t(N) * C, 7);
    std::vector<float> out_ref(size_t(N) * C), out_cpu(size_t(N) * C), rstd_ref(N), rstd_cpu(N);
    ref::rmsnorm_forward(out_ref.data(), rstd_ref.data(), x.data(), w.data(), N, C, 1e-5f);
    cpu::rmsnorm_forward(out_cpu.data(), rstd_cpu.data(), x.data(), w.data(), N, C, 1e-5f);
    // both sum in fp64 and round rstd once: equal up to an fp32 ulp
    EXPECT_TRUE(all_close("rmsnorm_forward rstd " + shape(N, C), rstd_cpu, rstd_ref, 0, 2e-7));
    EXPECT_TRUE(all_close("rmsnorm_forward out " + shape(N, C), out_cpu, out_ref, 1e-7, 4e-7));
    auto dx_ref = mt19937_normal(size_t(N) * C, 8), dx_cpu = dx_ref;  // accumulated into
    auto dw_ref = mt19937_normal(C, 9), dw_cpu = dw_ref;
    ref::rmsnorm_backward(dx_ref.data(), dw_ref.data(), dout.data(), x.data(), w.data(), rstd_ref.data(), N, C);
    cpu::rmsnorm_backward(dx_cpu.data(), dw_cpu.data(), dout.data(), x.data(), w.data(), rstd_ref.data(), N, C);
    // dx: cpu evaluates r*w*dout - k*x in fp32 (ref in fp64): a few ulps of O(1) terms
    EXPECT_TRUE(all_close("rmsnorm_backward dx " + shape(N, C), dx_cpu, dx_ref, 2e-6, 1e-5));
    // dweight: both fp64 sums; cpu rounds each product to fp32 first: ~sqrt(N) ulps of O(1)
    EXPECT_TRUE(all_close("rmsnorm_backward dweight " + shape(N, C), dw_cpu, dw_ref, 1e-5, 1e-5));
  }
}

TEST(CpuVsRef, Rope) {
  struct Case {
    int N, n_heads, extra_heads, D;
    int max_pos;
  };
  // D from 2 to 128; extra (untouched) heads as in packed qkv; positions up to 4095, and one case
  // past the cached table's size (per-row sincos fallback).
  const std::vector<Case> cases = {{1, 1, 0, 2, 0},       {17, 3, 2, 4, 100},   {127, 5, 1, 6, 4095},
                                   {33, 12, 4, 64, 2047}, {9, 3, 2, 128, 4095}, {5, 2, 1, 4, 3000000}};
  for (const auto& cs : cases) {
    int row_stride = (cs.n_heads + cs.extra_heads) * cs.D;
    auto x = mt19937_normal(size_t(cs.N) * row_stride, 10, 2.0f);
    auto pos = mt19937_ints(cs.N, 11, 0, cs.max_pos);
    pos[0] = cs.max_pos;
    std::string what =
        "rope N=" + std::to_string(cs.N) + " D=" + std::to_string(cs.D) + " max_pos=" + std::to_string(cs.max_pos);
    for (int backward = 0; backward < 2; backward++) {
      auto x_ref = x, x_cpu = x;
      if (backward) {
        ref::rope_backward(x_ref.data(), pos.data(), cs.N, cs.n_heads, row_stride, cs.D, 10000.0f);
        cpu::rope_backward(x_cpu.data(), pos.data(), cs.N, cs.n_heads, row_stride, cs.D, 10000.0f);
      } else {
        ref::rope_forward(x_ref.data(), pos.data(), cs.N, cs.n_heads, row_stride, cs.D, 10000.0f);
        cpu::rope_forward(x_cpu.data(), pos.data(), cs.N, cs.n_heads, row_stride, cs.D, 10000.0f);
      }
      // fp32 cos/sin (rounded from the same fp64 values) and fp32 arithmetic vs fp64: ~2 ulps of
      // |x| ~ 2..8
      EXPECT_TRUE(all_close(what + (backward ? " backward" : " forward"), x_cpu, x_ref, 2e-6, 2e-6));
    }
  }
  // A second theta / D in the same process must not reuse the first table.
  std::vector<float> x = {1, 2, 3, 4}, y = x;
  std::vector<int32_t> pos = {7};
  ref::rope_forward(x.data(), pos.data(), 1, 1, 4, 4, 500000.0f);
  cpu::rope_forward(y.data(), pos.data(), 1, 1, 4, 4, 500000.0f);
  EXPECT_TRUE(all_close("rope theta=5e5", y, x, 1e-6, 1e-6));
}

TEST(RopeFreqs, Llama3BandsFollowTheWavelength) {
  // theta 500000, D 128 and Llama 3.1's scaling (factor 8, low 1, high 4, original 8192): pairs of
  // wavelength 2 pi / inv below 8192 / 4 keep theta^(-2i/D), above 8192 / 1 are divided by 8, and in
  // between blend linearly in 8192 / wavelength (so the blend meets both neighbours' rule at its ends).
  RopeFreqs r(500000.0f);
  r.llama3 = true;
  r.factor = 8.0f;
  r.low_freq_factor = 1.0f;
  r.high_freq_factor = 4.0f;
  r.original_max_pos = 8192;
  const int D = 128;
  int high = 0, medium = 0, low = 0;
  for (int i = 0; i < D / 2; i++) {
    const double inv = std::pow(500000.0, -2.0 * i / D), wavelen = 2 * M_PI / inv;
    const double got = rope_inv_freq(r, i, D);
    EXPECT_EQ(rope_inv_freq(RopeFreqs(500000.0f), i, D), inv) << i;
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(got, inv) << i;
      high++;
    } else if (wavelen > 8192.0) {
      EXPECT_EQ(got, inv / 8) << i;
      low++;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      EXPECT_GE(smooth, 0.0);
      EXPECT_LE(smooth, 1.0);
      EXPECT_NEAR(got, (1 - smooth) * inv / 8 + smooth * inv, 1e-15 * inv) << i;
      EXPECT_GT(got, inv / 8 * (1 - 1e-12));
      EXPECT_LT(got, inv * (1 + 1e-12));
      medium++;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(medium, 0);
  EXPECT_GT(low, 0);
}

TEST(CpuVsRef, RopeLlama3Scaling) {
  // The scaled frequencies reach both backends; the table is keyed by the whole scaling, so the
  // unscaled rotation of the same theta right after is not served from the scaled table.
  RopeFreqs r(500000.0f);
  r.llama3 = true;
  r.factor = 8.0f;
  r.original_max_pos = 64;
  const int N = 50, H = 3, D = 32, stride = 4 * D;
  auto x = mt19937_normal(size_t(N) * stride, 12, 2.0f);
  auto pos = mt19937_ints(N, 13, 0, 200);
  for (const RopeFreqs& f : {r, RopeFreqs(500000.0f)})
    for (int backward = 0; backward < 2; backward++) {
      auto x_ref = x, x_cpu = x;
      if (backward) {
        ref::rope_backward(x_ref.data(), pos.data(), N, H, stride, D, f);
        cpu::rope_backward(x_cpu.data(), pos.data(), N, H, stride, D, f);
      } else {
        ref::rope_forward(x_ref.data(), pos.data(), N, H, stride, D, f);
        cpu::rope_forward(x_cpu.data(), pos.data(), N, H, stride, D, f);
      }
      EXPECT_TRUE(all_close(std::string("rope llama3=") + (f.llama3 ? "yes" : "no") + (backward ? " backward" : ""),
                            x_cpu, x_ref, 2e-6, 2e-6));
    }
  // And the scaling changes the rotation (the low-frequency pairs turn 8x slower).
  auto scaled = x, plain = x;
  ref::rope_forward(scaled.data(), pos.data(), N, H, stride, D, r);
  ref::rope_forward(plain.data(), pos.data(), N, H, stride, D, RopeFreqs(500000.0f));
  EXPECT_FALSE(all_close("scaled vs plain", scaled, plain, 1e-3, 1e-3));
}

TEST(CpuVsRef, Bias) {
  // x += bias per row; dbias += column sums of dout, in fp64 in row order on both: the same bits.
  for (const auto& [N, C] : kShapes) {
    auto x = mt19937_normal(size_t(N) * C, 14, 1.0f), bias = mt19937_normal(size_t(C), 15, 0.5f);
    auto x_ref = x, x_cpu = x;
    ref::bias_forward(x_ref.data(), bias.data(), N, C);
    cpu::bias_forward(x_cpu.data(), bias.data(), N, C);
    EXPECT_TRUE(bitwise_equal("bias_forward " + shape(N, C), x_cpu, x_ref));
    for (int n = 0; n < N; n++)
      for (int c = 0; c < C; c++)
        ASSERT_EQ(x_ref[size_t(n) * C + c], x[size_t(n) * C + c] + bias[size_t(c)]) << shape(N, C);
    auto db_ref = mt19937_normal(size_t(C), 16, 1.0f), db_cpu = db_ref;  // accumulates into what is there
    const auto before = db_ref;
    ref::bias_backward(db_ref.data(), x.data(), N, C);
    cpu::bias_backward(db_cpu.data(), x.data(), N, C);
    EXPECT_TRUE(bitwise_equal("bias_backward " + shape(N, C), db_cpu, db_ref));
    for (int c = 0; c < C; c++) {
      double sum = 0;
      for (int n = 0; n < N; n++) sum += x[size_t(n) * C + c];
      ASSERT_EQ(db_ref[size_t(c)], before[size_t(c)] + float(sum)) << shape(N, C) << " column " << c;
    }
  }
}

TEST(CpuVsRef, RopeHandValueD4) {
  // Same hand-computed example as the ref test: pos 1, x = [1, 2, 3, 4], D = 4, theta = 1e4.
  std::vector<float> x = {1, 2, 3, 4};
  std::vector<int32_t> pos = {1};
  cpu::rope_forward(x.data(), pos.data(), 1, 1, 4, 4, 10000.0f);
  EXPECT_NEAR(x[0], std::cos(1.0) - 3 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[1], 2 * std::cos(0.01) - 4 * std::sin(0.01), 1e-6);
  EXPECT_NEAR(x[2], 3 * std::cos(1.0) + std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[3], 4 * std::cos(0.01) + 2 * std::sin(0.01), 1e-6);
}

TEST(CpuVsRef, Swiglu) {
  for (auto [N, F] : kShapes) {
    // gates up to ~+-20 (|4 sigma|) reach both saturated ends of the sigmoid
    auto h13 = mt19937_normal(size_t(N) * 2 * F, 12, 5.0f), dout = mt19937_normal(size_t(N) * F, 13);
    std::vector<float> out_ref(size_t(N) * F), out_cpu(size_t(N) * F);
    ref::swiglu_forward(out_ref.data(), h13.data(), N, F);
    cpu::swiglu_forward(out_cpu.data(), h13.data(), N, F);
    // cpu: polynomial exp (< 3 ulps) and fp32 products vs fp64: ~1e-6 relative
    EXPECT_TRUE(all_close("swiglu_forward " + shape(N, F), out_cpu, out_ref, 1e-6, 2e-6));
    std::vector<float> dh_ref(size_t(N) * 2 * F), dh_cpu(size_t(N) * 2 * F, 77.0f);
    ref::swiglu_backward(dh_ref.data(), dout.data(), h13.data(), N, F);
    cpu::swiglu_backward(dh_cpu.data(), dout.data(), h13.data(), N, F);
    // dgate's 1 + g(1 - sig) cancels for g < -1: absolute error ~ulp * |g * up|
    EXPECT_TRUE(all_close("swiglu_backward " + shape(N, F), dh_cpu, dh_ref, 1e-5, 1e-5));
  }
  // extreme gates: exp clamping must give 0 / identity, never NaN or inf
  std::vector<float> h13 = {-200.0f, -90.0f, 90.0f, 200.0f, 1.0f, 1.0f, 1.0f, 1.0f}, out_ref(4), out_cpu(4);
  ref::swiglu_forward(out_ref.data(), h13.data(), 1, 4);
  cpu::swiglu_forward(out_cpu.data(), h13.data(), 1, 4);
  EXPECT_TRUE(all_close("swiglu extreme gates", out_cpu, out_ref, 1e-30, 1e-6));
}

// The bf16 outputs (what the bf16 modes store for matmuls) are exactly the fp32 outputs rounded to
// nearest even: same arithmetic, one rounding at the store.
std::vector<float> to_float_vec(const std::vector<bf16>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); i++) out[i] = to_float(x[i]);
  return out;
}
::testing::AssertionResult equals_rounded(const std::string& what, const std::vector<bf16>& got,
                                          const std::vector<float>& fp32) {
  // two bf16 have the same bits exactly when their floats (the bits shifted up) have
  return bitwise_equal(what + " (want: the fp32 output rounded)", to_float_vec(got), testing::bf16_rounded(fp32));
}
// The same for bf16 values held in floats: each is exactly the float of the rounded fp32 output.
::testing::AssertionResult equals_rounded(const std::string& what, const std::vector<bf16_in_f32>& got,
                                          const std::vector<float>& fp32) {
  std::vector<bf16> bits(got.size());
  for (size_t i = 0; i < got.size(); i++) {
    bits[i] = to_bf16(got[i].value);
    if (to_float(bits[i]) != got[i].value)
      return ::testing::AssertionFailure() << what << ": [" << i << "] " << got[i].value << " is not a bf16 value";
  }
  return equals_rounded(what, bits, fp32);
}

TEST(CpuBf16Outputs, RmsnormAndSwigluRoundTheFp32Result) {
  for (auto [N, C] : kShapes) {
    auto x = mt19937_normal(size_t(N) * C, 5, 2.0f), w = mt19937_normal(C, 6);
    std::vector<float> out(size_t(N) * C), rstd(N), rstd_b(N);
    std::vector<bf16> out_b(size_t(N) * C);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    cpu::rmsnorm_forward(out_b.data(), rstd_b.data(), x.data(), w.data(), N, C, 1e-5f);
    EXPECT_TRUE(equals_rounded("rmsnorm_forward bf16 " + shape(N, C), out_b, out));
    EXPECT_EQ(rstd, rstd_b);

    const int F = C;
    auto h13 = mt19937_normal(size_t(N) * 2 * F, 12, 5.0f), dout = mt19937_normal(size_t(N) * F, 13);
    std::vector<float> hmid(size_t(N) * F), dh13(size_t(N) * 2 * F);
    std::vector<bf16> hmid_b(size_t(N) * F), dh13_b(size_t(N) * 2 * F);
    cpu::swiglu_forward(hmid.data(), h13.data(), N, F);
    cpu::swiglu_forward(hmid_b.data(), h13.data(), N, F);
    EXPECT_TRUE(equals_rounded("swiglu_forward bf16 " + shape(N, F), hmid_b, hmid));
    cpu::swiglu_backward(dh13.data(), dout.data(), h13.data(), N, F);
    cpu::swiglu_backward(dh13_b.data(), dout.data(), h13.data(), N, F);
    EXPECT_TRUE(equals_rounded("swiglu_backward bf16 " + shape(N, F), dh13_b, dh13));

    // bf16_in_f32 outputs: the same rounded values, kept in floats
    std::vector<bf16_in_f32> out_x(size_t(N) * C), hmid_x(size_t(N) * F), dh13_x(size_t(N) * 2 * F);
    std::vector<float> rstd_x(N);
    cpu::rmsnorm_forward(out_x.data(), rstd_x.data(), x.data(), w.data(), N, C, 1e-5f);
    EXPECT_TRUE(equals_rounded("rmsnorm_forward bf16_in_f32 " + shape(N, C), out_x, out));
    EXPECT_EQ(rstd_x, rstd);
    cpu::swiglu_forward(hmid_x.data(), h13.data(), N, F);
    EXPECT_TRUE(equals_rounded("swiglu_forward bf16_in_f32 " + shape(N, F), hmid_x, hmid));
    cpu::swiglu_backward(dh13_x.data(), dout.data(), h13.data(), N, F);
    EXPECT_TRUE(equals_rounded("swiglu_backward bf16_in_f32 " + shape(N, F), dh13_x, dh13));
  }
}

TEST(CpuBf16Outputs, RopeBackwardRoundsWholeRowsWhenAsked) {
  // rotated q, k heads and the untouched heads after them, every element rounded to bf16 values
  const int N = 33, n_heads = 5, extra = 3, D = 8, row_stride = (n_heads + extra) * D;
  auto x = mt19937_normal(size_t(N) * row_stride, 14, 3.0f);
  auto pos = mt19937_ints(N, 15, 0, 500);
  auto plain = x, rounded = x;
  cpu::rope_backward(plain.data(), pos.data(), N, n_heads, row_stride, D, 10000.0f);
  cpu::rope_backward(rounded.data(), pos.data(), N, n_heads, row_stride, D, 10000.0f, true);
  std::vector<bf16_in_f32> got(rounded.size());
  for (size_t i = 0; i < got.size(); i++) got[i].value = rounded[i];
  EXPECT_TRUE(equals_rounded("rope_backward round_rows", got, plain));
}

TEST(CpuVsRef, ResidualAndSumSquares) {
  for (int64_t n : {int64_t(1), int64_t(17), int64_t(127), int64_t(100003)}) {
    auto a = mt19937_normal(n, 14), b = mt19937_normal(n, 15);
    std::vector<float> out_ref(n), out_cpu(n);
    ref::residual_forward(out_ref.data(), a.data(), b.data(), n);
    cpu::residual_forward(out_cpu.data(), a.data(), b.data(), n);
    EXPECT_TRUE(all_close("residual n=" + std::to_string(n), out_cpu, out_ref, 0, 0));
    auto a2 = a;  // out aliasing a (x = x + f(x) in the model)
    cpu::residual_forward(a2.data(), a2.data(), b.data(), n);
    EXPECT_TRUE(all_close("residual aliased n=" + std::to_string(n), a2, out_ref, 0, 0));
    double ss_ref = ref::sum_squares(a.data(), n), ss_cpu = cpu::sum_squares(a.data(), n);
    // both fp64 sums of exact fp64 squares: only the summation order differs
    EXPECT_NEAR(ss_cpu, ss_ref, 1e-12 * ss_ref) << "sum_squares n=" << n;
  }
}

TEST(CpuVsRef, Sum) {
  for (int64_t n : {int64_t(1), int64_t(17), int64_t(127), int64_t(100003)}) {
    auto a = mt19937_normal(n, 16);
    double abs_sum = 0.0;
    for (float v : a) abs_sum += std::fabs(double(v));
    // both fp64 sums of the same fp32 values: only the summation order differs
    EXPECT_NEAR(cpu::sum(a.data(), n), ref::sum(a.data(), n), 1e-12 * abs_sum) << "sum n=" << n;
  }
  const std::vector<float> ones(100003, 1.0f);  // small integers add exactly in any order
  EXPECT_EQ(cpu::sum(ones.data(), int64_t(ones.size())), 100003.0);
  EXPECT_EQ(ref::sum(ones.data(), int64_t(ones.size())), 100003.0);
}

TEST(CpuVsRef, AdamwSeveralSteps) {
  for (int64_t n : {int64_t(1), int64_t(17), int64_t(127), int64_t(40001)}) {
    auto p_ref = mt19937_normal(n, 16), m_ref = std::vector<float>(n, 0.0f), v_ref = std::vector<float>(n, 0.0f);
    auto p_cpu = p_ref, m_cpu = m_ref, v_cpu = v_ref;
    for (int step = 1; step <= 5; step++) {
      auto grad = mt19937_normal(n, 100 + step, 0.1f);
      ref::adamw_update(p_ref.data(), m_ref.data(), v_ref.data(), grad.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step,
                        0.5f);
      cpu::adamw_update(p_cpu.data(), m_cpu.data(), v_cpu.data(), grad.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step,
                        0.5f);
    }
    // same fp32 operations, possibly contracted to FMAs differently: a few ulps after 5 steps
    std::string what = " n=" + std::to_string(n);
    EXPECT_TRUE(all_close("adamw param" + what, p_cpu, p_ref, 1e-7, 1e-6));
    EXPECT_TRUE(all_close("adamw m" + what, m_cpu, m_ref, 1e-9, 1e-6));
    EXPECT_TRUE(all_close("adamw v" + what, v_cpu, v_ref, 1e-12, 1e-6));
  }
}

TEST(CpuVsRef, AdamwWithBf16CopyIsAdamwPlusRounding) {
  // bf16-mixed's fused update: the fp32 results are bitwise those of cpu::adamw_update (same
  // per-element code) and the copy is each new param rounded to nearest even, held as bf16 or (the
  // float operand form) as bf16_in_f32.
  for (int64_t n : {int64_t(1), int64_t(17), int64_t(40001)}) {
    auto p = mt19937_normal(n, 16), m = mt19937_normal(n, 17, 0.01f), v = mt19937_normal(n, 18, 0.01f);
    for (auto& x : v) x = x * x;
    const auto p0 = p, m0 = m, v0 = v;
    for (int step = 1; step <= 3; step++) {
      auto grad = mt19937_normal(n, 100 + step, 0.1f);
      cpu::adamw_update(p.data(), m.data(), v.data(), grad.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
    }
    auto check_copy = [&](auto fill, const std::string& what) {
      auto p2 = p0, m2 = m0, v2 = v0;
      std::vector<decltype(fill)> copy(n, fill);
      for (int step = 1; step <= 3; step++) {
        auto grad = mt19937_normal(n, 100 + step, 0.1f);
        cpu::adamw_update_bf16_copy(p2.data(), copy.data(), m2.data(), v2.data(), grad.data(), n, 1e-3f, 0.9f, 0.95f,
                                    1e-8f, 0.1f, step, 0.5f);
      }
      EXPECT_EQ(p2, p) << what << " n=" << n;
      EXPECT_EQ(m2, m) << what << " n=" << n;
      EXPECT_EQ(v2, v) << what << " n=" << n;
      EXPECT_TRUE(equals_rounded("adamw " + what + " n=" + std::to_string(n), copy, p));
    };
    check_copy(bf16{0x7fc0}, "bf16 copy");
    check_copy(bf16_in_f32{-1.0f}, "bf16_in_f32 copy");
  }
}

// torch.optim.AdamW(lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1), two steps from
// param [0.5, -1.25, 2, 0] with grads [0.25, -0.5, 1, 0.125] then [-0.75, 0.5, 0.25, 0.0625];
// values printed by torch 1.13 (fp32). By hand, step 1 element 0: param = 0.5 * (1 - 0.01) = 0.495,
// m = 0.025, v = 0.01 * 0.0625, m_hat / sqrt(v_hat) = 0.25 / 0.25 = 1, so param = 0.495 - 0.1 = 0.395.
struct TorchAdamwExample {
  std::vector<float> param0 = {0.5f, -1.25f, 2.0f, 0.0f};
  std::vector<std::vector<float>> grads = {{0.25f, -0.5f, 1.0f, 0.125f}, {-0.75f, 0.5f, 0.25f, 0.0625f}};
  std::vector<std::vector<float>> param = {
      {0.39500001072883606f, -1.1374999284744263f, 1.8799999952316284f, -0.09999998658895493f},
      {0.4403798282146454f, -1.1313881874084473f, 1.7779738903045654f, -0.1923447847366333f}};
  std::vector<std::vector<float>> m = {
      {0.025f, -0.05f, 0.1f, 0.0125f},
      {-0.05250000208616257f, 0.005000002682209015f, 0.11499999463558197f, 0.017500000074505806f}};
  std::vector<std::vector<float>> v = {
      {0.000625f, 0.0025f, 0.01f, 0.00015625f},
      {0.006243749987334013f, 0.0049749999307096004f, 0.010525000281631947f, 0.00019374999101273715f}};
};

TEST(Adamw, MatchesTorchTwoSteps) {
  TorchAdamwExample ex;
  for (int backend = 0; backend < 2; backend++) {
    auto p = ex.param0;
    std::vector<float> m(4, 0.0f), v(4, 0.0f);
    for (int step = 1; step <= 2; step++) {
      // grad_scale 2 with grads halved: the clipping scale must be applied before the moments
      std::vector<float> half(4);
      for (int i = 0; i < 4; i++) half[i] = ex.grads[step - 1][i] * 0.5f;
      auto update = backend ? cpu::adamw_update : ref::adamw_update;
      update(p.data(), m.data(), v.data(), half.data(), 4, 0.1f, 0.9f, 0.99f, 1e-8f, 0.1f, step, 2.0f);
      std::string what = std::string(backend ? "cpu" : "ref") + " step " + std::to_string(step);
      // torch and we do the same fp32 operations; hyperparameters arrive as fp32 here (fp64 in
      // torch) and FMAs may differ: a few ulps
      EXPECT_TRUE(all_close(what + " param", p, ex.param[step - 1], 1e-7, 1e-6));
      EXPECT_TRUE(all_close(what + " m", m, ex.m[step - 1], 1e-9, 1e-6));
      EXPECT_TRUE(all_close(what + " v", v, ex.v[step - 1], 1e-12, 1e-6));
    }
  }
}

// The two bf16 values around x: {x} if x is a bf16, else the truncation toward zero and the next
// bf16 away from zero (what to_bf16_stochastic can produce).
bool is_bf16_neighbour(bf16 got, float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint16_t down = uint16_t(u >> 16);
  if ((u & 0xffffu) == 0) return got.bits == down;
  return got.bits == down || got.bits == uint16_t(down + 1);
}

struct Bf16State {
  std::vector<bf16> p, m, v;
  std::vector<float> p32;
};

Bf16State random_bf16_state(int64_t n, uint32_t seed) {
  auto m = mt19937_normal(n, seed + 1, 0.01f), v = mt19937_normal(n, seed + 2, 1e-4f);
  for (auto& x : v) x = std::fabs(x);
  return {to_bf16_vector(mt19937_normal(n, seed)), to_bf16_vector(m), to_bf16_vector(v), std::vector<float>(n)};
}

void run_bf16_sr(Bf16State& s, const std::vector<float>& grad, int step, uint64_t seed, uint32_t tensor_id) {
  cpu::adamw_update_bf16_sr(s.p.data(), s.m.data(), s.v.data(), s.p32.data(), grad.data(), int64_t(grad.size()), 1e-2f,
                            0.9f, 0.95f, 1e-8f, 0.1f, step, 1.0f, seed, tensor_id);
}

TEST(AdamwBf16Sr, BitwiseEqualForOneAndTwoThreads) {
  const int64_t n = 50001;  // large enough for the parallel path
  int saved = omp_get_max_threads();
  Bf16State s1 = random_bf16_state(n, 20), s2 = s1;
  for (int step = 1; step <= 3; step++) {
    auto grad = mt19937_normal(n, 30 + step, 0.1f);
    omp_set_num_threads(1);
    run_bf16_sr(s1, grad, step, 1234, 7);
    omp_set_num_threads(2);
    run_bf16_sr(s2, grad, step, 1234, 7);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(s1.p.data(), s2.p.data(), n * sizeof(bf16)), 0) << "param differs";
  EXPECT_EQ(std::memcmp(s1.m.data(), s2.m.data(), n * sizeof(bf16)), 0) << "m differs";
  EXPECT_EQ(std::memcmp(s1.v.data(), s2.v.data(), n * sizeof(bf16)), 0) << "v differs";
  EXPECT_EQ(std::memcmp(s1.p32.data(), s2.p32.data(), n * sizeof(float)), 0) << "param_f32 differs";
  // and the run is not trivially a no-op: another seed gives other roundings
  Bf16State s3 = random_bf16_state(n, 20);
  for (int step = 1; step <= 3; step++) run_bf16_sr(s3, mt19937_normal(n, 30 + step, 0.1f), step, 999, 7);
  EXPECT_NE(std::memcmp(s1.p.data(), s3.p.data(), n * sizeof(bf16)), 0) << "seed has no effect";
}

TEST(AdamwBf16Sr, ATensorUpdatedInPiecesRoundsAsInOneCall) {
  // ZeRO-1 updates a tensor in shards: the pieces, keyed by their first element, must give the same
  // bits as one call over the whole tensor.
  const int64_t n = 40003, cut1 = 12345, cut2 = 30001;
  Bf16State whole = random_bf16_state(n, 50), parts = whole;
  auto grad = mt19937_normal(n, 60, 0.1f);
  run_bf16_sr(whole, grad, 3, 77, 5);
  for (auto [a, b] : {std::pair<int64_t, int64_t>{0, cut1}, {cut1, cut2}, {cut2, n}})
    cpu::adamw_update_bf16_sr(parts.p.data() + a, parts.m.data() + a, parts.v.data() + a, parts.p32.data() + a,
                              grad.data() + a, b - a, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 1.0f, 77, 5, uint64_t(a));
  EXPECT_EQ(std::memcmp(whole.p.data(), parts.p.data(), n * sizeof(bf16)), 0);
  EXPECT_EQ(std::memcmp(whole.m.data(), parts.m.data(), n * sizeof(bf16)), 0);
  EXPECT_EQ(std::memcmp(whole.v.data(), parts.v.data(), n * sizeof(bf16)), 0);
  // keyed by the local index instead, the second piece would round differently
  Bf16State local = random_bf16_state(n, 50);
  cpu::adamw_update_bf16_sr(local.p.data() + cut1, local.m.data() + cut1, local.v.data() + cut1,
                            local.p32.data() + cut1, grad.data() + cut1, cut2 - cut1, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
                            3, 1.0f, 77, 5, 0);
  EXPECT_NE(std::memcmp(whole.p.data() + cut1, local.p.data() + cut1, (cut2 - cut1) * sizeof(bf16)), 0);
}

TEST(AdamwBf16Sr, AlwaysANeighbourOfTheFp32UpdateWithPhiloxBits) {
  for (int64_t n : {int64_t(1), int64_t(17), int64_t(127), int64_t(20011)}) {
    Bf16State s = random_bf16_state(n, 40);
    auto p = to_float_vec(s.p), m = to_float_vec(s.m), v = to_float_vec(s.v);
    auto grad = mt19937_normal(n, 41, 0.1f);
    // the exact fp32 update: cpu::adamw_update runs the same per-element code on fp32 copies
    cpu::adamw_update(p.data(), m.data(), v.data(), grad.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 1.0f);
    run_bf16_sr(s, grad, 3, 5, 11);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
      bool ok = is_bf16_neighbour(s.p[i], p[i]) && is_bf16_neighbour(s.m[i], m[i]) && is_bf16_neighbour(s.v[i], v[i]) &&
                s.p32[i] == to_float(s.p[i]);
      // and the rounding bits are exactly the documented Philox words of core/rng.h
      const auto w = random_u32x4(5, 3, 11, uint64_t(i));
      ok = ok && s.p[i].bits == to_bf16_stochastic(p[i], w[0]).bits &&
           s.m[i].bits == to_bf16_stochastic(m[i], w[1]).bits && s.v[i].bits == to_bf16_stochastic(v[i], w[2]).bits;
      if (!ok && bad++ < 5)
        ADD_FAILURE() << "n=" << n << " [" << i << "] param " << to_float(s.p[i]) << " (fp32 " << p[i] << ", f32 copy "
                      << s.p32[i] << ") m " << to_float(s.m[i]) << " (" << m[i] << ") v " << to_float(s.v[i]) << " ("
                      << v[i] << ")";
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(CpuVsRef, AdamwBf16VariantsFollowTheirReferences) {
  // ref::adamw_update_bf16_copy / _sr are ref::adamw_update and the mode's rounding. The cpu:: fp32
  // updates may differ from ref's in an ulp (contracted FMAs), so: where cpu::adamw_update and
  // ref::adamw_update agree bitwise on an element, the bf16 results must too (same rounding, same
  // Philox words); elsewhere they are at most one bf16 step apart.
  for (int64_t n : {int64_t(1), int64_t(17), int64_t(20011)}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    Bf16State cs = random_bf16_state(n, 50), rs = cs;
    const auto grad = mt19937_normal(n, 51, 0.1f);
    auto p_cpu = to_float_vec(cs.p), m_cpu = to_float_vec(cs.m), v_cpu = to_float_vec(cs.v);
    auto p_ref = p_cpu, m_ref = m_cpu, v_ref = v_cpu;
    cpu::adamw_update(p_cpu.data(), m_cpu.data(), v_cpu.data(), grad.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3,
                      1.0f);
    ref::adamw_update(p_ref.data(), m_ref.data(), v_ref.data(), grad.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3,
                      1.0f);
    cpu::adamw_update_bf16_sr(cs.p.data(), cs.m.data(), cs.v.data(), cs.p32.data(), grad.data(), n, 1e-2f, 0.9f, 0.95f,
                              1e-8f, 0.1f, 3, 1.0f, 5, 11, 1000);
    ref::adamw_update_bf16_sr(rs.p.data(), rs.m.data(), rs.v.data(), rs.p32.data(), grad.data(), n, 1e-2f, 0.9f, 0.95f,
                              1e-8f, 0.1f, 3, 1.0f, 5, 11, 1000);
    int64_t same = 0, bad = 0;
    auto check = [&](const char* what, bf16 c, bf16 r, float fc, float fr, int64_t i) {
      const bool agree = fc == fr;
      same += agree;
      const bool ok = agree ? c.bits == r.bits : std::abs(int(c.bits) - int(r.bits)) <= 1;
      if (!ok && bad++ < 5)
        ADD_FAILURE() << what << "[" << i << "]: cpu " << to_float(c) << " ref " << to_float(r) << " (fp32 " << fc
                      << " / " << fr << ")";
    };
    for (int64_t i = 0; i < n; i++) {
      check("param", cs.p[i], rs.p[i], p_cpu[i], p_ref[i], i);
      check("m", cs.m[i], rs.m[i], m_cpu[i], m_ref[i], i);
      check("v", cs.v[i], rs.v[i], v_cpu[i], v_ref[i], i);
      EXPECT_EQ(rs.p32[i], to_float(rs.p[i]));
    }
    EXPECT_EQ(bad, 0);
    EXPECT_GT(same, 3 * n * 9 / 10) << "the fp32 updates should mostly agree bitwise";
    // bf16-mixed: the copy is the new param rounded to nearest even.
    auto pc = to_float_vec(cs.p), pr = pc, mc = m_cpu, mr = mc, vc = v_cpu, vr = vc;
    std::vector<bf16> cc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
    cpu::adamw_update_bf16_copy(pc.data(), cc.data(), mc.data(), vc.data(), grad.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f,
                                0.1f, 4, 0.5f);
    ref::adamw_update_bf16_copy(pr.data(), rc.data(), mr.data(), vr.data(), grad.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f,
                                0.1f, 4, 0.5f);
    EXPECT_TRUE(all_close("bf16-mixed param", pc, pr, 1e-7, 1e-6));
    for (int64_t i = 0; i < n; i++) {
      EXPECT_EQ(rc[size_t(i)].bits, to_bf16(pr[i]).bits) << i;
      if (pc[i] == pr[i]) {
        EXPECT_EQ(cc[size_t(i)].bits, rc[size_t(i)].bits) << i;
      }
    }
  }
}

TEST(AdamwBf16Sr, UnbiasedAndIndependentDraws) {
  // Every element gets the same state and gradient, so each sees the same fp32 update x and only
  // its random bits differ; the mean of the roundings must be x within 5 standard errors, and
  // param's and m's round-up decisions must be independent (different words of the Philox draw).
  const int64_t n = 200000;
  const float p0 = 1.0f, m0 = 0.01f, v0 = 1e-4f, g = 0.0123f;
  float p = p0, m = to_float(to_bf16(m0)), v = to_float(to_bf16(v0));
  cpu::adamw_update(&p, &m, &v, &g, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 2, 1.0f);
  Bf16State s{std::vector<bf16>(n, to_bf16(p0)), std::vector<bf16>(n, to_bf16(m0)), std::vector<bf16>(n, to_bf16(v0)),
              std::vector<float>(n)};
  std::vector<float> grad(n, g);
  cpu::adamw_update_bf16_sr(s.p.data(), s.m.data(), s.v.data(), s.p32.data(), grad.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f,
                            0.0f, 2, 1.0f, 42, 3);
  auto check_mean = [&](const char* what, const std::vector<bf16>& got, float x) -> double {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    float down = to_float(bf16{uint16_t(u >> 16)}), up = to_float(bf16{uint16_t((u >> 16) + 1)});
    double q = (double(x) - down) / (double(up) - down);  // P(round away from zero)
    EXPECT_GT(q, 0.05) << what << ": pick a value strictly between two bf16s";
    EXPECT_LT(q, 0.95) << what << ": pick a value strictly between two bf16s";
    double sum = 0.0;
    for (bf16 b : got) sum += to_float(b);
    double mean = sum / double(n);
    double stderr_ = std::fabs(double(up) - down) * std::sqrt(q * (1 - q) / double(n));
    EXPECT_NEAR(mean, double(x), 5 * stderr_) << what << ": stochastic rounding is biased";
    std::printf("%-6s fp32 %.9g  mean of SR %.9g  (5 sigma = %.3g)\n", what, double(x), mean, 5 * stderr_);
    return q;
  };
  double qp = check_mean("param", s.p, p), qm = check_mean("m", s.m, m);
  check_mean("v", s.v, v);
  // fraction where both param and m rounded up: qp*qm if independent, min(qp, qm) if one draw
  uint32_t pu, mu;
  std::memcpy(&pu, &p, 4);
  std::memcpy(&mu, &m, 4);
  int64_t both = 0;
  for (int64_t i = 0; i < n; i++) both += (s.p[i].bits != uint16_t(pu >> 16)) && (s.m[i].bits != uint16_t(mu >> 16));
  double frac = double(both) / double(n), expect = qp * qm;
  EXPECT_NEAR(frac, expect, 5 * std::sqrt(expect * (1 - expect) / double(n)))
      << "param and m rounding draws look correlated";
}

TEST(AdamwBf16Sr, MatchesTorchFirstStepUpToRounding) {
  // Start from the torch example (param0 is exactly representable in bf16, m = v = 0): after one
  // step every stored value must be one of the two bf16 neighbours of torch's fp32 result.
  TorchAdamwExample ex;
  Bf16State s{to_bf16_vector(ex.param0), std::vector<bf16>(4, bf16{0}), std::vector<bf16>(4, bf16{0}),
              std::vector<float>(4)};
  cpu::adamw_update_bf16_sr(s.p.data(), s.m.data(), s.v.data(), s.p32.data(), ex.grads[0].data(), 4, 0.1f, 0.9f, 0.99f,
                            1e-8f, 0.1f, 1, 1.0f, 77, 0);
  for (int i = 0; i < 4; i++) {
    EXPECT_TRUE(is_bf16_neighbour(s.p[i], ex.param[0][i])) << i << ": " << to_float(s.p[i]) << " vs " << ex.param[0][i];
    EXPECT_TRUE(is_bf16_neighbour(s.m[i], ex.m[0][i])) << i << ": " << to_float(s.m[i]) << " vs " << ex.m[0][i];
    EXPECT_TRUE(is_bf16_neighbour(s.v[i], ex.v[0][i])) << i << ": " << to_float(s.v[i]) << " vs " << ex.v[0][i];
    EXPECT_EQ(s.p32[i], to_float(s.p[i]));
  }
}

}  // namespace
}  // namespace llamatrain
