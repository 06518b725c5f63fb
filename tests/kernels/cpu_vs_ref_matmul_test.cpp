// cpu::matmul_* against ref::matmul_*, and cpu::lmhead_ce_forward / lmhead_ce_backward against
// ref::lmhead_ce_backward (fp64 logits and gradients), on awkward shapes, in f32 and bf16.
// Tolerances are error bounds scaled by S = sum_k |a_k||b_k| of each output (the same sum over
// absolute values, computed by the reference on |operands|), so they hold whatever the cancellation:
//   fp32: oneDNN's blocked fp32 sums differ from the fp64 reference by ~u32*sqrt(K)*S; we allow
//         u32*(8*sqrt(K) + 16)*S (u32 = 2^-24), far below any indexing or transpose bug (O(S)).
//   bf16: each operand is rounded to bf16 (8-bit significand, unit roundoff u16 = 2^-8), so each
//         product is off by at most (2*u16 + u16^2)|a||b| and the dot product by that times S, plus the
//         fp32 accumulation above. This bound is rigorous but loose, so bf16 is also checked tightly:
//         against the reference run on the same bf16-rounded operands (products of bf16 are exact in
//         fp32, so only fp32 accumulation error remains).
// bf16 compute runs through either kernel (matmul_choice.h), forced here one at a time: oneDNN's bf16
// kernel and its fp32 kernel on bf16 values must each pass the checks above, and agree with each
// other to fp32 summation order. The mixed case (dinp on one kernel, dweight on the other) and the
// chooser itself are tested in matmul_choice_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/bf16.h"
#include "core/rng.h"
#include "kernels/cpu/lmhead_ce.h"
#include "kernels/cpu/matmul_choice.h"
#include "kernels/cpu/matmul_peak.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using cpu::ComputeType;
using cpu::MatmulKernel;
using cpu::MatmulPolicy;
using testing::abs_values;
using testing::all_within;
using testing::bf16_rounded;
using testing::philox_uniform;
using testing::to_bf16_vector;

// Inputs: U(lo, hi) from the Philox streams of this seed, one per tensor id.
constexpr uint64_t kSeed = 42;

// Forces the process-wide chooser to one kernel for its lifetime.
class ForceKernel {
 public:
  explicit ForceKernel(MatmulKernel k) : old_(cpu::matmul_chooser().policy()) {
    cpu::matmul_chooser().set_policy(k == MatmulKernel::bf16 ? MatmulPolicy::bf16 : MatmulPolicy::f32);
  }
  ~ForceKernel() { cpu::matmul_chooser().set_policy(old_); }

 private:
  MatmulPolicy old_;
};

// How a test runs a kernel: fp32 compute, or bf16 compute through one of the two kernels.
struct Mode {
  ComputeType ct;
  MatmulKernel kernel;
  std::string tag() const {
    return ct == ComputeType::f32 ? "f32 " : kernel == MatmulKernel::bf16 ? "bf16 " : "bf16 on fp32 kernel ";
  }
};
const Mode kModes[] = {{ComputeType::f32, MatmulKernel::f32},
                       {ComputeType::bf16, MatmulKernel::bf16},
                       {ComputeType::bf16, MatmulKernel::f32}};

// Whether oneDNN has its bf16 kernel on this CPU (not without AVX-512, nor under
// ONEDNN_MAX_CPU_ISA=AVX2): without it bf16 compute runs on the fp32 kernel only, and the cases of
// the bf16 kernel are left out (said once).
bool bf16_kernel_here() {
  static const bool here = [] {
    const bool b = cpu::matmul_chooser().bf16_available();
    if (!b) std::printf("note: oneDNN has no bf16 matmul kernel on this CPU: the bf16 kernel's cases are left out\n");
    return b;
  }();
  return here;
}
bool runs_here(const Mode& m) { return m.kernel == MatmulKernel::f32 || bf16_kernel_here(); }

constexpr double kU32 = 0x1p-24;
constexpr double kU16 = 0x1p-8;  // bf16: 8 significand bits, round to nearest

double f32_sum_tol(int K) { return kU32 * (8.0 * std::sqrt(double(K)) + 16.0); }
double bf16_sum_tol(int K) { return 2.0 * kU16 + kU16 * kU16 + f32_sum_tol(K); }

// ---------------------------------------------------------------------------------------------
// matmul

struct MatmulRef {
  std::vector<float> out, dinp, dweight;  // (N,OC), (N,IC), (OC,IC); dweight accumulated from 0
};

MatmulRef run_ref(const std::vector<float>& inp, const std::vector<float>& weight, const std::vector<float>& dout,
                  int N, int IC, int OC) {
  MatmulRef r{std::vector<float>(size_t(N) * OC), std::vector<float>(size_t(N) * IC),
              std::vector<float>(size_t(OC) * IC, 0.0f)};
  ref::matmul_forward(r.out.data(), inp.data(), weight.data(), N, IC, OC);
  ref::matmul_backward(r.dinp.data(), r.dweight.data(), dout.data(), inp.data(), weight.data(), N, IC, OC);
  return r;
}

void check_matmul_shape(int N, int IC, int OC) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " IC=" << IC << " OC=" << OC);
  const uint32_t id = uint32_t(N * 7919 + IC * 31 + OC);
  const auto inp = philox_uniform(size_t(N) * IC, kSeed, id, -1, 1);            // (N,IC)
  const auto weight = philox_uniform(size_t(OC) * IC, kSeed, id + 1, -1, 1);    // (OC,IC)
  const auto dout = philox_uniform(size_t(N) * OC, kSeed, id + 2, -1, 1);       // (N,OC)
  const auto dweight0 = philox_uniform(size_t(OC) * IC, kSeed, id + 3, -1, 1);  // (OC,IC) prior gradient
  const auto weight_b = to_bf16_vector(weight);

  const MatmulRef want = run_ref(inp, weight, dout, N, IC, OC);
  const MatmulRef scale = run_ref(abs_values(inp), abs_values(weight), abs_values(dout), N, IC, OC);
  const MatmulRef want_b = run_ref(bf16_rounded(inp), bf16_rounded(weight), bf16_rounded(dout), N, IC, OC);

  MatmulRef by_kernel[2];  // bf16 compute: results of the bf16 kernel [0] and the fp32 kernel [1]
  for (const Mode& mode : kModes) {
    if (!runs_here(mode)) continue;
    const ComputeType ct = mode.ct;
    const ForceKernel force(mode.kernel);
    const bool is_bf16 = ct == ComputeType::bf16;
    const std::string tag = mode.tag();
    const double tol_fwd = is_bf16 ? bf16_sum_tol(IC) : f32_sum_tol(IC);
    const double tol_dinp = is_bf16 ? bf16_sum_tol(OC) : f32_sum_tol(OC);
    const double tol_dw = is_bf16 ? bf16_sum_tol(N) : f32_sum_tol(N);

    std::vector<float> out(size_t(N) * OC, -7.0f);
    cpu::matmul_forward(out.data(), inp.data(), weight.data(), is_bf16 ? weight_b.data() : nullptr, N, IC, OC, ct);
    EXPECT_TRUE(all_within(tag + "out", out, want.out, scale.out, tol_fwd, 2 * kU32));
    if (is_bf16) {
      EXPECT_TRUE(all_within(tag + "out vs bf16-rounded ref", out, want_b.out, scale.out, f32_sum_tol(IC), 2 * kU32));
    }

    // backward twice: dinp is overwritten (same both times), dweight accumulates dweight0 + 2 * grad
    std::vector<float> dinp(size_t(N) * IC, -7.0f), dweight = dweight0;
    for (int rep = 0; rep < 2; rep++)
      cpu::matmul_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(),
                           is_bf16 ? weight_b.data() : nullptr, N, IC, OC, ct);
    EXPECT_TRUE(all_within(tag + "dinp", dinp, want.dinp, scale.dinp, tol_dinp, 2 * kU32));
    if (is_bf16) {
      EXPECT_TRUE(
          all_within(tag + "dinp vs bf16-rounded ref", dinp, want_b.dinp, scale.dinp, f32_sum_tol(OC), 2 * kU32));
    }
    std::vector<double> dw_want(dweight.size()), dw_want_b(dweight.size()), dw_scale(dweight.size());
    for (size_t i = 0; i < dweight.size(); i++) {
      dw_want[i] = double(dweight0[i]) + 2.0 * want.dweight[i];
      dw_want_b[i] = double(dweight0[i]) + 2.0 * want_b.dweight[i];
      dw_scale[i] = 2.0 * scale.dweight[i];
    }
    EXPECT_TRUE(all_within(tag + "dweight (+= twice)", dweight, dw_want, dw_scale, tol_dw, 4 * kU32));
    if (is_bf16) {
      EXPECT_TRUE(
          all_within(tag + "dweight vs bf16-rounded ref", dweight, dw_want_b, dw_scale, f32_sum_tol(N), 4 * kU32));
    }

    // dinp == nullptr: only dweight, accumulated once
    std::vector<float> dweight1 = dweight0;
    cpu::matmul_backward(nullptr, dweight1.data(), dout.data(), inp.data(), weight.data(),
                         is_bf16 ? weight_b.data() : nullptr, N, IC, OC, ct);
    for (size_t i = 0; i < dweight.size(); i++) dw_want[i] = double(dweight0[i]) + want.dweight[i];
    EXPECT_TRUE(all_within(tag + "dweight (dinp == nullptr)", dweight1, dw_want, scale.dweight, tol_dw, 4 * kU32));

    if (!is_bf16) continue;
    by_kernel[mode.kernel == MatmulKernel::bf16 ? 0 : 1] = {out, dinp, dweight};
    // bf16 operands passed as bf16 (what the bf16 modes store) give bitwise the results of the float
    // operands, which the kernel rounds the same way: the same gemm on the same bytes.
    const auto inp_b = to_bf16_vector(inp), dout_b = to_bf16_vector(dout);
    std::vector<float> out_b(out.size(), -7.0f);
    cpu::matmul_forward(out_b.data(), inp_b.data(), weight.data(), weight_b.data(), N, IC, OC, ct);
    EXPECT_EQ(out_b, out) << "matmul_forward with a bf16 input";
    std::vector<float> dinp_b(dinp.size(), -7.0f), dweight_b = dweight0, dinp_m(dinp.size(), -7.0f),
                                                   dweight_m = dweight0;
    cpu::matmul_backward(dinp_b.data(), dweight_b.data(), dout_b.data(), inp_b.data(), weight.data(), weight_b.data(),
                         N, IC, OC, ct);
    cpu::matmul_backward(dinp_m.data(), dweight_m.data(), dout.data(), inp_b.data(), weight.data(), weight_b.data(), N,
                         IC, OC, ct);
    EXPECT_EQ(dinp_b, dinp) << "matmul_backward with bf16 dout and inp";
    EXPECT_EQ(dweight_b, dweight1) << "matmul_backward with bf16 dout and inp";
    EXPECT_EQ(dinp_m, dinp) << "matmul_backward with float dout, bf16 inp";
    EXPECT_EQ(dweight_m, dweight1) << "matmul_backward with float dout, bf16 inp";
    // So do bf16 values held in floats (bf16_in_f32: what the model keeps where the fp32 kernel is the
    // faster), as activations and as the weight copy, on either kernel.
    std::vector<bf16_in_f32> inp_x(inp.size()), dout_x(dout.size()), weight_x(weight.size());
    bf16_from_float(inp_x.data(), inp.data(), int64_t(inp.size()));
    bf16_from_float(dout_x.data(), dout.data(), int64_t(dout.size()));
    bf16_from_float(weight_x.data(), weight.data(), int64_t(weight.size()));
    for (const cpu::Bf16Weight w : {cpu::Bf16Weight(weight_b.data()), cpu::Bf16Weight(weight_x.data())}) {
      const std::string wtag = w.is_bf16 ? " (bf16 weight copy)" : " (bf16_in_f32 weight copy)";
      std::vector<float> out_x(out.size(), -7.0f), out_f(out.size(), -7.0f);
      cpu::matmul_forward(out_x.data(), inp_x.data(), weight.data(), w, N, IC, OC, ct);
      cpu::matmul_forward(out_f.data(), inp.data(), weight.data(), w, N, IC, OC, ct);
      EXPECT_EQ(out_x, out) << "matmul_forward with a bf16_in_f32 input" << wtag;
      EXPECT_EQ(out_f, out) << "matmul_forward with a float input" << wtag;
      std::vector<float> dinp_x(dinp.size(), -7.0f), dweight_x = dweight0, dinp_fx(dinp.size(), -7.0f),
                                                     dweight_fx = dweight0;
      cpu::matmul_backward(dinp_x.data(), dweight_x.data(), dout_x.data(), inp_x.data(), weight.data(), w, N, IC, OC,
                           ct);
      cpu::matmul_backward(dinp_fx.data(), dweight_fx.data(), dout.data(), inp_x.data(), weight.data(), w, N, IC, OC,
                           ct);
      EXPECT_EQ(dinp_x, dinp) << "matmul_backward with bf16_in_f32 dout and inp" << wtag;
      EXPECT_EQ(dweight_x, dweight1) << "matmul_backward with bf16_in_f32 dout and inp" << wtag;
      EXPECT_EQ(dinp_fx, dinp) << "matmul_backward with float dout, bf16_in_f32 inp" << wtag;
      EXPECT_EQ(dweight_fx, dweight1) << "matmul_backward with float dout, bf16_in_f32 inp" << wtag;
    }
  }
  // Both kernels multiply the same bf16 values exactly and sum in fp32: each is within f32_sum_tol of
  // the bf16-rounded reference, so they differ by at most twice that.
  if (!bf16_kernel_here()) return;
  const MatmulRef& k16 = by_kernel[0];
  const MatmulRef& k32 = by_kernel[1];
  EXPECT_TRUE(
      all_within("out: fp32 kernel vs bf16 kernel", k32.out, k16.out, scale.out, 2 * f32_sum_tol(IC), 4 * kU32));
  EXPECT_TRUE(
      all_within("dinp: fp32 kernel vs bf16 kernel", k32.dinp, k16.dinp, scale.dinp, 2 * f32_sum_tol(OC), 4 * kU32));
  std::vector<double> dw_scale2(scale.dweight.size());
  for (size_t i = 0; i < dw_scale2.size(); i++) dw_scale2[i] = 2.0 * scale.dweight[i];
  EXPECT_TRUE(all_within("dweight: fp32 kernel vs bf16 kernel", k32.dweight, k16.dweight, dw_scale2, 2 * f32_sum_tol(N),
                         8 * kU32));
}

TEST(CpuVsRefMatmul, AwkwardShapes) {
  for (int N : {1, 17, 127, 256})
    for (int IC : {1, 40, 107, 768})
      for (int OC : {1, 40, 107, 768}) {
        // keeps the fp64 reference quick (still includes 17 x 768 x 768 and 127 x 768 x 107)
        if (int64_t(N) * IC * OC > int64_t(127) * 768 * 107) continue;
        check_matmul_shape(N, IC, OC);
      }
}

TEST(CpuVsRefMatmul, PeakProbeTimesACorrectProductAndReportsItsFastestCall) {
  // What the probe measured, checked without depending on the timings themselves: the figure is the
  // FLOP count of one call over the fastest call, the calls ran for at least the requested time (and
  // at least 3 of them), the fastest call fits in that time, and what was timed is the product
  // out (M,N) = inp (M,K) @ weight (N,K)^T, within the tolerances above.
  const int M = 48, N = 40, K = 56;
  const double seconds = 0.01;
  for (const Mode& mode : kModes) {
    if (!runs_here(mode)) continue;
    const ComputeType ct = mode.ct;
    const ForceKernel force(mode.kernel);
    const bool is_bf16 = ct == ComputeType::bf16;
    SCOPED_TRACE(mode.tag());
    const cpu::MatmulPeakProbe p = cpu::probe_matmul_peak(M, N, K, ct, seconds);
    EXPECT_EQ(p.flop_per_call, 2.0 * M * N * K);
    EXPECT_GE(p.calls, 3);
    EXPECT_GE(p.elapsed_s, seconds);
    EXPECT_GT(p.fastest_s, 0.0);
    EXPECT_LE(p.fastest_s * double(p.calls), p.elapsed_s) << "the fastest call is slower than the mean";
    EXPECT_EQ(p.gflops, 2.0 * M * N * double(K) / p.fastest_s * 1e-9);

    ASSERT_EQ(p.inp.size(), size_t(M) * K);
    ASSERT_EQ(p.weight.size(), size_t(N) * K);
    const auto inp = is_bf16 ? bf16_rounded(p.inp) : p.inp, weight = is_bf16 ? bf16_rounded(p.weight) : p.weight;
    std::vector<float> want(size_t(M) * N), scale(size_t(M) * N);
    ref::matmul_forward(want.data(), inp.data(), weight.data(), M, K, N);
    ref::matmul_forward(scale.data(), abs_values(inp).data(), abs_values(weight).data(), M, K, N);
    EXPECT_TRUE(all_within("the product the probe timed", p.out, want, scale, f32_sum_tol(K), 2 * kU32));

    const double gflops = cpu::measure_matmul_gflops(M, N, K, ct, seconds);  // the same probe's figure
    EXPECT_TRUE(std::isfinite(gflops));
    EXPECT_GT(gflops, 0.0);
  }
}

// ---------------------------------------------------------------------------------------------
// lm head + cross-entropy

struct LmCase {
  int N, C, V;
  int chunk_rows;  // 0: the kernel's own choice
  float w_scale;   // wout ~ U(-w_scale, w_scale); large values give peaked softmaxes
};

// ref::lmhead_ce_backward's values (dwout from zero), plus the absolute-value sums the tolerances are
// scaled by (from the same fp64 logits and softmax).
struct LmRef {
  std::vector<float> losses;        // (N)
  std::vector<float> dx, dwout;     // (N,C), (V,C) (dwout from zero)
  std::vector<double> logit_scale;  // (N) max_v sum_c |x||w|
  std::vector<double> dx_p, dx_d;   // (N,C) dloss * sum_v p|w|, sum_v |dlogit||w|
  std::vector<double> dw_p, dw_d;   // (V,C) sum_n dloss * p|x|, sum_n |dlogit||x|
};

LmRef lm_reference(const std::vector<float>& x, const std::vector<float>& wout, const std::vector<int32_t>& targets,
                   double dloss, int N, int C, int V) {
  LmRef r;
  r.losses.assign(size_t(N), 0.0f);
  r.dx.assign(size_t(N) * C, 0.0f);
  r.dwout.assign(size_t(V) * C, 0.0f);
  ref::lmhead_ce_backward(r.losses.data(), r.dx.data(), r.dwout.data(), x.data(), wout.data(), targets.data(),
                          float(dloss), N, C, V);
  r.logit_scale.assign(size_t(N), 0.0);
  r.dx_p.assign(size_t(N) * C, 0.0);
  r.dx_d.assign(size_t(N) * C, 0.0);
  r.dw_p.assign(size_t(V) * C, 0.0);
  r.dw_d.assign(size_t(V) * C, 0.0);
  std::vector<double> l(static_cast<size_t>(V)), p(static_cast<size_t>(V)), d(static_cast<size_t>(V));
  for (int n = 0; n < N; n++) {
    const float* xn = &x[size_t(n) * C];
    for (int v = 0; v < V; v++) {
      double s = 0.0, sa = 0.0;
      for (int c = 0; c < C; c++) {
        s += double(xn[c]) * wout[size_t(v) * C + c];
        sa += std::abs(double(xn[c]) * wout[size_t(v) * C + c]);
      }
      l[size_t(v)] = s;
      r.logit_scale[size_t(n)] = std::max(r.logit_scale[size_t(n)], sa);
    }
    const int t = targets[size_t(n)];
    if (t < 0) continue;  // ignored: no gradient
    double mx = l[0];
    for (int v = 1; v < V; v++) mx = std::max(mx, l[size_t(v)]);
    double s = 0.0;
    for (int v = 0; v < V; v++) s += std::exp(l[size_t(v)] - mx);
    const double lse = mx + std::log(s);
    for (int v = 0; v < V; v++) {
      p[size_t(v)] = std::exp(l[size_t(v)] - lse);
      d[size_t(v)] = dloss * (p[size_t(v)] - (v == t ? 1.0 : 0.0));
    }
    for (int v = 0; v < V; v++) {
      for (int c = 0; c < C; c++) {
        const double w = wout[size_t(v) * C + c];
        r.dx_p[size_t(n) * C + c] += dloss * p[size_t(v)] * std::abs(w);
        r.dx_d[size_t(n) * C + c] += std::abs(d[size_t(v)] * w);
        r.dw_p[size_t(v) * C + c] += dloss * p[size_t(v)] * std::abs(double(xn[c]));
        r.dw_d[size_t(v) * C + c] += std::abs(d[size_t(v)] * xn[c]);
      }
    }
  }
  return r;
}

// The reference of the last case, reused by its f32 and bf16 runs (inputs depend only on the case).
const LmRef& lm_reference_cached(const std::vector<float>& x, const std::vector<float>& wout,
                                 const std::vector<int32_t>& targets, double dloss, int N, int C, int V) {
  static std::vector<float> last_x, last_w;
  static std::vector<int32_t> last_t;
  static LmRef last;
  if (x != last_x || wout != last_w || targets != last_t) {
    last = lm_reference(x, wout, targets, dloss, N, C, V);
    last_x = x;
    last_w = wout;
    last_t = targets;
  }
  return last;
}

// Error bounds (first order, times 1.5 for the neglected higher-order terms):
//   logits: e_l = tol_sum(C) * logit_scale[n] (tol_sum as for matmul, bf16 or f32);
//   lse: the kernel sums V exp terms in fp32 (exp ~2 ulp), e_lse = (V/16 + 16) * u32 + 2 u32 |lse|;
//   loss: 2 e_l + e_lse;  softmax: p' = p * (1 + delta), delta = expm1(2 e_l + e_lse) (per row);
//   dlogits additionally rounded to rho = u16 (bf16) or u32, and the backward matmuls add their own
//   operand rounding (bf16) and accumulation terms on sum |dlogit||w| (dx_d, dw_d).
struct LmResult {
  std::vector<float> losses, dx, dwout;
};

LmResult check_lm_case(const LmCase& lc, const Mode& mode) {
  const int N = lc.N, C = lc.C, V = lc.V;
  const ComputeType ct = mode.ct;
  const ForceKernel force(mode.kernel);
  const bool is_bf16 = ct == ComputeType::bf16;
  SCOPED_TRACE(::testing::Message() << mode.tag() << "N=" << N << " C=" << C << " V=" << V
                                    << " chunk_rows=" << lc.chunk_rows << " w_scale=" << lc.w_scale);
  const uint32_t id = uint32_t(1000 + N * 13 + V * 7 + C);
  const auto x = philox_uniform(size_t(N) * C, kSeed, id, -1, 1);                           // (N,C)
  const auto wout = philox_uniform(size_t(V) * C, kSeed, id + 1, -lc.w_scale, lc.w_scale);  // (V,C)
  const auto wout_b = to_bf16_vector(wout);
  const auto dwout0 = philox_uniform(size_t(V) * C, kSeed, id + 2, -1, 1);  // (V,C) prior gradient
  std::vector<int32_t> targets(static_cast<size_t>(N));
  int valid = 0;
  for (int n = 0; n < N; n++) {
    const uint32_t r = random_u32(kSeed, 1, id, uint64_t(n));
    targets[size_t(n)] = (r % 5 == 0) ? -100 : int32_t(r % uint32_t(V));  // ~20% ignored
    valid += targets[size_t(n)] >= 0;
  }
  const double dloss = 1.0 / std::max(valid, 1);

  const double tol_l = is_bf16 ? bf16_sum_tol(C) : f32_sum_tol(C);
  const double rho = is_bf16 ? kU16 : kU32;
  const LmRef& ref = lm_reference_cached(x, wout, targets, dloss, N, C, V);
  std::vector<double> loss_tol(static_cast<size_t>(N)), delta(static_cast<size_t>(N));
  double delta_max = 0.0;
  for (int n = 0; n < N; n++) {
    const double e_l = tol_l * ref.logit_scale[size_t(n)];
    const double lse = ref.losses[size_t(n)] + ref.logit_scale[size_t(n)];  // |lse| <= loss + |l_t|
    const double e_lse = (V / 16.0 + 16.0) * kU32 + 2.0 * kU32 * lse;
    loss_tol[size_t(n)] = 1.5 * (2.0 * e_l + e_lse);
    delta[size_t(n)] = 1.5 * std::expm1(2.0 * e_l + e_lse + 4.0 * kU32);
    delta_max = std::max(delta_max, delta[size_t(n)]);
  }

  cpu::detail::lmhead_chunk_rows_override() = lc.chunk_rows;
  std::vector<float> losses(size_t(N), -1.0f), dx(size_t(N) * C, -7.0f), dwout = dwout0;
  cpu::lmhead_ce_backward(losses.data(), dx.data(), dwout.data(), x.data(), wout.data(),
                          is_bf16 ? wout_b.data() : nullptr, targets.data(), float(dloss), N, C, V, ct);
  std::vector<float> losses_eval(size_t(N), -1.0f);
  cpu::lmhead_ce_forward(losses_eval.data(), x.data(), wout.data(), is_bf16 ? wout_b.data() : nullptr, targets.data(),
                         N, C, V, ct);
  if (is_bf16) {  // the weight copy held as bf16_in_f32 gives bitwise the same results on either kernel
    std::vector<bf16_in_f32> wout_x(wout.size());
    bf16_from_float(wout_x.data(), wout.data(), int64_t(wout.size()));
    std::vector<float> losses_x(size_t(N), -1.0f), dx_x(size_t(N) * C, -7.0f), dwout_x = dwout0;
    cpu::lmhead_ce_backward(losses_x.data(), dx_x.data(), dwout_x.data(), x.data(), wout.data(), wout_x.data(),
                            targets.data(), float(dloss), N, C, V, ct);
    EXPECT_EQ(losses_x, losses) << "a bf16_in_f32 wout copy";
    EXPECT_EQ(dx_x, dx) << "a bf16_in_f32 wout copy";
    EXPECT_EQ(dwout_x, dwout) << "a bf16_in_f32 wout copy";
  }
  cpu::detail::lmhead_chunk_rows_override() = 0;

  EXPECT_TRUE(all_within("losses", losses, ref.losses, loss_tol, 1.0, 2 * kU32));
  EXPECT_EQ(losses_eval, losses) << "the forward (evaluation) must give the backward's losses";
  for (int n = 0; n < N; n++)
    if (targets[size_t(n)] < 0) {
      EXPECT_EQ(losses[size_t(n)], 0.0f) << "ignored row " << n;
      for (int c = 0; c < C; c++) EXPECT_EQ(dx[size_t(n) * C + c], 0.0f) << "ignored row " << n << " column " << c;
    }

  // dx: |err| <= delta * dx_p + (2 rho + bf16 wout rounding + accumulation over V) * dx_d
  const double back_dx = 1.5 * (2.0 * rho + (is_bf16 ? kU16 : 0.0) + f32_sum_tol(V));
  std::vector<double> dx_lim(dx.size());
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      dx_lim[size_t(n) * C + c] =
          delta[size_t(n)] * ref.dx_p[size_t(n) * C + c] + back_dx * ref.dx_d[size_t(n) * C + c];
  EXPECT_TRUE(all_within("dx", dx, ref.dx, dx_lim, 1.0, 2 * kU32));

  // dwout = dwout0 + grad: |err| <= max_n delta_n * sum_n p|x| + (2 rho + bf16 x rounding + accumulation over N) * dw_d
  const double back_dw = 1.5 * (2.0 * rho + (is_bf16 ? kU16 : 0.0) + f32_sum_tol(N));
  std::vector<double> dw_want(dwout.size()), dw_lim(dwout.size());
  for (size_t i = 0; i < dwout.size(); i++) {
    dw_want[i] = double(dwout0[i]) + ref.dwout[i];
    dw_lim[i] = delta_max * ref.dw_p[i] + back_dw * ref.dw_d[i];
  }
  EXPECT_TRUE(all_within("dwout", dwout, dw_want, dw_lim, 1.0, 4 * kU32));
  return {losses, dx, dwout};
}

// Both bf16-compute kernels on one case: each against the fp64 reference (check_lm_case), and their
// losses against each other to fp32 summation order of the logits (both multiply the same bf16
// values). dx and dwout are not compared tighter than the reference allows: a logit that differs in
// its last fp32 bit can round its dlogit to the neighbouring bf16 value.
void check_lm_kernels_agree(const LmCase& lc) {
  check_lm_case(lc, kModes[0]);
  if (!bf16_kernel_here()) {
    check_lm_case(lc, kModes[2]);
    return;
  }
  const LmResult k16 = check_lm_case(lc, kModes[1]);
  const LmResult k32 = check_lm_case(lc, kModes[2]);
  SCOPED_TRACE(::testing::Message() << "N=" << lc.N << " C=" << lc.C << " V=" << lc.V);
  const uint32_t id = uint32_t(1000 + lc.N * 13 + lc.V * 7 + lc.C);
  const auto x = philox_uniform(size_t(lc.N) * lc.C, kSeed, id, -1, 1);
  const auto wout = philox_uniform(size_t(lc.V) * lc.C, kSeed, id + 1, -lc.w_scale, lc.w_scale);
  // |loss difference| <= 2 (logit differences) + the lse sums' rounding, per row
  std::vector<double> tol(static_cast<size_t>(lc.N));
  for (int n = 0; n < lc.N; n++) {
    double logit_scale = 0.0;
    for (int v = 0; v < lc.V; v++) {
      double sa = 0.0;
      for (int c = 0; c < lc.C; c++)
        sa += std::abs(double(to_float(to_bf16(x[size_t(n) * lc.C + c]))) *
                       to_float(to_bf16(wout[size_t(v) * lc.C + c])));
      logit_scale = std::max(logit_scale, sa);
    }
    const double lse = std::abs(double(k16.losses[size_t(n)])) + logit_scale;
    tol[size_t(n)] =
        1.5 * (4.0 * f32_sum_tol(lc.C) * logit_scale + 2.0 * ((lc.V / 16.0 + 16.0) * kU32 + 2.0 * kU32 * lse));
  }
  EXPECT_TRUE(all_within("losses: fp32 kernel vs bf16 kernel", k32.losses, k16.losses, tol, 1.0, 2 * kU32));
}

TEST(CpuVsRefLmHeadCe, MatchesFp64Reference) {
  const LmCase cases[] = {
      {37, 64, 211, 0, 0.2f},     // one chunk, smaller than the kernel's R
      {300, 40, 211, 0, 0.2f},    // 256 + 44 rows
      {37, 48, 211, 16, 3.0f},    // many small chunks, a 5-row tail, peaked softmax
      {17, 64, 1, 0, 0.5f},       // V == 1: loss and gradient are exactly 0 for every row
      {5, 48, 32000, 0, 0.2f},    // llama vocabulary, small N
      {70, 24, 32000, 64, 0.5f},  // llama vocabulary, 64 + 6 rows
  };
  for (const LmCase& lc : cases) check_lm_kernels_agree(lc);
}

TEST(CpuVsRefLmHeadCe, SeveralBackwardBlocks) {
  // dlogits blocks of 32 rows (forward chunks of 16): 3 blocks + a 4-row tail block, dwout accumulated
  // over blocks, dx written per block (by default a block holds up to 128 MiB of dlogits).
  cpu::detail::lmhead_block_rows_override() = 32;
  check_lm_kernels_agree({100, 40, 211, 16, 0.5f});
  cpu::detail::lmhead_block_rows_override() = 0;
}

TEST(CpuVsRefLmHeadCe, ChunkRowsFollowTheLastLevelCache) {
  // R*V fp32 logits fit the cache, R a multiple of 16 in [64, 256]; unknown cache: 32 MiB.
  const int64_t MiB = int64_t(1) << 20;
  EXPECT_EQ(cpu::detail::lmhead_chunk_rows_for(32000, 32 * MiB), 256);    // 262 rows fit
  EXPECT_EQ(cpu::detail::lmhead_chunk_rows_for(32000, 16 * MiB), 128);    // 131
  EXPECT_EQ(cpu::detail::lmhead_chunk_rows_for(32000, 8 * MiB), 64);      // 65
  EXPECT_EQ(cpu::detail::lmhead_chunk_rows_for(32000, 2 * MiB), 64);      // 16: at least 64
  EXPECT_EQ(cpu::detail::lmhead_chunk_rows_for(128256, 105 * MiB), 208);  // 214
  EXPECT_EQ(cpu::detail::lmhead_chunk_rows_for(8064, 256 * MiB), 256);    // at most 256
  EXPECT_EQ(cpu::detail::lmhead_chunk_rows_for(32000, 0), cpu::detail::lmhead_chunk_rows_for(32000, 32 * MiB));
  EXPECT_EQ(cpu::detail::lmhead_chunk_rows_for(1, -1), 256);
  for (const int V : {1, 1000, 32000, 151936}) {
    const int r = cpu::detail::lmhead_chunk_rows(V);
    EXPECT_EQ(r % 16, 0);
    EXPECT_GE(r, 64);
    EXPECT_LE(r, 256);
  }
}

TEST(CpuVsRefLmHeadCe, KernelsAgreeToSummationOrderOnExactLogits) {
  // x = k/8 and wout = j/16 (small integers: exact in bf16, and every partial sum of the logits is a
  // multiple of 1/128 far below 2^24/128, so exact in fp32 in any order): both bf16-compute kernels get
  // bitwise the same logits, softmax and bf16-rounded dlogits, so dx and dwout may differ only by the
  // fp32 summation order of the backward gemms; losses must be bitwise equal. Several blocks and chunks.
  if (!bf16_kernel_here()) GTEST_SKIP() << "oneDNN has no bf16 matmul kernel on this CPU";
  const int N = 100, C = 40, V = 211;
  std::vector<float> x(size_t(N) * C), wout(size_t(V) * C);
  for (size_t i = 0; i < x.size(); i++) x[i] = float(int(random_u32(kSeed, 2, 1, i) % 17) - 8) / 8.0f;
  for (size_t i = 0; i < wout.size(); i++) wout[i] = float(int(random_u32(kSeed, 2, 2, i) % 17) - 8) / 16.0f;
  const auto wout_b = to_bf16_vector(wout);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int n = 0; n < N; n++)
    targets[size_t(n)] = n % 7 == 3 ? -100 : int32_t(random_u32(kSeed, 2, 3, uint64_t(n)) % V);
  const double dloss = 1.0 / N;
  const LmRef ref = lm_reference(x, wout, targets, dloss, N, C, V);  // for the |dlogit||w| and |dlogit||x| sums

  cpu::detail::lmhead_chunk_rows_override() = 16;
  cpu::detail::lmhead_block_rows_override() = 32;
  LmResult r[2];
  for (int i = 0; i < 2; i++) {
    const ForceKernel force(i == 0 ? MatmulKernel::bf16 : MatmulKernel::f32);
    r[i] = {std::vector<float>(size_t(N)), std::vector<float>(size_t(N) * C), std::vector<float>(wout.size(), 0.0f)};
    cpu::lmhead_ce_backward(r[i].losses.data(), r[i].dx.data(), r[i].dwout.data(), x.data(), wout.data(), wout_b.data(),
                            targets.data(), float(dloss), N, C, V, ComputeType::bf16);
  }
  cpu::detail::lmhead_chunk_rows_override() = 0;
  cpu::detail::lmhead_block_rows_override() = 0;
  EXPECT_EQ(r[1].losses, r[0].losses);
  // dlogits are bf16 values within (1 + u16) of the reference's: scale the sums by that
  std::vector<double> dx_scale(ref.dx_d.size()), dw_scale(ref.dw_d.size());
  for (size_t i = 0; i < dx_scale.size(); i++) dx_scale[i] = (1 + 2 * kU16) * ref.dx_d[i];
  for (size_t i = 0; i < dw_scale.size(); i++) dw_scale[i] = (1 + 2 * kU16) * ref.dw_d[i];
  EXPECT_TRUE(all_within("dx: fp32 kernel vs bf16 kernel", r[1].dx, r[0].dx, dx_scale, 2 * f32_sum_tol(V), 4 * kU32));
  EXPECT_TRUE(
      all_within("dwout: fp32 kernel vs bf16 kernel", r[1].dwout, r[0].dwout, dw_scale, 2 * f32_sum_tol(N), 4 * kU32));
}

TEST(CpuVsRefLmHeadCe, RowsPastTheVocabularyAreNeitherReadNorWritten) {
  // The model's embedding and lm head hold padding rows after the real vocabulary (model/shard.h);
  // the lm head kernels get V = the real rows, so the padding has no logit and no gradient. Here the
  // rows after V are NaN in wout and its bf16 copy, and 0 in dwout: the fused kernels and the
  // vocabulary-parallel head's matmul pair give bitwise the results of an unpadded (V, C) table and
  // leave the padding of dwout exactly 0.
  const int N = 37, C = 48, V = 211, rows = 224;
  const auto x = philox_uniform(size_t(N) * C, kSeed, 7001, -1, 1);
  const auto w = philox_uniform(size_t(V) * C, kSeed, 7002, -0.5f, 0.5f);              // (V, C)
  std::vector<float> wpad(size_t(rows) * C, std::numeric_limits<float>::quiet_NaN());  // (rows, C)
  std::copy(w.begin(), w.end(), wpad.begin());
  const auto w_b = to_bf16_vector(w), wpad_b = to_bf16_vector(wpad);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int n = 0; n < N; n++)
    targets[size_t(n)] = n % 6 == 1 ? -100 : int32_t(random_u32(kSeed, 3, 1, uint64_t(n)) % V);
  for (const Mode& mode : kModes) {
    if (!runs_here(mode)) continue;
    SCOPED_TRACE(mode.tag());
    const ForceKernel force(mode.kernel);
    const bool b16 = mode.ct == ComputeType::bf16;
    std::vector<float> losses(static_cast<size_t>(N)), dx(size_t(N) * C), dw(size_t(V) * C, 0.0f);
    std::vector<float> losses_p(static_cast<size_t>(N)), dx_p(size_t(N) * C), dw_p(size_t(rows) * C, 0.0f);
    cpu::lmhead_ce_backward(losses.data(), dx.data(), dw.data(), x.data(), w.data(), b16 ? w_b.data() : nullptr,
                            targets.data(), 0.03f, N, C, V, mode.ct);
    cpu::lmhead_ce_backward(losses_p.data(), dx_p.data(), dw_p.data(), x.data(), wpad.data(),
                            b16 ? wpad_b.data() : nullptr, targets.data(), 0.03f, N, C, V, mode.ct);
    EXPECT_EQ(losses_p, losses);
    EXPECT_EQ(dx_p, dx);
    EXPECT_EQ(std::vector<float>(dw_p.begin(), dw_p.begin() + int64_t(V) * C), dw);
    EXPECT_EQ(std::vector<float>(dw_p.begin() + int64_t(V) * C, dw_p.end()),
              std::vector<float>(size_t(rows - V) * C, 0.0f))
        << "the padding rows' gradient";
    std::vector<float> eval(static_cast<size_t>(N));
    cpu::lmhead_ce_forward(eval.data(), x.data(), wpad.data(), b16 ? wpad_b.data() : nullptr, targets.data(), N, C, V,
                           mode.ct);
    EXPECT_EQ(eval, losses);
    // The vocabulary-parallel head: logits (N, V) of the real rows, then the gradients from dlogits.
    std::vector<float> logits(size_t(N) * V), logits_p(logits.size());
    cpu::matmul_forward(logits.data(), x.data(), w.data(), b16 ? w_b.data() : nullptr, N, C, V, mode.ct);
    cpu::matmul_forward(logits_p.data(), x.data(), wpad.data(), b16 ? wpad_b.data() : nullptr, N, C, V, mode.ct);
    EXPECT_EQ(logits_p, logits);
    std::fill(dw.begin(), dw.end(), 0.0f);
    std::fill(dw_p.begin(), dw_p.end(), 0.0f);
    cpu::matmul_backward(dx.data(), dw.data(), logits.data(), x.data(), w.data(), b16 ? w_b.data() : nullptr, N, C, V,
                         mode.ct);
    cpu::matmul_backward(dx_p.data(), dw_p.data(), logits.data(), x.data(), wpad.data(), b16 ? wpad_b.data() : nullptr,
                         N, C, V, mode.ct);
    EXPECT_EQ(dx_p, dx);
    EXPECT_EQ(std::vector<float>(dw_p.begin(), dw_p.begin() + int64_t(V) * C), dw);
    EXPECT_EQ(std::vector<float>(dw_p.begin() + int64_t(V) * C, dw_p.end()),
              std::vector<float>(size_t(rows - V) * C, 0.0f))
        << "the padding rows' gradient (matmul_backward)";
  }
}

TEST(CpuVsRefLmHeadCe, HugeLogitsStayFinite) {
  // logits of magnitude ~1e3: a naive exp overflows; the kernel must subtract the row max.
  const int N = 3, C = 4, V = 5;
  std::vector<float> x = {30, -20, 10, 5, 1, 2, 3, 4, -50, 40, 30, -10};  // (N,C)
  std::vector<float> wout(size_t(V) * C);                                 // (V,C)
  for (size_t i = 0; i < wout.size(); i++) wout[i] = float(int(i % 7) - 3) * 10.0f;
  const std::vector<int32_t> targets = {1, 4, 0};
  std::vector<float> losses(3), dx(size_t(N) * C), dwout(size_t(V) * C, 0.0f);
  cpu::lmhead_ce_backward(losses.data(), dx.data(), dwout.data(), x.data(), wout.data(), nullptr, targets.data(), 1.0f,
                          N, C, V, ComputeType::f32);
  const LmRef ref = lm_reference(x, wout, targets, 1.0, N, C, V);
  for (int n = 0; n < N; n++) EXPECT_NEAR(losses[size_t(n)], ref.losses[size_t(n)], 1e-3 * (1 + ref.losses[size_t(n)]));
  for (size_t i = 0; i < dx.size(); i++) EXPECT_NEAR(dx[i], ref.dx[i], 1e-3 * (1 + std::abs(ref.dx[i]))) << i;
  for (size_t i = 0; i < dwout.size(); i++)
    EXPECT_NEAR(dwout[i], ref.dwout[i], 1e-3 * (1 + std::abs(ref.dwout[i]))) << i;
}

}  // namespace
}  // namespace llamatrain
