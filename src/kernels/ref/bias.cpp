// Reference bias of a linear layer (Qwen2's q/k/v projections): the forward adds the bias to every
// row; the backward sums the output gradient over the rows, in fp64, into dbias (+=). The input
// gradient is dout itself, so there is nothing else to compute.
#include <vector>

#include "kernels/ref/ops.h"

namespace llamatrain::ref {

void bias_forward(float* x /*(N,OC)*/, const float* bias /*(OC)*/, int N, int OC) {
  // torch: x = x + bias (F.linear(input, weight, bias))
  for (int n = 0; n < N; n++)
    for (int c = 0; c < OC; c++) x[int64_t(n) * OC + c] += bias[c];
}

void bias_backward(float* dbias /*(OC)*/, const float* dout /*(N,OC)*/, int N, int OC) {
  // torch: dbias = dout.sum(0)
  std::vector<double> sum(size_t(OC), 0.0);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < OC; c++) sum[size_t(c)] += double(dout[int64_t(n) * OC + c]);
  for (int c = 0; c < OC; c++) dbias[c] += float(sum[size_t(c)]);
}

}  // namespace llamatrain::ref
