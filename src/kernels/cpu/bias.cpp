// Fast bias of a linear layer, as ref::bias_forward / bias_backward (kernels/ref/bias.cpp): the
// forward is OpenMP over rows, vectorized over the columns; the backward runs OpenMP over blocks of
// columns, each column summed over the rows in row order in fp64, so it matches ref bit for bit
// whatever the thread count.
#include <algorithm>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {

namespace {
constexpr int kColumnBlock = 256;  // columns per task of the backward
}  // namespace

void bias_forward(float* x /*(N,OC)*/, const float* bias /*(OC)*/, int N, int OC) {
  const bool parallel = int64_t(N) * OC >= (1 << 15);
#pragma omp parallel for schedule(static) if (parallel)
  for (int n = 0; n < N; n++) {
    float* row = x + int64_t(n) * OC;
#pragma omp simd
    for (int c = 0; c < OC; c++) row[c] += bias[c];
  }
}

void bias_backward(float* dbias /*(OC)*/, const float* dout /*(N,OC)*/, int N, int OC) {
  const int blocks = (OC + kColumnBlock - 1) / kColumnBlock;
  const bool parallel = int64_t(N) * OC >= (1 << 15);
#pragma omp parallel for schedule(static) if (parallel)
  for (int blk = 0; blk < blocks; blk++) {
    const int c0 = blk * kColumnBlock, c1 = std::min(OC, c0 + kColumnBlock);
    double sum[kColumnBlock] = {};
    for (int n = 0; n < N; n++) {
      const float* row = dout + int64_t(n) * OC;
#pragma omp simd
      for (int c = c0; c < c1; c++) sum[c - c0] += double(row[c]);
    }
    for (int c = c0; c < c1; c++) dbias[c] += float(sum[c - c0]);
  }
}

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT
