// Times cpu::attention_forward / attention_backward against the previous kernel (attention_v1, a
// frozen copy in bench/attention_v1.cpp) side by side in one process: per shape the two run
// interleaved, alternating which goes first, for `reps` repetitions after one warmup; medians of
// wall and CPU time (both threads) and old/new ratios are printed, with GFLOP/s counted on causal
// flops (fwd 2 GEMMs, bwd 5 GEMMs of B*H*T*T/2*D*2 each). The machine may be shared, so only the
// ratios are meaningful. Also prints the largest |new - old| of out, lse, dqkv. Asserts nothing.
//   cmake --build build/release --target attention_bench
//   OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 build/release/attention_bench [reps] [all | B T H Hkv D]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "timing.h"
#include "kernels/cpu/ops.h"

namespace llamatrain::attention_v1 {
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv, int D);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                        int T, int H, int Hkv, int D);
}  // namespace llamatrain::attention_v1

using namespace llamatrain;
using bench::median;
using bench::seconds;
using bench::Seconds;

namespace {

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); i++) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

struct Shape {
  int B, T, H, Hkv, D;
};

void run_shape(const Shape& s, int reps) {
  const int64_t nqkv = int64_t(s.B) * s.T * (s.H + 2 * s.Hkv) * s.D, nout = int64_t(s.B) * s.T * s.H * s.D;
  const int64_t nlse = int64_t(s.B) * s.H * s.T;
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> qkv(nqkv), dout(nout);
  for (auto& x : qkv) x = dist(gen);
  for (auto& x : dout) x = dist(gen);
  struct Run {
    std::vector<float> out, lse, dqkv;
    std::vector<Seconds> fwd, bwd;
  };
  Run old_run{std::vector<float>(nout), std::vector<float>(nlse), std::vector<float>(nqkv), {}, {}};
  Run new_run = old_run;
  for (int r = 0; r < reps + 1; r++) {  // repetition 0 warms up and is not counted
    for (int k = 0; k < 2; k++) {
      const int which = (k + r) % 2;  // alternate which kernel runs first
      Run& run = which == 0 ? old_run : new_run;
      // The current kernels without a sliding window, as the baseline's signature.
      const auto cpu_fwd = +[](float* out, float* lse, const float* q, int B, int T, int H, int Hkv, int D) {
        cpu::attention_forward(out, lse, q, B, T, H, Hkv, D);
      };
      const auto cpu_bwd =
          +[](float* dq, const float* dout, const float* q, const float* out, const float* lse, int B, int T, int H,
              int Hkv, int D) { cpu::attention_backward(dq, dout, q, out, lse, B, T, H, Hkv, D); };
      const auto fwd = which == 0 ? attention_v1::attention_forward : cpu_fwd;
      const auto bwd = which == 0 ? attention_v1::attention_backward : cpu_bwd;
      const Seconds tf = seconds([&] { fwd(run.out.data(), run.lse.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D); });
      const Seconds tb = seconds([&] {
        bwd(run.dqkv.data(), dout.data(), qkv.data(), run.out.data(), run.lse.data(), s.B, s.T, s.H, s.Hkv, s.D);
      });
      if (r > 0) {
        run.fwd.push_back(tf);
        run.bwd.push_back(tb);
      }
    }
  }
  const double flop = 2.0 * s.B * s.H * double(s.T) * s.T / 2 * s.D;  // one causal GEMM
  std::printf("B=%d T=%d H=%d Hkv=%d D=%d threads=%d reps=%d (medians; GFLOP/s on causal flops)\n", s.B, s.T, s.H,
              s.Hkv, s.D, omp_get_max_threads(), reps);
  // Medians of fwd, bwd and fwd+bwd, wall and CPU, for one run.
  struct Medians {
    double v[2][3];  // [wall, cpu][fwd, bwd, sum]
  };
  auto medians = [&](const Run& run) {
    Medians m;
    for (int c = 0; c < 2; c++) {
      std::vector<double> f, b, sum;
      for (int r = 0; r < reps; r++) {
        const double x = c == 0 ? run.fwd[r].wall : run.fwd[r].cpu, y = c == 0 ? run.bwd[r].wall : run.bwd[r].cpu;
        f.push_back(x);
        b.push_back(y);
        sum.push_back(x + y);
      }
      m.v[c][0] = median(f);
      m.v[c][1] = median(b);
      m.v[c][2] = median(sum);
    }
    return m;
  };
  const Medians mo = medians(old_run), mn = medians(new_run);
  const double flops[3] = {2 * flop, 5 * flop, 7 * flop};
  const char* clock[2] = {"wall", "cpu "};
  for (int c = 0; c < 2; c++) {
    for (int w = 0; w < 2; w++) {
      const Medians& m = w == 0 ? mo : mn;
      std::printf("  %s %s  fwd %7.2f ms %5.0f GF/s  bwd %7.2f ms %5.0f GF/s  fwd+bwd %7.2f ms %5.0f GF/s\n",
                  w == 0 ? "old" : "new", clock[c], m.v[c][0] * 1e3, flops[0] / m.v[c][0] * 1e-9, m.v[c][1] * 1e3,
                  flops[1] / m.v[c][1] * 1e-9, m.v[c][2] * 1e3, flops[2] / m.v[c][2] * 1e-9);
    }
    std::printf("  old/new %s  fwd %.2fx  bwd %.2fx  fwd+bwd %.2fx\n", clock[c], mo.v[c][0] / mn.v[c][0],
                mo.v[c][1] / mn.v[c][1], mo.v[c][2] / mn.v[c][2]);
  }
  std::printf("  max|new-old| out %.2g lse %.2g dqkv %.2g\n", max_abs_diff(new_run.out, old_run.out),
              max_abs_diff(new_run.lse, old_run.lse), max_abs_diff(new_run.dqkv, old_run.dqkv));
}

}  // namespace

// attention_bench [reps] [all | B T H Hkv D]: the stories110m shape only; with "all" also GQA,
// T = 512, 1024, D = 128 and a shape with few kv heads (B*Hkv < 2 threads: two-pass backward);
// or the one shape given.
int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 9;
  const bool all = argc > 2 && std::strcmp(argv[2], "all") == 0;
  std::vector<Shape> shapes = {{8, 256, 12, 12, 64}};
  if (all)
    shapes.insert(shapes.end(), {{8, 256, 12, 4, 64},
                                 {4, 512, 12, 12, 64},
                                 {2, 1024, 12, 12, 64},
                                 {1, 512, 32, 4, 64},
                                 {1, 1024, 8, 2, 128},
                                 {1, 512, 8, 1, 64}});
  else if (argc > 6)
    shapes = {{std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]), std::atoi(argv[6])}};
  for (const Shape& s : shapes) run_shape(s, reps);
}
