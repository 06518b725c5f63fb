// Achieved matmul throughput of this machine, for `llamatrain bench` and MFU: times repeated
// cpu::matmul_forward calls on one shape (after a warmup) with random operands.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"

namespace llamatrain::cpu {

// GFLOP/s (2*M*N*K flop per call) of out (M,N) = inp (M,K) @ weight (N,K)^T in compute type ct,
// calls repeated for about `seconds` of wall time (at least 3 timed calls); the fastest call counts.
double measure_matmul_gflops(int M, int N, int K, ComputeType ct, double seconds);

// What measure_matmul_gflops measured, for checking it: gflops = flop_per_call / fastest_s * 1e-9.
struct MatmulPeakProbe {
  int64_t calls = 0;         // timed calls (after the two warmup calls)
  double elapsed_s = 0;      // wall time from the start of the timed calls to the end of the last
  double fastest_s = 0;      // the fastest timed call
  double flop_per_call = 0;  // 2*M*N*K
  double gflops = 0;
  std::vector<float> inp, weight, out;  // (M,K), (N,K), (M,N): the operands and the last call's product
};
MatmulPeakProbe probe_matmul_peak(int M, int N, int K, ComputeType ct, double seconds);

}  // namespace llamatrain::cpu
