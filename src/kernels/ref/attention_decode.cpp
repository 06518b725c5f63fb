// Reference decode attention: one query per head against the cached keys and values of positions
// 0..pos, a plain softmax (scores in fp32, their sum in fp64). Row pos of attention_forward on the
// whole sequence, which tests/kernels/ref_gradcheck_attention_test.cpp checks.
#include <algorithm>
#include <cmath>

#include "kernels/ref/ops.h"

namespace llamatrain::ref {

void attention_decode(float* out, float* scores, const float* q, const float* kv_cache, int pos, int H, int Hkv,
                      int D) {
  const int64_t KV = 2 * int64_t(Hkv) * D;  // a cache row: [k heads | v heads]
  const int group = H / Hkv;                // query heads per kv head
  const float scale = 1.0f / std::sqrt(float(D));
  for (int h = 0; h < H; h++) {
    const float* qh = q + int64_t(h) * D;
    const int kvh = h / group;
    float* s = scores + int64_t(h) * (pos + 1);
    // torch: s = (q @ k[:pos+1].T) * scale; p = softmax(s); out = p @ v[:pos+1]
    float mx = -INFINITY;
    for (int t = 0; t <= pos; t++) {
      const float* k = kv_cache + t * KV + int64_t(kvh) * D;
      float dot = 0;
      for (int d = 0; d < D; d++) dot += qh[d] * k[d];
      s[t] = dot * scale;
      mx = std::max(mx, s[t]);
    }
    double sum = 0;
    for (int t = 0; t <= pos; t++) sum += std::exp(double(s[t]) - mx);
    float* o = out + int64_t(h) * D;
    for (int d = 0; d < D; d++) {
      double acc = 0;
      for (int t = 0; t <= pos; t++)
        acc += std::exp(double(s[t]) - mx) / sum * kv_cache[t * KV + int64_t(Hkv) * D + int64_t(kvh) * D + d];
      o[d] = float(acc);
    }
  }
}

}  // namespace llamatrain::ref
