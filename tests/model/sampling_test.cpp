// model::sample_token: the argmax at temperature 0; otherwise each token is drawn for exactly the
// share of u in [0, 1) its renormalized probability covers, most likely first, over the smallest set
// of tokens whose mass reaches top_p; temperature sharpens or flattens the distribution.
// model::generate_tokens: the loop over the KV cache stops at a stop id (returned, not passed on),
// never samples ids past `pieces`, and is reproducible from its seed.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/config.h"
#include "model/llama.h"
#include "model/sampling.h"

namespace llamatrain {
namespace {

// Logits whose softmax is p (at temperature 1).
std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> out;
  for (double x : p) out.push_back(float(std::log(x)));
  return out;
}

TEST(Sampling, TemperatureZeroIsTheArgmax) {
  EXPECT_EQ(model::sample_token({0.1f, 2.0f, -1.0f, 1.9f}, 0.0f, 0.9f, 0.99f), 1);
}

TEST(Sampling, EachTokenTakesItsShareOfU) {
  const auto l = logits_of({0.2, 0.5, 0.3});  // sorted: 1 (0.5), 2 (0.3), 0 (0.2)
  EXPECT_EQ(model::sample_token(l, 1.0f, 1.0f, 0.0f), 1);
  EXPECT_EQ(model::sample_token(l, 1.0f, 1.0f, 0.49f), 1);
  EXPECT_EQ(model::sample_token(l, 1.0f, 1.0f, 0.51f), 2);
  EXPECT_EQ(model::sample_token(l, 1.0f, 1.0f, 0.79f), 2);
  EXPECT_EQ(model::sample_token(l, 1.0f, 1.0f, 0.81f), 0);
  EXPECT_EQ(model::sample_token(l, 1.0f, 1.0f, 0.999f), 0);
}

TEST(Sampling, TopPKeepsTheSmallestSetThatReachesIt) {
  const auto l = logits_of({0.2, 0.5, 0.3});
  // top_p 0.7: tokens 1 and 2 (0.8), renormalized: 1 for u < 0.625, then 2; token 0 never.
  EXPECT_EQ(model::sample_token(l, 1.0f, 0.7f, 0.6f), 1);
  EXPECT_EQ(model::sample_token(l, 1.0f, 0.7f, 0.65f), 2);
  EXPECT_EQ(model::sample_token(l, 1.0f, 0.7f, 0.999f), 2);
  // top_p at or below the largest probability: the argmax alone.
  for (float u : {0.0f, 0.5f, 0.999f}) EXPECT_EQ(model::sample_token(l, 1.0f, 0.4f, u), 1);
}

TEST(Sampling, TemperatureReshapesTheDistribution) {
  // At temperature 0.5 the probabilities go as p^2: 0.04, 0.25, 0.09 over 0.38, so token 1 takes
  // u < 0.658 (at temperature 1 it took u < 0.5).
  const auto l = logits_of({0.2, 0.5, 0.3});
  EXPECT_EQ(model::sample_token(l, 0.5f, 1.0f, 0.6f), 1);
  EXPECT_EQ(model::sample_token(l, 1.0f, 1.0f, 0.6f), 2);
  EXPECT_EQ(model::sample_token(l, 0.5f, 1.0f, 0.7f), 2);
}

// The ids generate_tokens returns after prompt, and those it passed to on_token.
struct Generated {
  std::vector<int> ids, passed;
};
Generated generate(model::LlamaModel& m, const model::GenerationOptions& o) {
  Generated g;
  g.ids = model::generate_tokens(m, {1, 5, 9}, o, [&](int id) { g.passed.push_back(id); });
  return g;
}

TEST(Generation, StopsAtAStopIdAndMasksPaddedIds) {
  model::LlamaModel m(model::preset_config("tiny"), model::Precision::fp32);
  m.init_random(0.5f);
  const int V = m.config().vocab_size;
  model::GenerationOptions o;
  o.max_new_tokens = 6;
  o.temperature = 1.0f;
  o.top_p = 1.0f;
  o.seed = 3;
  const Generated all = generate(m, o);
  ASSERT_EQ(all.ids.size(), 6u);
  EXPECT_EQ(all.passed, all.ids);
  EXPECT_EQ(generate(m, o).ids, all.ids);  // the seed reproduces the sample

  o.stop = {all.ids[2]};  // the first time that id comes, it ends the generation
  size_t first = 0;
  while (all.ids[first] != all.ids[2]) first++;
  const Generated stopped = generate(m, o);
  EXPECT_EQ(stopped.ids, std::vector<int>(all.ids.begin(), all.ids.begin() + long(first) + 1));
  EXPECT_EQ(stopped.passed, std::vector<int>(all.ids.begin(), all.ids.begin() + long(first)));

  o.stop.clear();
  o.pieces = V / 4;  // ids from V / 4 on are a padded vocabulary's: never sampled
  o.max_new_tokens = 32;
  for (int id : generate(m, o).ids) EXPECT_LT(id, V / 4);
}

}  // namespace
}  // namespace llamatrain
