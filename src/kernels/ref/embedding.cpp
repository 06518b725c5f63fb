// Reference token embedding: a row gather forward, a row scatter-add backward.
// Tokens are assumed valid (0 <= tokens[n] < V); the caller checks them, kernels never throw.
#include "kernels/ref/ops.h"

namespace llamatrain::ref {

void embedding_forward(float* out /*(N,C)*/, const int32_t* tokens /*(N)*/, const float* wte /*(V,C)*/, int N, int C) {
  for (int n = 0; n < N; n++) {
    // torch: out = wte[tokens]  (nn.Embedding is a row lookup)
    const float* row = wte + int64_t(tokens[n]) * C;
    for (int c = 0; c < C; c++) out[int64_t(n) * C + c] = row[c];
  }
}

void embedding_backward(float* dwte /*(V,C)*/, const float* dout /*(N,C)*/, const int32_t* tokens /*(N)*/, int N,
                        int C) {
  for (int n = 0; n < N; n++) {
    // torch: dwte.index_add_(0, tokens, dout); a token seen twice receives both rows, in order of n
    float* row = dwte + int64_t(tokens[n]) * C;
    for (int c = 0; c < C; c++) row[c] += dout[int64_t(n) * C + c];
  }
}

}  // namespace llamatrain::ref
