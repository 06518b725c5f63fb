// Reference matmul (nn.Linear without bias): out = inp @ weight^T and its backward.
// Plain triple loops, every dot product accumulated in fp64, single-threaded: the oracle for
// cpu::matmul_*. Slow on purpose; only small shapes are meant to go here.
#include "kernels/ref/ops.h"

namespace llamatrain::ref {

void matmul_forward(float* out /*(N,OC)*/, const float* inp /*(N,IC)*/, const float* weight /*(OC,IC)*/, int N, int IC,
                    int OC) {
  for (int n = 0; n < N; n++) {
    const float* x = inp + int64_t(n) * IC;  // (IC)
    for (int o = 0; o < OC; o++) {
      // out[n, o] = sum_i inp[n, i] * weight[o, i]
      const float* w = weight + int64_t(o) * IC;  // (IC)
      double acc = 0.0;
      for (int i = 0; i < IC; i++) acc += double(x[i]) * double(w[i]);
      out[int64_t(n) * OC + o] = float(acc);
    }
  }
}

void matmul_backward(float* dinp /*(N,IC)*/, float* dweight /*(OC,IC)*/, const float* dout /*(N,OC)*/,
                     const float* inp /*(N,IC)*/, const float* weight /*(OC,IC)*/, int N, int IC, int OC) {
  // dinp[n, i] = sum_o dout[n, o] * weight[o, i]   (dinp = dout @ weight), overwritten
  if (dinp != nullptr) {
    for (int n = 0; n < N; n++) {
      for (int i = 0; i < IC; i++) {
        double acc = 0.0;
        for (int o = 0; o < OC; o++) acc += double(dout[int64_t(n) * OC + o]) * double(weight[int64_t(o) * IC + i]);
        dinp[int64_t(n) * IC + i] = float(acc);
      }
    }
  }
  // dweight[o, i] += sum_n dout[n, o] * inp[n, i]   (dweight += dout^T @ inp), accumulated
  for (int o = 0; o < OC; o++) {
    for (int i = 0; i < IC; i++) {
      double acc = 0.0;
      for (int n = 0; n < N; n++) acc += double(dout[int64_t(n) * OC + o]) * double(inp[int64_t(n) * IC + i]);
      dweight[int64_t(o) * IC + i] = float(double(dweight[int64_t(o) * IC + i]) + acc);
    }
  }
}

}  // namespace llamatrain::ref
