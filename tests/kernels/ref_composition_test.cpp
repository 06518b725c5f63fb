// The ref:: kernels that are compositions or parts of others, checked against them: the
// vocabulary-parallel embedding and cross-entropy over 1 to 4 ranks (even and uneven splits) against
// embedding_* and cross_entropy_* on the whole vocabulary, decode attention against the rows of
// attention_forward, the lm head + cross-entropy against matmul_* and cross_entropy_*, and the init
// fill's draws (a function of the element's place in the full tensor, normal with the asked std).
// Those others are checked by finite differences (ref_gradcheck_*_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/bf16.h"
#include "kernels/ref/ops.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using testing::all_close;
using testing::mt19937_normal;

// The vocabulary [0, V) cut into P parts as unevenly as Megatron never would, to test the bookkeeping.
std::vector<std::pair<int64_t, int>> vocab_parts(int V, int P) {
  std::vector<std::pair<int64_t, int>> parts;
  int64_t begin = 0;
  for (int p = 0; p < P; p++) {
    const int n = p == P - 1 ? int(V - begin) : V / P + (p % 2);
    parts.push_back({begin, n});
    begin += n;
  }
  return parts;
}

TEST(RefComposition, VocabParallelEmbeddingSumsToTheEmbedding) {
  const int V = 11, C = 5, N = 9;
  const std::vector<int32_t> tokens = {3, 0, 10, 3, 7, 4, 3, 10, 5};  // repeats within and across parts
  const auto wte = mt19937_normal(size_t(V) * C, 1);
  const auto dout = mt19937_normal(size_t(N) * C, 2);
  std::vector<float> want(size_t(N) * C), dwant(size_t(V) * C, 0.5f);
  ref::embedding_forward(want.data(), tokens.data(), wte.data(), N, C);
  ref::embedding_backward(dwant.data(), dout.data(), tokens.data(), N, C);
  for (int P : {1, 2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << P << " ranks");
    std::vector<float> sum(size_t(N) * C, 0.0f), part(size_t(N) * C);
    for (const auto& [begin, n] : vocab_parts(V, P)) {
      ref::vocab_parallel_embedding_forward(part.data(), tokens.data(), wte.data() + begin * C, begin, n, N, C);
      for (size_t i = 0; i < sum.size(); i++) sum[i] += part[i];
      std::vector<float> dwte(size_t(n) * C, 0.5f);
      ref::vocab_parallel_embedding_backward(dwte.data(), dout.data(), tokens.data(), begin, n, N, C);
      EXPECT_EQ(dwte, std::vector<float>(dwant.begin() + begin * C, dwant.begin() + (begin + n) * C))
          << "rows from " << begin;
    }
    EXPECT_EQ(sum, want);  // one non-zero term per element: exact
  }
}

TEST(RefComposition, VocabParallelCrossEntropyIsCrossEntropyOverTheWholeVocabulary) {
  const int V = 13, N = 7;
  const auto logits = mt19937_normal(size_t(N) * V, 3, 3.0f);
  const std::vector<int32_t> targets = {0, 12, -100, 5, 6, 12, 1};
  const float dloss = 0.25f;
  std::vector<float> want(N), dwant(size_t(N) * V);
  ref::cross_entropy_forward(want.data(), logits.data(), targets.data(), N, V);
  ref::cross_entropy_backward(dwant.data(), logits.data(), targets.data(), dloss, N, V);
  for (int P : {1, 2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << P << " ranks");
    const auto parts = vocab_parts(V, P);
    // Each rank's slice of the logits; the steps, with the sums and gathers done here.
    std::vector<std::vector<float>> local(static_cast<size_t>(P));
    std::vector<float> maxima(size_t(P) * N), partials(2 * size_t(N), 0.0f), global_max(N);
    for (int p = 0; p < P; p++) {
      const auto [begin, n] = parts[size_t(p)];
      for (int r = 0; r < N; r++)
        local[size_t(p)].insert(local[size_t(p)].end(), logits.begin() + r * V + begin,
                                logits.begin() + r * V + begin + n);
      ref::vocab_parallel_ce_max(maxima.data() + size_t(p) * N, local[size_t(p)].data(), N, n);
    }
    for (int p = 0; p < P; p++) {
      std::vector<float> mine(2 * size_t(N));
      ref::vocab_parallel_ce_partials(mine.data(), global_max.data(), local[size_t(p)].data(), maxima.data(), P,
                                      targets.data(), parts[size_t(p)].first, N, parts[size_t(p)].second);
      for (size_t i = 0; i < mine.size(); i++) partials[i] += mine[i];
    }
    std::vector<float> losses(N, -1.0f);
    ref::vocab_parallel_ce_forward(losses.data(), global_max.data(), partials.data(), targets.data(), N);
    EXPECT_TRUE(all_close("losses", losses, want, 1e-6, 1e-6));
    for (bool bf16_values : {false, true}) {
      std::vector<float> dlogits(size_t(N) * V);
      for (int p = 0; p < P; p++) {
        const auto [begin, n] = parts[size_t(p)];
        std::vector<float> d = local[size_t(p)];
        ref::vocab_parallel_ce_backward(d.data(), partials.data(), targets.data(), begin, dloss, N, n, bf16_values);
        for (int r = 0; r < N; r++)
          for (int v = 0; v < n; v++) dlogits[size_t(r) * V + begin + v] = d[size_t(r) * n + v];
      }
      if (!bf16_values) {
        EXPECT_TRUE(all_close("dlogits", dlogits, dwant, 1e-7, 1e-5));
      } else {
        for (float d : dlogits) EXPECT_EQ(d, to_float(to_bf16(d))) << "a dlogit that is no bf16 value";
        EXPECT_TRUE(all_close("dlogits (bf16 values)", dlogits, dwant, 1e-7, 1.0 / 128));
      }
    }
  }
}

TEST(RefComposition, AttentionDecodeIsARowOfCausalAttention) {
  const int T = 9, H = 4, Hkv = 2, D = 6, QKV = (H + 2 * Hkv) * D, KV = 2 * Hkv * D;
  const auto qkv = mt19937_normal(size_t(T) * QKV, 4);
  std::vector<float> out(size_t(T) * H * D), lse(size_t(H) * T);
  ref::attention_forward(out.data(), lse.data(), qkv.data(), 1, T, H, Hkv, D);
  std::vector<float> cache(size_t(T) * KV);  // each row: the k and v heads of one position
  for (int t = 0; t < T; t++)
    std::copy(qkv.begin() + t * QKV + H * D, qkv.begin() + (t + 1) * QKV, cache.begin() + t * KV);
  for (int pos = 0; pos < T; pos++) {
    std::vector<float> o(size_t(H) * D), scores(size_t(H) * (pos + 1));
    ref::attention_decode(o.data(), scores.data(), qkv.data() + pos * QKV, cache.data(), pos, H, Hkv, D);
    EXPECT_TRUE(all_close("decode at position " + std::to_string(pos), o,
                          std::vector<float>(out.begin() + pos * H * D, out.begin() + (pos + 1) * H * D), 1e-6, 1e-5));
  }
}

TEST(RefComposition, LmHeadCrossEntropyIsMatmulThenCrossEntropy) {
  const int N = 6, C = 7, V = 10;
  const auto x = mt19937_normal(size_t(N) * C, 5);
  const auto wout = mt19937_normal(size_t(V) * C, 6, 0.5f);
  const std::vector<int32_t> targets = {1, -100, 9, 0, 4, 4};
  const float dloss = 0.2f;
  std::vector<float> logits(size_t(N) * V), want(N), dlogits(size_t(N) * V), dx_want(size_t(N) * C);
  std::vector<float> dw_want = mt19937_normal(size_t(V) * C, 7);  // accumulated into
  const std::vector<float> dw0 = dw_want;
  ref::matmul_forward(logits.data(), x.data(), wout.data(), N, C, V);
  ref::cross_entropy_forward(want.data(), logits.data(), targets.data(), N, V);
  ref::cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dloss, N, V);
  ref::matmul_backward(dx_want.data(), dw_want.data(), dlogits.data(), x.data(), wout.data(), N, C, V);

  std::vector<float> losses(N, -1.0f);
  ref::lmhead_ce_forward(losses.data(), x.data(), wout.data(), targets.data(), N, C, V);
  EXPECT_TRUE(all_close("forward losses", losses, want, 1e-6, 1e-5));
  std::vector<float> losses_b(N, -1.0f), dx(size_t(N) * C, -7.0f), dw = dw0;
  ref::lmhead_ce_backward(losses_b.data(), dx.data(), dw.data(), x.data(), wout.data(), targets.data(), dloss, N, C, V);
  EXPECT_EQ(losses_b, losses) << "the backward's losses are the forward's";
  EXPECT_TRUE(all_close("dx", dx, dx_want, 1e-6, 1e-5));
  EXPECT_TRUE(all_close("dwout", dw, dw_want, 1e-6, 1e-5));
}

TEST(RefComposition, FillNormalDrawsByPlaceInTheFullTensor) {
  const int64_t n = 200000;
  std::vector<float> whole(n), pieces(n);
  ref::fill_normal(whole.data(), n, 0.02f, 77, 3, 1000);
  for (int64_t b = 0; b < n; b += 30011) {  // the same elements drawn in pieces
    const int64_t e = std::min(n, b + 30011);
    ref::fill_normal(pieces.data() + b, e - b, 0.02f, 77, 3, 1000 + uint64_t(b));
  }
  EXPECT_EQ(pieces, whole);
  double sum = 0, sq = 0;
  for (float v : whole) sum += v, sq += double(v) * v;
  EXPECT_NEAR(sum / n, 0.0, 0.02 * 0.01);  // 4.5 standard errors of the mean
  EXPECT_NEAR(std::sqrt(sq / n), 0.02, 0.02 * 0.01);
  std::vector<float> other(n);
  ref::fill_normal(other.data(), n, 0.02f, 77, 4, 1000);  // another stream: other values
  EXPECT_NE(other, whole);
  ref::fill_constant(other.data(), n, 1.0f);
  EXPECT_EQ(other, std::vector<float>(n, 1.0f));
}

}  // namespace
}  // namespace llamatrain
