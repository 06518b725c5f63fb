// Reference softmax cross-entropy from full (N,V) logits, log-sum-exp in fp64 with the row max
// subtracted. Rows with targets[n] < 0 (ignore index -100) have loss 0 and gradient 0.
// Backward derivation: docs/derivations.md#softmax-cross-entropy-backward. dlogits is overwritten.
#include <cmath>

#include "kernels/ref/ops.h"

namespace llamatrain::ref {

namespace {

// log(sum_v exp(row[v])), stable: max + log(sum exp(row - max)).
double logsumexp(const float* row /*(V)*/, int V) {
  double mx = row[0];
  for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
  double sum = 0.0;
  for (int v = 0; v < V; v++) sum += std::exp(double(row[v]) - mx);
  return mx + std::log(sum);
}

}  // namespace

void cross_entropy_forward(float* losses /*(N)*/, const float* logits /*(N,V)*/, const int32_t* targets /*(N)*/, int N,
                           int V) {
  for (int n = 0; n < N; n++) {
    // torch: F.cross_entropy(logits, targets, ignore_index=-100, reduction='none')
    if (targets[n] < 0) {
      losses[n] = 0.0f;
      continue;
    }
    const float* row = logits + int64_t(n) * V;
    // loss = logsumexp(logits) - logits[target] = -log_softmax(logits)[target]
    losses[n] = float(logsumexp(row, V) - double(row[targets[n]]));
  }
}

void cross_entropy_backward(float* dlogits /*(N,V)*/, const float* logits /*(N,V)*/, const int32_t* targets /*(N)*/,
                            float dloss, int N, int V) {
  for (int n = 0; n < N; n++) {
    float* drow = dlogits + int64_t(n) * V;
    if (targets[n] < 0) {
      for (int v = 0; v < V; v++) drow[v] = 0.0f;
      continue;
    }
    const float* row = logits + int64_t(n) * V;
    double lse = logsumexp(row, V);
    for (int v = 0; v < V; v++) {
      // dlogits = dloss * (softmax(logits) - onehot(target)), softmax = exp(logits - lse)
      double p = std::exp(double(row[v]) - lse);
      drow[v] = float(double(dloss) * (p - (v == targets[n] ? 1.0 : 0.0)));
    }
  }
}

}  // namespace llamatrain::ref
