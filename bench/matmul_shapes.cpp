// bench_matmul: GFLOP/s of cpu::matmul_forward / matmul_backward (fp32 and bf16) on the stories110m
// shapes at M = B*T rows, and cpu::lmhead_ce_fused side by side with its earlier chunked algorithm
// (lmhead_ce_chunked_v1, kept here only as the baseline), interleaved in one process.
// "gemm" figures time the oneDNN matmuls alone; "api" figures include the per-call fp32 -> bf16 conversions.
// Usage: bench_matmul [M=2048] [seconds per measurement=0.5; lmhead: 20 x it rounds, at least 5] [all|matmul|lmhead].
// Prints figures only.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include <omp.h>

#include "core/rng.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/lmhead_ce.h"
#include "kernels/cpu/ops.h"

using namespace llamatrain;

namespace {

std::vector<float> random_vec(size_t n, uint32_t id, float scale) {
  std::vector<float> v(n);
#pragma omp parallel for
  for (size_t i = 0; i < n; i++) v[i] = scale * (2.0f * random_uniform(3, 0, id, i) - 1.0f);
  return v;
}

// Seconds per call of f: two warmup calls, then repeat for at least `seconds`.
double time_call(const std::function<void()>& f, double seconds) {
  f();
  f();
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  int calls = 0;
  double elapsed = 0.0;
  while (calls < 3 || elapsed < seconds) {
    f();
    calls++;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  }
  return elapsed / calls;
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

// The lm head + CE as cpu::lmhead_ce_fused computed it before the whole-batch backward (kept here
// only as the bench's baseline): per chunk of 256 rows, logits gemm, softmax into a chunk of dlogits,
// then dx_c = dlogits @ wout and dwout += dlogits^T @ x_c (K = 256: dwout streamed once per chunk).
void lmhead_ce_chunked_v1(float* losses /*(N)*/, float* dx /*(N,C)*/, float* dwout /*(V,C)*/, const float* x /*(N,C)*/,
                          const float* wout /*(V,C)*/, const bf16* wout_bf16 /*(V,C)*/, const int32_t* targets /*(N)*/,
                          float dloss, int N, int C, int V, cpu::ComputeType ct) {
  const bool is_bf16 = ct == cpu::ComputeType::bf16;
  const bool backward = dx != nullptr;
  const int R = std::min(256, std::max(N, 1));
  float* logits = cpu::detail::f32_scratch(0, int64_t(R) * V);                                 // (R,V)
  bf16* x_b = is_bf16 ? cpu::detail::bf16_scratch(0, int64_t(R) * C) : nullptr;                  // (R,C)
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

  struct Shape {
    const char* name;
    int IC, OC;
  };
  const Shape shapes[] = {{"qkv", 768, 2304}, {"wo", 768, 768}, {"w1|w3", 768, 4096}, {"w2", 2048, 768},
                          {"lm head", 768, 32000}};
  std::printf("GFLOP/s. gemm columns: the three oneDNN matmuls alone (bf16 operands pre-converted);\n"
              "api columns: cpu::matmul_forward / matmul_backward (dinp + dweight), bf16 conversions included.\n");
  std::printf("%-8s %5s %6s %5s | %8s %8s %8s | %8s %8s\n", "shape", "IC", "OC", "type", "fwd", "dinp", "dweight",
              "api fwd", "api bwd");
  for (const Shape& s : shapes) {
    if (!run_matmul) break;
    const auto inp = random_vec(size_t(M) * s.IC, 1, 1.0f);       // (M,IC)
    const auto weight = random_vec(size_t(s.OC) * s.IC, 2, 0.05f);  // (OC,IC)
    const auto dout = random_vec(size_t(M) * s.OC, 3, 0.01f);     // (M,OC)
    std::vector<bf16> inp_b(inp.size()), weight_b(weight.size()), dout_b(dout.size());
    bf16_from_float(inp_b.data(), inp.data(), int64_t(inp.size()));
    bf16_from_float(weight_b.data(), weight.data(), int64_t(weight.size()));
    bf16_from_float(dout_b.data(), dout.data(), int64_t(dout.size()));
    std::vector<float> out(size_t(M) * s.OC), dinp(size_t(M) * s.IC), dweight(weight.size(), 0.0f);
    const double flop = 2.0 * M * s.IC * double(s.OC);
    for (cpu::ComputeType ct : {cpu::ComputeType::f32, cpu::ComputeType::bf16}) {
      const bool b16 = ct == cpu::ComputeType::bf16;
      const void* a_inp = b16 ? static_cast<const void*>(inp_b.data()) : inp.data();
      const void* a_w = b16 ? static_cast<const void*>(weight_b.data()) : weight.data();
      const void* a_dout = b16 ? static_cast<const void*>(dout_b.data()) : dout.data();
      const double g_fwd =
          time_call([&] { cpu::detail::gemm(out.data(), a_inp, false, a_w, true, M, s.OC, s.IC, b16, false); }, seconds);
      const double g_dinp = time_call(
          [&] { cpu::detail::gemm(dinp.data(), a_dout, false, a_w, false, M, s.IC, s.OC, b16, false); }, seconds);
      const double g_dw = time_call(
          [&] { cpu::detail::gemm(dweight.data(), a_dout, true, a_inp, false, s.OC, s.IC, M, b16, true); }, seconds);
      const double t_fwd = time_call(
          [&] { cpu::matmul_forward(out.data(), inp.data(), weight.data(), weight_b.data(), M, s.IC, s.OC, ct); },
          seconds);
      const double t_bwd = time_call(
          [&] {
            cpu::matmul_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), weight_b.data(),
                                 M, s.IC, s.OC, ct);
          },
          seconds);
      std::printf("%-8s %5d %6d %5s | %8.1f %8.1f %8.1f | %8.1f %8.1f\n", s.name, s.IC, s.OC, b16 ? "bf16" : "f32",
                  flop / g_fwd * 1e-9, flop / g_dinp * 1e-9, flop / g_dw * 1e-9, flop / t_fwd * 1e-9,
                  2 * flop / t_bwd * 1e-9);
      std::fflush(stdout);
    }
  }

  // fused lm head + CE: the earlier chunked algorithm (lmhead_ce_chunked_v1 above) against
  // cpu::lmhead_ce_fused, interleaved in one process; 3 matmuls of 2*M*C*V flop each, plus the softmax.
  if (!run_lmhead) return 0;
  const int C = 768, V = 32000;
  const auto x = random_vec(size_t(M) * C, 4, 1.0f);       // (M,C)
  const auto wout = random_vec(size_t(V) * C, 5, 0.05f);   // (V,C)
  std::vector<bf16> wout_b(wout.size());                   // (V,C)
  bf16_from_float(wout_b.data(), wout.data(), int64_t(wout.size()));
  std::vector<int32_t> targets(static_cast<size_t>(M));
  for (int n = 0; n < M; n++) targets[size_t(n)] = int32_t(random_u32(3, 0, 6, uint64_t(n)) % V);
  std::vector<float> losses(static_cast<size_t>(M)), dx(size_t(M) * C), dwout(wout.size(), 0.0f);
  const double flop = 2.0 * M * C * double(V);
  const int reps = std::max(5, int(seconds * 20));  // rounds of old + new
  std::printf("lmhead_ce_fused M=%d C=%d V=%d: old = chunked v1 (R=256), new = cpu::lmhead_ce_fused (R=%d, G=%d bf16 / "
              "%d f32),\n  %d interleaved repetitions: median seconds (effective GFLOP/s), new/old ratio of medians\n",
              M, C, V, cpu::detail::lmhead_chunk_rows(V), cpu::detail::lmhead_block_rows(M, V, cpu::ComputeType::bf16),
              cpu::detail::lmhead_block_rows(M, V, cpu::ComputeType::f32), reps);
  for (cpu::ComputeType ct : {cpu::ComputeType::bf16, cpu::ComputeType::f32}) {
    for (bool backward : {false, true}) {
      float* dxp = backward ? dx.data() : nullptr;
      float* dwp = backward ? dwout.data() : nullptr;
      const std::vector<std::function<void()>> calls = {
          [&] {
            lmhead_ce_chunked_v1(losses.data(), dxp, dwp, x.data(), wout.data(), wout_b.data(), targets.data(),
                                 1.0f / M, M, C, V, ct);
          },
          [&] {
            cpu::lmhead_ce_fused(losses.data(), dxp, dwp, x.data(), wout.data(), wout_b.data(), targets.data(),
                                 1.0f / M, M, C, V, ct);
          }};
      const auto t = median_times(calls, reps);
      const double f = backward ? 3 * flop : flop;
      std::printf("  %4s %-16s old %.3f s (%5.1f)  new %.3f s (%5.1f)  new/old %.3f  (fastest calls: %.3f / %.3f s, %.3f)\n",
                  ct == cpu::ComputeType::f32 ? "f32" : "bf16", backward ? "forward+backward" : "forward-only",
                  t[0].first, f / t[0].first * 1e-9, t[1].first, f / t[1].first * 1e-9, t[1].first / t[0].first,
                  t[0].second, t[1].second, t[1].second / t[0].second);
      std::fflush(stdout);
    }
    // old and new side by side on one call (dwout from zero): largest differences, relative to the largest value
    std::vector<float> losses_old(losses.size()), dx_old(dx.size()), dw_old(dwout.size(), 0.0f);
    std::fill(dwout.begin(), dwout.end(), 0.0f);
    lmhead_ce_chunked_v1(losses_old.data(), dx_old.data(), dw_old.data(), x.data(), wout.data(), wout_b.data(),
                         targets.data(), 1.0f / M, M, C, V, ct);
    cpu::lmhead_ce_fused(losses.data(), dx.data(), dwout.data(), x.data(), wout.data(), wout_b.data(), targets.data(),
                         1.0f / M, M, C, V, ct);
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
  return 0;
}
