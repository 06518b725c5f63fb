// Fast token embedding. Forward: one row copy per token, OpenMP over rows. Backward: several rows
// may hit the same dwte row, so threads split the COLUMNS (contiguous chunks of C, 16-float
// multiples) and every thread walks all N tokens in order: no two threads write the same float, and
// each element is summed in the same order as ref::embedding_backward (bitwise equal results).
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // below this many floats, threads cost more than they save
}

void embedding_forward(float* out /*(N,C)*/, const int32_t* tokens /*(N)*/, const float* wte /*(V,C)*/, int N, int C) {
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
  for (int n = 0; n < N; n++)
    std::memcpy(out + int64_t(n) * C, wte + int64_t(tokens[n]) * C, sizeof(float) * size_t(C));
}

void embedding_backward(float* dwte /*(V,C)*/, const float* dout /*(N,C)*/, const int32_t* tokens /*(N)*/, int N,
                        int C) {
#pragma omp parallel if (int64_t(N) * C >= kParallelMin)
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int per = ((C + nt - 1) / nt + 15) / 16 * 16;
    int c0 = std::min(C, t * per), c1 = std::min(C, c0 + per);
    for (int n = 0; n < N; n++) {
      float* row = dwte + int64_t(tokens[n]) * C;
      const float* d = dout + int64_t(n) * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) row[c] += d[c];
    }
  }
}

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT
