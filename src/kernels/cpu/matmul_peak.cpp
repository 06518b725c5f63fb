// measure_matmul_gflops (through probe_matmul_peak, which also returns what it measured): warm up
// (primitive creation, bf16 scratch growth, caches), then time whole calls of cpu::matmul_forward
// until `seconds` have passed and report the fastest call: a peak should not drop because another
// process took the CPU during some of the calls. Operands are small random values from the
// counter-based RNG so the result does not depend on denormals or on a previous run.
#include "kernels/cpu/matmul_peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/rng.h"

namespace llamatrain::cpu {

double measure_matmul_gflops(int M, int N, int K, ComputeType ct, double seconds) {
  return probe_matmul_peak(M, N, K, ct, seconds).gflops;
}

MatmulPeakProbe probe_matmul_peak(int M, int N, int K, ComputeType ct, double seconds) {
  MatmulPeakProbe p;
  p.inp.resize(size_t(M) * K);                // (M,K)
  p.weight.resize(size_t(N) * K);             // (N,K)
  std::vector<bf16> weight_b(size_t(N) * K);  // (N,K)
  p.out.resize(size_t(M) * N);                // (M,N)
  for (size_t i = 0; i < p.inp.size(); i++) p.inp[i] = random_uniform(1, 0, 0, i) - 0.5f;
  for (size_t i = 0; i < p.weight.size(); i++) p.weight[i] = random_uniform(1, 0, 1, i) - 0.5f;
  bf16_from_float(weight_b.data(), p.weight.data(), int64_t(p.weight.size()));

  auto call = [&] { matmul_forward(p.out.data(), p.inp.data(), p.weight.data(), weight_b.data(), M, K, N, ct); };
  call();
  call();
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  int64_t calls = 0;
  double elapsed = 0.0, fastest = 1e30;
  while (calls < 3 || elapsed < seconds) {
    const auto t0 = clock::now();
    call();
    const auto t1 = clock::now();
    fastest = std::min(fastest, std::chrono::duration<double>(t1 - t0).count());
    calls++;
    elapsed = std::chrono::duration<double>(t1 - start).count();
  }
  p.calls = calls;
  p.elapsed_s = elapsed;
  p.fastest_s = fastest;
  p.flop_per_call = 2.0 * M * N * double(K);
  p.gflops = p.flop_per_call / fastest * 1e-9;
  return p;
}

}  // namespace llamatrain::cpu
