// bench_matmul: GFLOP/s of cpu::matmul_forward / matmul_backward (fp32 and bf16) on the stories110m
// shapes at M = B*T rows, and cpu::lmhead_ce_forward / lmhead_ce_backward side by side with their
// earlier chunked algorithm (lmhead_ce_chunked_v1, kept here only as the baseline), interleaved in
// one process.
// "gemm" figures time the oneDNN matmuls alone; "api" figures include the per-call operand conversions.
// bf16 compute is timed through each kernel (matmul_choice.h: oneDNN's bf16 kernel, its fp32 kernel on
// bf16 values) and through the automatic choice, whose probe estimates are printed next to the
// measured calls (the probe times row slices and scales them up: this checks the scaling).
// Usage: bench_matmul [M=2048] [seconds: 20 x it interleaved rounds per shape, at least 5] [all|matmul|lmhead].
// Prints figures only. ONEDNN_MAX_CPU_ISA=AVX512_CORE simulates a CPU without native bf16. Needs
// oneDNN's bf16 kernel (not on a CPU without AVX-512: it says so and exits with status 2).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include <fmt/format.h>
#include <omp.h>

#include "core/rng.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/lmhead_ce.h"
#include "kernels/cpu/matmul_choice.h"
#include "kernels/cpu/ops.h"

using namespace llamatrain;

namespace {

// Sets the process-wide chooser's policy for its lifetime.
class Policy {
 public:
  explicit Policy(cpu::MatmulPolicy p) : old_(cpu::matmul_chooser().policy()) { cpu::matmul_chooser().set_policy(p); }
  ~Policy() { cpu::matmul_chooser().set_policy(old_); }

 private:
  cpu::MatmulPolicy old_;
};

std::vector<float> random_vec(size_t n, uint32_t id, float scale) {
  std::vector<float> v(n);
#pragma omp parallel for
  for (size_t i = 0; i < n; i++) v[i] = scale * (2.0f * random_uniform(3, 0, id, i) - 1.0f);
  return v;
}

// Seconds per call of each f over `reps` rounds, {median, min} per f; each round calls every f once,
// in turn, so load changes on a shared machine hit all of them alike. One warmup round first.
std::vector<std::pair<double, double>> median_times(const std::vector<std::function<void()>>& fs, int reps) {
  for (const auto& f : fs) f();
  std::vector<std::vector<double>> t(fs.size());
  for (int r = 0; r < reps; r++)
    for (size_t i = 0; i < fs.size(); i++) {
      const auto start = std::chrono::steady_clock::now();
      fs[i]();
      t[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  std::vector<std::pair<double, double>> med;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    med.emplace_back(v[v.size() / 2], v[0]);
  }
  return med;
}

// log-sum-exp of one row of logits (V).
float row_lse_v1(const float* l, int V) {
  const float mx = cpu::detail::row_max(l, V);
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int j = 0; j < V; j++) s += cpu::fast_exp(l[j] - mx);
  return mx + std::log(s);
}

// d (V) = scale * exp(l - lse), fp32 (d may be l) or bf16.
void row_softmax_v1(float* d, const float* l, float lse, float scale, int V) {
#pragma omp simd
  for (int j = 0; j < V; j++) d[j] = cpu::fast_exp(l[j] - lse) * scale;
}
void row_softmax_v1(bf16* __restrict d, const float* __restrict l, float lse, float scale, int V) {
  uint16_t* bits = reinterpret_cast<uint16_t*>(d);
#pragma omp simd
  for (int j = 0; j < V; j++) bits[j] = to_bf16(cpu::fast_exp(l[j] - lse) * scale).bits;
}

// The lm head + CE as cpu::lmhead_ce_backward computed it before the whole-batch backward (kept here
// only as the bench's baseline): per chunk of 256 rows, logits gemm, softmax into a chunk of dlogits,
// then dx_c = dlogits @ wout and dwout += dlogits^T @ x_c (K = 256: dwout streamed once per chunk).
void lmhead_ce_chunked_v1(float* losses /*(N)*/, float* dx /*(N,C)*/, float* dwout /*(V,C)*/, const float* x /*(N,C)*/,
                          const float* wout /*(V,C)*/, const bf16* wout_bf16 /*(V,C)*/, const int32_t* targets /*(N)*/,
                          float dloss, int N, int C, int V, cpu::ComputeType ct) {
  const bool is_bf16 = ct == cpu::ComputeType::bf16;
  const bool backward = dx != nullptr;
  const int R = std::min(256, std::max(N, 1));
  float* logits = cpu::detail::f32_scratch(0, int64_t(R) * V);                                     // (R,V)
  bf16* x_b = is_bf16 ? cpu::detail::bf16_scratch(0, int64_t(R) * C) : nullptr;                    // (R,C)
  bf16* dlogits_b = is_bf16 && backward ? cpu::detail::bf16_scratch(1, int64_t(R) * V) : nullptr;  // (R,V)
  const void* w = is_bf16 ? static_cast<const void*>(wout_bf16) : static_cast<const void*>(wout);
  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    const float* x_c = x + int64_t(r0) * C;  // (rows,C)
    const void* xa = x_c;
    if (is_bf16) {
      bf16_from_float(x_b, x_c, int64_t(rows) * C);
      xa = x_b;
    }
    cpu::detail::gemm(logits, xa, false, w, true, rows, V, C, is_bf16, false);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++) {
      float* l = logits + int64_t(i) * V;  // (V)
      const int32_t t = targets[r0 + i];
      const float lse = row_lse_v1(l, V);
      const float lt = t >= 0 ? l[t] : 0.0f;
      losses[r0 + i] = t >= 0 ? lse - lt : 0.0f;
      if (!backward) continue;
      const float scale = t >= 0 ? dloss : 0.0f;
      if (is_bf16) {
        bf16* d = dlogits_b + int64_t(i) * V;  // (V)
        row_softmax_v1(d, l, lse, scale, V);
        if (t >= 0) d[t] = to_bf16((cpu::fast_exp(lt - lse) - 1.0f) * scale);
      } else {
        row_softmax_v1(l, l, lse, scale, V);
        if (t >= 0) l[t] = (cpu::fast_exp(lt - lse) - 1.0f) * scale;
      }
    }
    if (!backward) continue;
    const void* da = is_bf16 ? static_cast<const void*>(dlogits_b) : static_cast<const void*>(logits);
    cpu::detail::gemm(dx + int64_t(r0) * C, da, false, w, false, rows, C, V, is_bf16, false);
    cpu::detail::gemm(dwout, da, true, xa, false, V, C, rows, is_bf16, true);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int M = argc > 1 ? std::atoi(argv[1]) : 2048;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 0.5;
  const char* what = argc > 3 ? argv[3] : "all";
  const bool run_matmul = std::strcmp(what, "lmhead") != 0, run_lmhead = std::strcmp(what, "matmul") != 0;
  std::printf("bench_matmul: M=%d, %d OpenMP threads, %.2f s per figure\n", M, omp_get_max_threads(), seconds);
  if (!cpu::matmul_chooser().bf16_available()) {
    std::fprintf(stderr,
                 "bench_matmul: oneDNN has no bf16 matmul kernel on this CPU (%s), so there are not two kernels to "
                 "compare\nhint: bf16 compute runs on the fp32 kernel here; `llamatrain bench --precision fp32` and "
                 "`--precision bf16-mixed` time training\n",
                 cpu::matmul_chooser().machine().c_str());
    return 2;
  }

  struct Shape {
    const char* name;
    int IC, OC;
  };
  const Shape shapes[] = {
      {"qkv", 768, 2304}, {"wo", 768, 768}, {"w1|w3", 768, 4096}, {"w2", 2048, 768}, {"lm head", 768, 32000}};
  std::printf("oneDNN implementations at %dx768x2304: fp32 %s, bf16 %s\n", M,
              cpu::detail::gemm_impl(false, true, M, 2304, 768, false, false).c_str(),
              cpu::detail::gemm_impl(false, true, M, 2304, 768, true, false).c_str());
  std::printf("GFLOP/s. gemm columns: the three oneDNN matmuls alone (operands pre-converted; the fp32 kernel on\n"
              "bf16 values runs the fp32 gemms); api columns: cpu::matmul_forward, matmul_backward (dinp + dweight)\n"
              "and matmul_backward without dinp (dweight), operand conversions included. bf16 rows: bf16 compute\n"
              "through oneDNN's bf16 kernel, its fp32 kernel on bf16 values, and the automatic choice.\n");
  std::printf("%-8s %5s %6s %-12s | %8s %8s %8s | %8s %8s %8s | %s\n", "shape", "IC", "OC", "run", "fwd", "dinp",
              "dweight", "api fwd", "api bwd", "api dW", "auto: kernel fwd/dinp/dW, probe estimate vs measured ms");
  for (const Shape& s : shapes) {
    if (!run_matmul) break;
    const auto inp = random_vec(size_t(M) * s.IC, 1, 1.0f);         // (M,IC)
    const auto weight = random_vec(size_t(s.OC) * s.IC, 2, 0.05f);  // (OC,IC)
    const auto dout = random_vec(size_t(M) * s.OC, 3, 0.01f);       // (M,OC)
    std::vector<bf16> inp_b(inp.size()), weight_b(weight.size()), dout_b(dout.size());
    bf16_from_float(inp_b.data(), inp.data(), int64_t(inp.size()));
    bf16_from_float(weight_b.data(), weight.data(), int64_t(weight.size()));
    bf16_from_float(dout_b.data(), dout.data(), int64_t(dout.size()));
    std::vector<float> out(size_t(M) * s.OC), dinp(size_t(M) * s.IC), dweight(weight.size(), 0.0f);
    const double flop = 2.0 * M * s.IC * double(s.OC);
    // Every figure of the shape in one interleaved set of rounds (median of reps), so load changes on a
    // shared machine hit all of them alike. Runs: fp32 compute; bf16 compute on the bf16 kernel, on the
    // fp32 kernel, and on the automatic choice (probed in the warmup round unless cached).
    const cpu::MatmulPolicy policies[4] = {cpu::MatmulPolicy::automatic, cpu::MatmulPolicy::bf16,
                                           cpu::MatmulPolicy::f32, cpu::MatmulPolicy::automatic};
    std::vector<std::function<void()>> calls;  // per run: [gemm fwd, dinp, dweight (runs 0-1)], api fwd, bwd, dW
    for (int run = 0; run < 4; run++) {
      const cpu::ComputeType ct = run == 0 ? cpu::ComputeType::f32 : cpu::ComputeType::bf16;
      const cpu::MatmulPolicy policy = policies[run];
      if (run <= 1) {
        const bool b16 = run == 1;
        const void* a_inp = b16 ? static_cast<const void*>(inp_b.data()) : inp.data();
        const void* a_w = b16 ? static_cast<const void*>(weight_b.data()) : weight.data();
        const void* a_dout = b16 ? static_cast<const void*>(dout_b.data()) : dout.data();
        calls.push_back([&, a_inp, a_w, b16] {
          cpu::detail::gemm(out.data(), a_inp, false, a_w, true, M, s.OC, s.IC, b16, false);
        });
        calls.push_back([&, a_dout, a_w, b16] {
          cpu::detail::gemm(dinp.data(), a_dout, false, a_w, false, M, s.IC, s.OC, b16, false);
        });
        calls.push_back([&, a_dout, a_inp, b16] {
          cpu::detail::gemm(dweight.data(), a_dout, true, a_inp, false, s.OC, s.IC, M, b16, true);
        });
      }
      calls.push_back([&, ct, policy] {
        const Policy p(policy);
        cpu::matmul_forward(out.data(), inp.data(), weight.data(), weight_b.data(), M, s.IC, s.OC, ct);
      });
      calls.push_back([&, ct, policy] {
        const Policy p(policy);
        cpu::matmul_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), weight_b.data(), M,
                             s.IC, s.OC, ct);
      });
      calls.push_back([&, ct, policy] {
        const Policy p(policy);
        cpu::matmul_backward(static_cast<float*>(nullptr), dweight.data(), dout.data(), inp.data(), weight.data(),
                             weight_b.data(), M, s.IC, s.OC, ct);
      });
    }
    const auto t = median_times(calls, std::max(5, int(seconds * 20)));
    size_t i = 0;
    double api_ms[4][3];  // per run: fwd, dinp (bwd - dW), dW
    for (int run = 0; run < 4; run++) {
      const char* label = run == 0 ? "fp32" : run == 1 ? "bf16/bf16 k" : run == 2 ? "bf16/fp32 k" : "bf16/auto";
      const auto gf = [&](double sec) { return fmt::format("{:8.1f}", flop / sec * 1e-9); };
      std::string gemm_cols = fmt::format("{:>8} {:>8} {:>8}", "-", "-", "-");
      if (run <= 1) {
        gemm_cols = gf(t[i].first) + " " + gf(t[i + 1].first) + " " + gf(t[i + 2].first);
        i += 3;
      }
      const double t_fwd = t[i].first, t_bwd = t[i + 1].first, t_dw = t[i + 2].first;
      i += 3;
      api_ms[run][0] = t_fwd * 1e3;
      api_ms[run][1] = (t_bwd - t_dw) * 1e3;
      api_ms[run][2] = t_dw * 1e3;
      std::string note;
      if (run == 3) {
        // the chooser's estimates per op (bf16/fp32 kernel ms) against the medians of the forced runs
        const char* ops[3] = {"fwd ", "dinp ", "dweight "};
        const std::string dims = fmt::format("N={} IC={} OC={} ", M, s.IC, s.OC);
        for (int j = 0; j < 3; j++)
          for (const auto& c : cpu::matmul_chooser().choices())
            if (c.source != cpu::MatmulChoice::Source::forced && c.shape.rfind(ops[j] + dims, 0) == 0)
              note += fmt::format("{}{}{}: {:.1f}/{:.1f} vs {:.1f}/{:.1f}", j ? "; " : "", ops[j],
                                  cpu::matmul_kernel_name(c.kernel), c.bf16_s * 1e3, c.f32_s * 1e3, api_ms[1][j],
                                  api_ms[2][j]);
      }
      std::printf("%-8s %5d %6d %-12s | %s | %s %s %s | %s\n", s.name, s.IC, s.OC, label, gemm_cols.c_str(),
                  gf(t_fwd).c_str(), fmt::format("{:8.1f}", 2 * flop / t_bwd * 1e-9).c_str(), gf(t_dw).c_str(),
                  note.c_str());
      std::fflush(stdout);
    }
  }

  // fused lm head + CE: the earlier chunked algorithm (lmhead_ce_chunked_v1 above) against
  // cpu::lmhead_ce_backward, interleaved in one process; 3 matmuls of 2*M*C*V flop each, plus the softmax.
  if (!run_lmhead) return 0;
  const int C = 768, V = 32000;
  const auto x = random_vec(size_t(M) * C, 4, 1.0f);      // (M,C)
  const auto wout = random_vec(size_t(V) * C, 5, 0.05f);  // (V,C)
  std::vector<bf16> wout_b(wout.size());                  // (V,C)
  bf16_from_float(wout_b.data(), wout.data(), int64_t(wout.size()));
  std::vector<int32_t> targets(static_cast<size_t>(M));
  for (int n = 0; n < M; n++) targets[size_t(n)] = int32_t(random_u32(3, 0, 6, uint64_t(n)) % V);
  std::vector<float> losses(static_cast<size_t>(M)), dx(size_t(M) * C), dwout(wout.size(), 0.0f);
  const double flop = 2.0 * M * C * double(V);
  const int reps = std::max(5, int(seconds * 20));  // rounds of old + new
  std::printf("lmhead_ce M=%d C=%d V=%d: old = chunked v1 (R=256), new = cpu::lmhead_ce_* (R=%d, G=%d bf16 / "
              "%d f32),\n  %d interleaved repetitions: median seconds (effective GFLOP/s), new/old ratio of medians\n",
              M, C, V, cpu::detail::lmhead_chunk_rows(V), cpu::detail::lmhead_block_rows(M, V, cpu::ComputeType::bf16),
              cpu::detail::lmhead_block_rows(M, V, cpu::ComputeType::f32), reps);
  for (cpu::ComputeType ct : {cpu::ComputeType::bf16, cpu::ComputeType::f32}) {
    const Policy bf16_kernel(cpu::MatmulPolicy::bf16);  // the chunked v1 runs oneDNN's bf16 kernel
    for (bool backward : {false, true}) {
      float* dxp = backward ? dx.data() : nullptr;
      float* dwp = backward ? dwout.data() : nullptr;
      const std::vector<std::function<void()>> calls = {
          [&] {
            lmhead_ce_chunked_v1(losses.data(), dxp, dwp, x.data(), wout.data(), wout_b.data(), targets.data(),
                                 1.0f / M, M, C, V, ct);
          },
          [&] {
            if (backward)
              cpu::lmhead_ce_backward(losses.data(), dxp, dwp, x.data(), wout.data(), wout_b.data(), targets.data(),
                                      1.0f / M, M, C, V, ct);
            else
              cpu::lmhead_ce_forward(losses.data(), x.data(), wout.data(), wout_b.data(), targets.data(), M, C, V, ct);
          }};
      const auto t = median_times(calls, reps);
      const double f = backward ? 3 * flop : flop;
      std::printf(
          "  %4s %-16s old %.3f s (%5.1f)  new %.3f s (%5.1f)  new/old %.3f  (fastest calls: %.3f / %.3f s, %.3f)\n",
          ct == cpu::ComputeType::f32 ? "f32" : "bf16", backward ? "forward+backward" : "forward-only", t[0].first,
          f / t[0].first * 1e-9, t[1].first, f / t[1].first * 1e-9, t[1].first / t[0].first, t[0].second, t[1].second,
          t[1].second / t[0].second);
      std::fflush(stdout);
    }
    // old and new side by side on one call (dwout from zero): largest differences, relative to the largest value
    std::vector<float> losses_old(losses.size()), dx_old(dx.size()), dw_old(dwout.size(), 0.0f);
    std::fill(dwout.begin(), dwout.end(), 0.0f);
    lmhead_ce_chunked_v1(losses_old.data(), dx_old.data(), dw_old.data(), x.data(), wout.data(), wout_b.data(),
                         targets.data(), 1.0f / M, M, C, V, ct);
    cpu::lmhead_ce_backward(losses.data(), dx.data(), dwout.data(), x.data(), wout.data(), wout_b.data(),
                            targets.data(), 1.0f / M, M, C, V, ct);
    const auto rel_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
      double diff = 0.0, scale = 0.0;
      for (size_t i = 0; i < a.size(); i++) {
        diff = std::max(diff, double(std::abs(a[i] - b[i])));
        scale = std::max(scale, double(std::abs(b[i])));
      }
      return diff / std::max(scale, 1e-30);
    };
    std::printf("  %4s new vs old: max |diff| / max |old|: losses %.2e  dx %.2e  dwout %.2e\n",
                ct == cpu::ComputeType::f32 ? "f32" : "bf16", rel_diff(losses, losses_old), rel_diff(dx, dx_old),
                rel_diff(dwout, dw_old));
  }

  // bf16 compute through each kernel and the automatic choice, interleaved, forward+backward
  {
    std::vector<std::function<void()>> calls;
    for (cpu::MatmulPolicy p : {cpu::MatmulPolicy::bf16, cpu::MatmulPolicy::f32, cpu::MatmulPolicy::automatic})
      calls.push_back([&, p] {
        const Policy forced(p);
        cpu::lmhead_ce_backward(losses.data(), dx.data(), dwout.data(), x.data(), wout.data(), wout_b.data(),
                                targets.data(), 1.0f / M, M, C, V, cpu::ComputeType::bf16);
      });
    const auto t = median_times(calls, reps);
    const auto k = cpu::detail::known_kernel(fmt::format("lmhead N={} C={} V={} train", M, C, V), M, V, C);
    std::printf("  bf16 compute forward+backward, %d interleaved repetitions: bf16 kernel %.3f s, fp32 kernel %.3f s, "
                "auto (%s) %.3f s\n",
                reps, t[0].first, t[1].first, k ? cpu::matmul_kernel_name(*k) : "?", t[2].first);
  }
  std::printf("%s", cpu::matmul_choices_text(cpu::matmul_chooser(), "").c_str());
  return 0;
}
