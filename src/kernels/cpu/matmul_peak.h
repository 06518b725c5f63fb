// Achieved matmul throughput of this machine, for `llamatrain bench` and MFU: times repeated
// cpu::matmul_forward calls on one shape (after a warmup) with random operands.
#pragma once

#include "kernels/cpu/ops.h"

namespace llamatrain::cpu {

// GFLOP/s (2*M*N*K flop per call) of out (M,N) = inp (M,K) @ weight (N,K)^T in compute type ct,
// calls repeated for about `seconds` of wall time (at least 3 timed calls); the fastest call counts.
double measure_matmul_gflops(int M, int N, int K, ComputeType ct, double seconds);

}  // namespace llamatrain::cpu
