// Fast RMSNorm, OpenMP over rows, vectorized over C; must match ref::rmsnorm_* (fp64 row sums).
// Forward: one pass for the fp64 sum of squares, one pass that scales (x * rstd * weight) and
// writes float, or bf16 values (rounded to nearest even) as bf16 or bf16_in_f32.
// Backward: one pass for the fp64 dot(dout*weight, x), one fused pass writing dx (+=) and the
// thread's private fp64 dweight partial; the partials are summed per column at the end, so there
// are no races and the result depends only on the thread count.
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/operand_types.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/put.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {

template <typename T>
void rmsnorm_forward(T* out /*(N,C)*/, float* rstd /*(N)*/, const float* x /*(N,C)*/, const float* weight /*(C)*/,
                     int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= (1 << 15))
  for (int n = 0; n < N; n++) {
    const float* xn = x + int64_t(n) * C;
    T* on = out + int64_t(n) * C;
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += double(xn[c]) * xn[c];
    float r = float(1.0 / std::sqrt(ss / C + double(eps)));
    rstd[n] = r;
#pragma omp simd
    for (int c = 0; c < C; c++) put(on + c, (xn[c] * r) * weight[c]);
  }
}

LLAMATRAIN_CPU_FOR_EACH_OPERAND(LLAMATRAIN_CPU_INSTANTIATE_RMSNORM_FORWARD)

void rmsnorm_backward(float* dx /*(N,C)*/, float* dweight /*(C)*/, const float* dout /*(N,C)*/,
                      const float* x /*(N,C)*/, const float* weight /*(C)*/, const float* rstd /*(N)*/, int N, int C) {
  bool parallel = int64_t(N) * C >= (1 << 15);
  int max_threads = parallel ? omp_get_max_threads() : 1;
  std::vector<double> partial(size_t(max_threads) * C, 0.0);  // (threads, C) dweight partials
#pragma omp parallel if (parallel)
  {
    double* dw = partial.data() + size_t(omp_get_thread_num()) * C;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const float* xn = x + int64_t(n) * C;
      const float* dn = dout + int64_t(n) * C;
      float* dxn = dx + int64_t(n) * C;
      float r = rstd[n];
      double dot = 0.0;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; c++) dot += double(dn[c] * weight[c]) * xn[c];
      float k = float(double(r) * r * r * dot / C);
#pragma omp simd
      for (int c = 0; c < C; c++) {
        dxn[c] += r * weight[c] * dn[c] - k * xn[c];
        dw[c] += double(dn[c] * xn[c] * r);
      }
    }
  }
  if (dweight == nullptr) return;  // a frozen weight
#pragma omp parallel for schedule(static) if (parallel)
  for (int c = 0; c < C; c++) {
    double acc = 0.0;
    for (int t = 0; t < max_threads; t++) acc += partial[size_t(t) * C + c];
    dweight[c] += float(acc);
  }
}

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT
