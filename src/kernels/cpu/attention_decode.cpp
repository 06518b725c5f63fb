// Fast decode attention (one query per head over the KV cache, generate's step): OpenMP over the
// heads, scores in fp32 with their exponentials summed in fp64. Must match ref::attention_decode to
// fp32 rounding; the prefill and training path is attention.cpp's flash kernel. A sliding window
// starts each head's scores at position pos - window + 1.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {

void attention_decode(float* out, float* scores, const float* q, const float* kv_cache, int pos, int H, int Hkv, int D,
                      int window) {
  const int t0 = window > 0 ? std::max(0, pos - window + 1) : 0;  // the first visible position
  const int64_t KV = 2 * int64_t(Hkv) * D;
  const int group = H / Hkv;
  const float scale = 1.0f / std::sqrt(float(D));
#pragma omp parallel for schedule(static)
  for (int h = 0; h < H; h++) {
    const float* qh = q + int64_t(h) * D;
    const int kvh = h / group;
    float* s = scores + int64_t(h) * (pos + 1);
    float mx = -INFINITY;
    for (int t = t0; t <= pos; t++) {
      const float* k = kv_cache + t * KV + int64_t(kvh) * D;
      float dot = 0;
      for (int d = 0; d < D; d++) dot += qh[d] * k[d];
      s[t] = dot * scale;
      mx = std::max(mx, s[t]);
    }
    double sum = 0;
    for (int t = t0; t <= pos; t++) {
      s[t] = std::exp(s[t] - mx);
      sum += s[t];
    }
    float* o = out + int64_t(h) * D;
    std::fill(o, o + D, 0.0f);
    for (int t = t0; t <= pos; t++) {
      const float* v = kv_cache + t * KV + int64_t(Hkv) * D + int64_t(kvh) * D;
      const float pr = float(s[t] / sum);
      for (int d = 0; d < D; d++) o[d] += pr * v[d];
    }
  }
}

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT
