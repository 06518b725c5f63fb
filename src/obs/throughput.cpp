// Step FLOPs, MFU, tokens/s and the smoothed step time (see throughput.h).
#include "obs/throughput.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "model/shard.h"

namespace llamatrain::obs {

double step_flops(const model::LlamaConfig& c, int64_t B, int64_t T) {
  const double C = c.dim, F = c.ffn_dim, HD = double(c.n_heads) * c.head_dim(), QKV = c.qkv_dim();
  // per layer: wqkv (QKV, C), wo (C, H*D), w1 and w3 (F, C), w2 (C, F); then the lm head (V, C)
  const double matmul_params = c.n_layers * (QKV * C + C * HD + 3 * F * C) + double(c.vocab_size) * C;
  const double tokens = double(B) * double(T);
  const double attention = 3.0 * 2.0 * double(B) * c.n_heads * double(T) * double(T) * c.head_dim() * c.n_layers;
  return 6.0 * tokens * matmul_params + attention;
}

double step_flops_of(const model::LlamaConfig& c, double real_tokens, double attention_pairs) {
  // step_flops(c, 1, T) = per_token * T + per_pair * T * T / 2
  const double per_token = step_flops(c, 1, 1) - 3.0 * 2.0 * c.n_heads * c.head_dim() * c.n_layers;
  const double per_pair = 2.0 * 3.0 * 2.0 * c.n_heads * c.head_dim() * c.n_layers;
  return per_token * real_tokens + per_pair * attention_pairs;
}

double stage_flops(const model::LlamaConfig& c, int64_t B, int64_t T, int layers, bool lm_head) {
  model::LlamaConfig part = c;
  part.n_layers = layers;
  double f = step_flops(part, B, T);
  if (!lm_head) f -= 6.0 * double(B) * double(T) * double(c.vocab_size) * c.dim;
  return f;
}

std::vector<int> balanced_pipeline_split(const model::LlamaConfig& c, int pipeline_stages, int64_t T) {
  const int P = pipeline_stages, L = c.n_layers;
  CHECK(P >= 1 && P <= L, "pipeline of {} stages over {} layers", P, L);
  auto busiest = [&](const std::vector<int>& s) {
    double m = 0;
    for (int i = 0; i < P; i++) m = std::max(m, stage_flops(c, 1, T, s[size_t(i)], i == P - 1));
    return m;
  };
  // The even split when it exists, then every first and last stage size (model::pipeline_split's rule).
  std::vector<int> best;
  double best_f = std::numeric_limits<double>::infinity();
  auto consider = [&](int first, int last) {
    const auto s = model::try_pipeline_split(L, P, first, last);
    if (!s) return;
    const double f = busiest(*s);
    if (best.empty() || f < best_f * (1 - 1e-9)) best = *s, best_f = f;
  };
  consider(0, 0);
  if (P > 1)
    for (int first = 1; first <= L; first++)
      for (int last = 1; first + last <= L; last++) consider(first, last);
  CHECK(!best.empty(), "no pipeline split of {} layers over {} stages", L, P);
  return best;
}

double mfu(double flops_per_step, double step_seconds, double peak_flops_per_s) {
  if (!(step_seconds > 0) || !(peak_flops_per_s > 0)) return std::numeric_limits<double>::quiet_NaN();
  return flops_per_step / step_seconds / peak_flops_per_s;
}

double tokens_per_s(int64_t tokens, double seconds) { return seconds > 0 ? double(tokens) / seconds : 0.0; }

StepTimeAverage::StepTimeAverage(int window) : window_(window) {
  CHECK(window > 0, "StepTimeAverage: window {} must be positive", window);
}

void StepTimeAverage::add(double step_seconds) {
  if (!std::isfinite(step_seconds) || step_seconds < 0) return;
  recent_.push_back(step_seconds);
  if (int(recent_.size()) > window_) recent_.pop_front();
  ++count_;
}

double StepTimeAverage::mean_step_s() const {
  if (recent_.empty()) return std::numeric_limits<double>::quiet_NaN();
  return std::accumulate(recent_.begin(), recent_.end(), 0.0) / double(recent_.size());
}

double StepTimeAverage::eta_s(int64_t steps_left) const {
  if (steps_left <= 0) return 0.0;
  return double(steps_left) * mean_step_s();
}

}  // namespace llamatrain::obs
