// Times cpu:: vs ref:: causal attention forward and backward and prints GFLOP/s (fwd counted as
// 4*B*H*T*T*D/2 flops, bwd as 2.5x that). Not built by CMake; after building llamatrain_lib:
//   g++ -O3 -march=native -std=c++20 -fopenmp -Isrc bench/attention_bench.cpp
//       build/release/libllamatrain_lib.a -lfmt -o /tmp/attention_bench && /tmp/attention_bench [--no-ref]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"

using namespace llamatrain;

// Process CPU seconds: on a shared machine this is the time the kernel actually ran on a core, so
// flops per CPU second approximates per-core throughput even when wall time is inflated.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

struct Timing {
  double wall, cpu;  // medians over reps
};

template <typename F>
Timing seconds(F&& f, int reps) {
  std::vector<double> w, c;
  for (int r = 0; r < reps; r++) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    f();
    c.push_back(cpu_seconds() - c0);
    w.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(w.begin(), w.end());
  std::sort(c.begin(), c.end());
  return {w[w.size() / 2], c[c.size() / 2]};
}

int main(int argc, char** argv) {
  const bool with_ref = !(argc > 1 && std::strcmp(argv[1], "--no-ref") == 0);
  struct S { int B, T, H, Hkv, D; };
  for (const S s : {S{8, 256, 12, 12, 64}, S{1, 512, 32, 4, 64}}) {
    const int64_t nqkv = int64_t(s.B) * s.T * (s.H + 2 * s.Hkv) * s.D, nout = int64_t(s.B) * s.T * s.H * s.D;
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> qkv(nqkv), dout(nout), out(nout), lse(int64_t(s.B) * s.H * s.T), dqkv(nqkv);
    for (auto& x : qkv) x = dist(gen);
    for (auto& x : dout) x = dist(gen);
    const double fwd_flops = 4.0 * s.B * s.H * double(s.T) * s.T * s.D / 2, bwd_flops = 2.5 * fwd_flops;
    const Timing tf = seconds(
        [&] { cpu::attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D); }, 7);
    const Timing tb = seconds([&] {
      cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.H, s.Hkv, s.D);
    }, 7);
    std::printf("B=%d T=%d H=%d Hkv=%d D=%d threads=%d  (GFLOP/s per wall second | per CPU second)\n", s.B, s.T, s.H,
                s.Hkv, s.D, omp_get_max_threads());
    std::printf("  cpu fwd %8.2f ms %6.1f | %6.1f GFLOP/s   bwd %8.2f ms %6.1f | %6.1f GFLOP/s\n", tf.wall * 1e3,
                fwd_flops / tf.wall * 1e-9, fwd_flops / tf.cpu * 1e-9, tb.wall * 1e3, bwd_flops / tb.wall * 1e-9,
                bwd_flops / tb.cpu * 1e-9);
    if (with_ref) {
      const Timing rf = seconds(
          [&] { ref::attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D); }, 1);
      const Timing rb = seconds([&] {
        ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.H, s.Hkv,
                                s.D);
      }, 1);
      std::printf("  ref fwd %8.2f ms %6.1f | %6.1f GFLOP/s   bwd %8.2f ms %6.1f | %6.1f GFLOP/s\n", rf.wall * 1e3,
                  fwd_flops / rf.wall * 1e-9, fwd_flops / rf.cpu * 1e-9, rb.wall * 1e3, bwd_flops / rb.wall * 1e-9,
                  bwd_flops / rb.cpu * 1e-9);
      std::printf("  cpu/ref speedup (CPU time): fwd %.0fx, bwd %.0fx, fwd+bwd %.0fx\n", rf.cpu / tf.cpu,
                  rb.cpu / tb.cpu, (rf.cpu + rb.cpu) / (tf.cpu + tb.cpu));
    }
  }
}
