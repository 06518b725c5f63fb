// Reference decode attention: one query per head against the cached keys and values of positions
// 0..pos (pos - window + 1..pos under a sliding window), a plain softmax (scores in fp32, their sum
// in fp64). Row pos of attention_forward on the
// whole sequence, which tests/kernels/ref_gradcheck_attention_test.cpp checks.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ref/ops.h"

namespace llamatrain::ref {

void attention_decode(float* out, float* scores, const float* q, const float* kv_cache, int pos, int H, int Hkv, int D,
                      int window) {
  const int64_t KV = 2 * int64_t(Hkv) * D;  // a cache row: [k heads | v heads]
  const int group = H / Hkv;                // query heads per kv head
  const float scale = 1.0f / std::sqrt(float(D));
  const int t0 = window > 0 ? std::max(0, pos - window + 1) : 0;  // the first visible position
  for (int h = 0; h < H; h++) {
    const int kvh = h / group;
    const float* k = kv_cache + int64_t(kvh) * D;  // row t at k + t * KV
    const float* v = kv_cache + int64_t(Hkv) * D + int64_t(kvh) * D;
    float* s = scores + int64_t(h) * (pos + 1);
    // torch: s = (q @ k[t0:pos+1].T) * scale
    for (int t = t0; t <= pos; t++) {
      float dot = 0;
      for (int d = 0; d < D; d++) dot += q[int64_t(h) * D + d] * k[t * KV + d];
      s[t] = dot * scale;
    }
    // p = softmax(s), in fp64; out = p @ v[t0:pos+1]
    const double mx = *std::max_element(s + t0, s + pos + 1);
    std::vector<double> p(size_t(pos) + 1);
    double sum = 0;
    for (int t = t0; t <= pos; t++) sum += p[size_t(t)] = std::exp(double(s[t]) - mx);
    for (int d = 0; d < D; d++) {
      double acc = 0;
      for (int t = t0; t <= pos; t++) acc += p[size_t(t)] / sum * v[t * KV + d];
      out[int64_t(h) * D + d] = float(acc);
    }
  }
}

}  // namespace llamatrain::ref
