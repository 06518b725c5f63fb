// sample_token and generate_tokens (model/sampling.h).
#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/rng.h"
#include "model/llama.h"

namespace llamatrain::model {

int sample_token(const std::vector<float>& logits, float temperature, float top_p, float u) {
  const int V = int(logits.size());
  if (temperature <= 0.0f) return int(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const float mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> prob(V);
  double sum = 0;
  for (int i = 0; i < V; i++) sum += prob[i] = std::exp(double(logits[i] - mx) / temperature);
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
  // Smallest prefix of the sorted distribution whose mass reaches top_p.
  double kept = 0;
  int n_kept = 0;
  while (n_kept < V && (n_kept == 0 || kept < top_p * sum)) kept += prob[order[n_kept++]];
  double r = u * kept;
  for (int i = 0; i < n_kept; i++) {
    r -= prob[order[i]];
    if (r < 0) return order[i];
  }
  return order[n_kept - 1];
}

std::vector<int> generate_tokens(LlamaModel& m, const std::vector<int>& prompt, const GenerationOptions& o,
                                 const std::function<void(int)>& on_token) {
  m.reset_cache(int(prompt.size()) + o.max_new_tokens);
  std::vector<float> logits(m.config().vocab_size);  // (V) of the last position
  for (size_t i = 0; i < prompt.size(); i++) m.decode_step(logits.data(), prompt[i], int(i));
  const int pieces = o.pieces > 0 ? std::min(o.pieces, int(logits.size())) : int(logits.size());
  std::vector<int> generated;
  for (int step = 0; step < o.max_new_tokens; step++) {
    std::fill(logits.begin() + pieces, logits.end(), -std::numeric_limits<float>::infinity());
    const int next = sample_token(logits, o.temperature, o.top_p, random_uniform(o.seed, uint32_t(step), 0, 0));
    generated.push_back(next);
    if (std::find(o.stop.begin(), o.stop.end(), next) != o.stop.end()) break;
    on_token(next);
    if (step + 1 < o.max_new_tokens) m.decode_step(logits.data(), next, int(prompt.size()) + step);
  }
  return generated;
}

}  // namespace llamatrain::model
