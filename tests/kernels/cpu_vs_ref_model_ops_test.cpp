// The cpu:: kernels of the ops the model needs besides the layers' (vocabulary-parallel embedding and
// cross-entropy, decode attention, the init fill) against their ref:: twins on awkward sizes, with a
// tolerance per op (bitwise where the cpu kernel does the same arithmetic), and the same results for
// 1 and 3 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/bf16.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using testing::all_close;
using testing::mt19937_normal;

// Runs fn with n OpenMP threads.
template <typename F>
void with_threads(int n, F fn) {
  const int old = omp_get_max_threads();
  omp_set_num_threads(n);
  fn();
  omp_set_num_threads(old);
}

TEST(CpuVsRefModelOps, VocabParallelEmbedding) {
  for (const auto& [N, C, V, begin] : std::vector<std::tuple<int, int, int, int64_t>>{
           {1, 1, 1, 0}, {17, 40, 9, 5}, {127, 107, 31, 31}, {300, 200, 64, 16}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " V=" << V << " begin=" << begin);
    std::vector<int32_t> tokens(N);
    for (int n = 0; n < N; n++) tokens[n] = int32_t((n * 7919 + 13) % int(begin + V + 20));  // in and out of range
    const auto wte = mt19937_normal(size_t(V) * C, 11);
    const auto dout = mt19937_normal(size_t(N) * C, 12);
    std::vector<float> want(size_t(N) * C), dwant(size_t(V) * C, 0.25f);
    ref::vocab_parallel_embedding_forward(want.data(), tokens.data(), wte.data(), begin, V, N, C);
    ref::vocab_parallel_embedding_backward(dwant.data(), dout.data(), tokens.data(), begin, V, N, C);
    for (int threads : {1, 3})
      with_threads(threads, [&] {
        std::vector<float> got(size_t(N) * C, -1.0f), dgot(size_t(V) * C, 0.25f);
        cpu::vocab_parallel_embedding_forward(got.data(), tokens.data(), wte.data(), begin, V, N, C);
        cpu::vocab_parallel_embedding_backward(dgot.data(), dout.data(), tokens.data(), begin, V, N, C);
        EXPECT_EQ(got, want) << threads << " threads";
        EXPECT_EQ(dgot, dwant) << threads << " threads: the sums run in token order";
      });
  }
}

TEST(CpuVsRefModelOps, VocabParallelCrossEntropy) {
  for (const auto& [N, V, P] : std::vector<std::tuple<int, int, int>>{{1, 3, 1}, {17, 40, 2}, {127, 211, 3}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " V=" << V << " P=" << P);
    const int64_t begin = V;  // this rank is the second of the vocabulary's parts
    const auto logits = mt19937_normal(size_t(N) * V, 21, 4.0f);
    auto maxima = mt19937_normal(size_t(P) * N, 22, 4.0f);  // the other ranks' maxima
    std::vector<int32_t> targets(N);
    for (int n = 0; n < N; n++) targets[n] = n % 5 == 0 ? -100 : int32_t((n * 31) % (3 * V));
    std::vector<float> ref_max(N), cpu_max(N);
    ref::vocab_parallel_ce_max(ref_max.data(), logits.data(), N, V);
    cpu::vocab_parallel_ce_max(cpu_max.data(), logits.data(), N, V);
    EXPECT_EQ(cpu_max, ref_max);
    std::copy(ref_max.begin(), ref_max.end(), maxima.begin() + (P > 1 ? N : 0));  // this rank's row
    std::vector<float> ref_e = logits, cpu_e = logits, ref_p(2 * size_t(N)), cpu_p(2 * size_t(N)), ref_g(N), cpu_g(N);
    ref::vocab_parallel_ce_partials(ref_p.data(), ref_g.data(), ref_e.data(), maxima.data(), P, targets.data(), begin,
                                    N, V);
    cpu::vocab_parallel_ce_partials(cpu_p.data(), cpu_g.data(), cpu_e.data(), maxima.data(), P, targets.data(), begin,
                                    N, V);
    EXPECT_EQ(cpu_g, ref_g);
    EXPECT_TRUE(all_close("exp(logit - max)", cpu_e, ref_e, 1e-7, 2e-6));  // cpu: fast_exp
    EXPECT_TRUE(all_close("partials", cpu_p, ref_p, 1e-6, 1e-5));
    std::vector<float> ref_l(N), cpu_l(N);
    ref::vocab_parallel_ce_forward(ref_l.data(), ref_g.data(), ref_p.data(), targets.data(), N);
    cpu::vocab_parallel_ce_forward(cpu_l.data(), ref_g.data(), ref_p.data(), targets.data(), N);
    EXPECT_TRUE(all_close("losses", cpu_l, ref_l, 1e-6, 1e-6));
    for (bool bf16_values : {false, true}) {
      std::vector<float> rd = ref_e, cd = ref_e;
      ref::vocab_parallel_ce_backward(rd.data(), ref_p.data(), targets.data(), begin, 0.125f, N, V, bf16_values);
      cpu::vocab_parallel_ce_backward(cd.data(), ref_p.data(), targets.data(), begin, 0.125f, N, V, bf16_values);
      if (bf16_values)  // a rounding boundary may fall between the two: one bf16 step at most
        EXPECT_TRUE(all_close("dlogits (bf16 values)", cd, rd, 1e-9, 1.0 / 128));
      else
        EXPECT_TRUE(all_close("dlogits", cd, rd, 1e-9, 1e-6));
    }
  }
}

TEST(CpuVsRefModelOps, VocabParallelCrossEntropyOfARankWithPaddingRowsOnly) {
  // A tensor-parallel rank whose vocabulary block is all padding (model/shard.h) gets V = 0 real
  // rows: its maxima are -inf, its sums of exponentials and target logits 0, so the combined softmax
  // is the other ranks'.
  const int N = 5, P = 2;
  const std::vector<float> maxima = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 1, 2, 3, 4, 5};
  const std::vector<int32_t> targets = {0, 3, -100, 7, 1};
  std::vector<float> ref_max(N, 0.0f), cpu_max(N, 0.0f), ref_p(2 * N, -1.0f), cpu_p(2 * N, -1.0f), ref_g(N), cpu_g(N);
  float none = 0.0f;  // (N, 0) logits
  ref::vocab_parallel_ce_max(ref_max.data(), &none, N, 0);
  cpu::vocab_parallel_ce_max(cpu_max.data(), &none, N, 0);
  EXPECT_EQ(ref_max, std::vector<float>(N, -INFINITY));
  EXPECT_EQ(cpu_max, ref_max);
  ref::vocab_parallel_ce_partials(ref_p.data(), ref_g.data(), &none, maxima.data(), P, targets.data(), 8, N, 0);
  cpu::vocab_parallel_ce_partials(cpu_p.data(), cpu_g.data(), &none, maxima.data(), P, targets.data(), 8, N, 0);
  EXPECT_EQ(ref_p, std::vector<float>(2 * N, 0.0f));
  EXPECT_EQ(cpu_p, ref_p);
  EXPECT_EQ(ref_g, std::vector<float>(maxima.begin() + N, maxima.end()));
  EXPECT_EQ(cpu_g, ref_g);
  ref::vocab_parallel_ce_backward(&none, ref_p.data(), targets.data(), 8, 0.5f, N, 0, false);
  cpu::vocab_parallel_ce_backward(&none, cpu_p.data(), targets.data(), 8, 0.5f, N, 0, false);
  EXPECT_EQ(none, 0.0f);
}

TEST(CpuVsRefModelOps, AttentionDecode) {
  for (const auto& [pos, H, Hkv, D] :
       std::vector<std::tuple<int, int, int, int>>{{0, 1, 1, 2}, {16, 4, 2, 8}, {126, 6, 3, 64}, {300, 8, 8, 16}}) {
    SCOPED_TRACE(::testing::Message() << "pos=" << pos << " H=" << H << " Hkv=" << Hkv << " D=" << D);
    const auto q = mt19937_normal(size_t(H) * D, 31);
    const auto cache = mt19937_normal(size_t(pos + 1) * 2 * Hkv * D, 32);
    std::vector<float> want(size_t(H) * D), scores(size_t(H) * (pos + 1));
    ref::attention_decode(want.data(), scores.data(), q.data(), cache.data(), pos, H, Hkv, D);
    std::vector<float> first;
    for (int threads : {1, 3})
      with_threads(threads, [&] {
        std::vector<float> got(size_t(H) * D, -1.0f);
        cpu::attention_decode(got.data(), scores.data(), q.data(), cache.data(), pos, H, Hkv, D);
        EXPECT_TRUE(all_close("decode attention", got, want, 1e-6, 1e-5));
        if (first.empty()) first = got;
        EXPECT_EQ(got, first) << threads << " threads";
      });
  }
}

TEST(CpuVsRefModelOps, InitFillIsBitwiseTheReference) {
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(1 << 17) + 3}) {
    std::vector<float> want(n), got(n, -1.0f);
    ref::fill_normal(want.data(), n, 0.5f, 9, 2, 12345);
    for (int threads : {1, 3})
      with_threads(threads, [&] {
        cpu::fill_normal(got.data(), n, 0.5f, 9, 2, 12345);
        EXPECT_EQ(got, want) << n << " elements, " << threads << " threads";
        cpu::fill_constant(got.data(), n, 1.0f);
        EXPECT_EQ(got, std::vector<float>(n, 1.0f));
      });
  }
}

}  // namespace
}  // namespace llamatrain
