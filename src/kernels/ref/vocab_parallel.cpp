// Reference vocabulary-parallel embedding and cross-entropy: one rank's part of the vocabulary
// (rows [vocab_begin, vocab_begin + V)); combined over the ranks (a sum, or the all-gathered row
// maxima) they equal embedding_* and cross_entropy_* on the whole vocabulary (tests/kernels/
// ref_gradcheck_elementwise_test.cpp shows it for several splits). Plain loops; the exponentials in
// fp64, rounded once.
#include <cmath>

#include "core/bf16.h"
#include "kernels/ref/ops.h"

namespace llamatrain::ref {

void vocab_parallel_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin, int V,
                                      int N, int C) {
  // torch (Megatron): mask = (tokens < begin) | (tokens >= begin + V); out = wte[tokens - begin]; out[mask] = 0
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      const int64_t row = int64_t(tokens[n]) - vocab_begin;
      const bool masked = row < 0 || row >= V;
      out[int64_t(n) * C + c] = masked ? 0.0f : wte[row * C + c];
    }
}

void vocab_parallel_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t vocab_begin,
                                       int V, int N, int C) {
  // torch: dwte.index_add_(0, tokens[~mask] - begin, dout[~mask]), in order of n
  for (int n = 0; n < N; n++) {
    const int64_t row = int64_t(tokens[n]) - vocab_begin;
    if (row < 0 || row >= V) continue;
    for (int c = 0; c < C; c++) dwte[row * C + c] += dout[int64_t(n) * C + c];
  }
}

void vocab_parallel_ce_max(float* local_max, const float* logits, int N, int V) {
  for (int n = 0; n < N; n++) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = std::fmax(mx, logits[int64_t(n) * V + v]);
    local_max[n] = mx;
  }
}

void vocab_parallel_ce_partials(float* partials, float* global_max, float* logits, const float* maxima, int P,
                                const int32_t* targets, int64_t vocab_begin, int N, int V) {
  for (int n = 0; n < N; n++) {
    float mx = maxima[n];
    for (int p = 1; p < P; p++) mx = std::fmax(mx, maxima[int64_t(p) * N + n]);
    global_max[n] = mx;
    float* row = logits + int64_t(n) * V;
    const int64_t t = int64_t(targets[n]) - vocab_begin;  // the target's local row, if this rank holds it
    partials[2 * n + 1] = targets[n] >= 0 && t >= 0 && t < V ? row[t] : 0.0f;  // before the row turns into exps
    double sum = 0;
    for (int v = 0; v < V; v++) {
      row[v] = float(std::exp(double(row[v]) - mx));
      sum += row[v];
    }
    partials[2 * n] = float(sum);
  }
}

void vocab_parallel_ce_forward(float* losses, const float* global_max, const float* partials, const int32_t* targets,
                               int N) {
  // loss = logsumexp(logits) - logits[target] = max + log(sum exp(logits - max)) - logits[target]
  for (int n = 0; n < N; n++)
    losses[n] =
        targets[n] < 0 ? 0.0f : float(double(global_max[n]) + std::log(double(partials[2 * n])) - partials[2 * n + 1]);
}

void vocab_parallel_ce_backward(float* exps, const float* partials, const int32_t* targets, int64_t vocab_begin,
                                float dloss, int N, int V, bool bf16_values) {
  for (int n = 0; n < N; n++) {
    float* row = exps + int64_t(n) * V;
    const int64_t t = int64_t(targets[n]) - vocab_begin;  // onehot(target) is 0 where t is not in [0, V)
    for (int v = 0; v < V; v++) {
      // dlogits = dloss * (softmax - onehot), softmax = exp(logit - max) / sum
      float d =
          targets[n] < 0 ? 0.0f : float(double(dloss) * (double(row[v]) / partials[2 * n] - (v == t ? 1.0 : 0.0)));
      row[v] = bf16_values ? to_float(to_bf16(d)) : d;
    }
  }
}

}  // namespace llamatrain::ref
