// measure_matmul_gflops: warm up (primitive creation, bf16 scratch growth, caches), then time whole
// calls of cpu::matmul_forward until `seconds` have passed and report the fastest call: a peak
// should not drop because another process took the CPU during some of the calls. Operands are small random values from
// the counter-based RNG so the result does not depend on denormals or on a previous run.
#include "kernels/cpu/matmul_peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/rng.h"

namespace llamatrain::cpu {

double measure_matmul_gflops(int M, int N, int K, ComputeType ct, double seconds) {
  std::vector<float> inp(size_t(M) * K);     // (M,K)
  std::vector<float> weight(size_t(N) * K);  // (N,K)
  std::vector<bf16> weight_b(size_t(N) * K);  // (N,K)
  std::vector<float> out(size_t(M) * N);     // (M,N)
  for (size_t i = 0; i < inp.size(); i++) inp[i] = random_uniform(1, 0, 0, i) - 0.5f;
  for (size_t i = 0; i < weight.size(); i++) weight[i] = random_uniform(1, 0, 1, i) - 0.5f;
  bf16_from_float(weight_b.data(), weight.data(), int64_t(weight.size()));

  auto call = [&] { matmul_forward(out.data(), inp.data(), weight.data(), weight_b.data(), M, K, N, ct); };
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
  return 2.0 * M * N * double(K) / fastest * 1e-9;
}

}  // namespace llamatrain::cpu
