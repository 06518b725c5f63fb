// sample_token (model/sampling.h).
#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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

}  // namespace llamatrain::model
