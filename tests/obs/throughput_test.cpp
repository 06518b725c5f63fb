// obs/throughput: step FLOPs against the PaLM paper's accounting (6 FLOPs per matmul weight per
// token, plus 6 * L * H * D * T per token for causal attention, half of PaLM's 12 for full attention),
// built from LlamaConfig::num_params() minus the weights that do no matmul (norms, and the input
// embedding when the lm head is separate); MFU, tokens/s and the windowed step-time average.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "model/config.h"
#include "obs/throughput.h"

namespace llamatrain::obs {
namespace {

// FLOPs per step from the parameter count, independent of step_flops' per-matrix sum.
double palm_flops(const model::LlamaConfig& c, int64_t B, int64_t T) {
  const double norms = double(c.n_layers) * 2 * c.dim + c.dim;
  const double embedding = c.tie_embeddings ? 0.0 : double(c.vocab_size) * c.dim;  // a lookup, not a matmul
  const double matmul_weights = double(c.num_params()) - norms - embedding;
  const double tokens = double(B) * double(T);
  return tokens * (6.0 * matmul_weights + 6.0 * c.n_layers * c.n_heads * c.head_dim() * double(T));
}

TEST(Throughput, StepFlopsMatchesParameterCountAccounting) {
  // tied MHA, untied GQA, the 7B; odd batch and sequence sizes
  for (const char* name : {"stories15m", "tinyllama-1.1b", "llama2-7b", "tiny"}) {
    const model::LlamaConfig c = model::preset_config(name);
    for (const auto& [B, T] : {std::pair<int64_t, int64_t>{1, 1}, {3, 17}, {8, 256}, {2, 4096}}) {
      const double got = step_flops(c, B, T), want = palm_flops(c, B, T);
      EXPECT_NEAR(got / want, 1.0, 1e-12) << name << " B=" << B << " T=" << T << ": " << got << " vs " << want;
    }
  }
  // Llama-2-7B, one 4096-token sequence: 6.607e9 matmul weights (6.74e9 parameters less the
  // embedding and norms), about 42.9 GFLOP per token.
  EXPECT_EQ(step_flops(model::preset_config("llama2-7b"), 1, 4096), 175569673125888.0);
}

TEST(Throughput, PipelineStagesSumToTheStepAndTheBalancedSplit) {
  // The stages of a split compute the whole step between them.
  for (const char* name : {"stories15m", "stories110m", "llama2-7b"}) {
    const model::LlamaConfig c = model::preset_config(name);
    const int L = c.n_layers;
    const double parts = stage_flops(c, 2, 256, L / 3, false) + stage_flops(c, 2, 256, L / 3, false) +
                         stage_flops(c, 2, 256, L - 2 * (L / 3), true);
    EXPECT_NEAR(parts / step_flops(c, 2, 256), 1.0, 1e-12) << name;
  }
  // stories110m: the lm head (32000 x 768) weighs 3.5 layers, so two stages balance at 8 + 4 layers.
  EXPECT_EQ(balanced_pipeline_split(model::preset_config("stories110m"), 2, 256), (std::vector<int>{8, 4}));
  // stories15m: the head (32000 x 288) outweighs all 6 layers; the last stage keeps one layer only.
  EXPECT_EQ(balanced_pipeline_split(model::preset_config("stories15m"), 2, 256), (std::vector<int>{5, 1}));
  // Llama 2 7B on 4 stages: the head is 0.65 of a layer, and no first/last split beats 8 x 4.
  EXPECT_EQ(balanced_pipeline_split(model::preset_config("llama2-7b"), 4, 4096), (std::vector<int>{8, 8, 8, 8}));
  EXPECT_EQ(balanced_pipeline_split(model::preset_config("tiny"), 1, 64), (std::vector<int>{2}));
}

TEST(Throughput, MfuAndTokensPerSecond) {
  EXPECT_DOUBLE_EQ(mfu(1e12, 2.0, 1e12), 0.5);
  EXPECT_DOUBLE_EQ(mfu(3e12, 0.5, 12e12), 0.5);
  EXPECT_TRUE(std::isnan(mfu(1e12, 0.0, 1e12)));
  EXPECT_TRUE(std::isnan(mfu(1e12, 1.0, 0.0)));
  EXPECT_DOUBLE_EQ(tokens_per_s(8 * 256, 0.5), 4096.0);
  EXPECT_EQ(tokens_per_s(100, 0.0), 0.0);
}

TEST(Throughput, StepTimeAverageFollowsTheRecentWindow) {
  StepTimeAverage avg(3);
  EXPECT_TRUE(std::isnan(avg.mean_step_s()));
  EXPECT_TRUE(std::isnan(avg.eta_s(10)));
  EXPECT_EQ(avg.eta_s(0), 0.0);
  avg.add(1.0);
  avg.add(2.0);
  avg.add(3.0);
  EXPECT_DOUBLE_EQ(avg.mean_step_s(), 2.0);
  avg.add(10.0);  // 1.0 leaves the window
  EXPECT_DOUBLE_EQ(avg.mean_step_s(), 5.0);
  EXPECT_DOUBLE_EQ(avg.eta_s(4), 20.0);
  avg.add(-1.0);  // ignored
  avg.add(std::numeric_limits<double>::quiet_NaN());
  avg.add(std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(avg.mean_step_s(), 5.0);
  EXPECT_EQ(avg.count(), 4);
  for (int i = 0; i < 1000000; ++i) avg.add(0.1);  // a long run: no drift
  EXPECT_DOUBLE_EQ(avg.mean_step_s(), 0.1);
  EXPECT_DOUBLE_EQ(avg.eta_s(30), 3.0);
}

}  // namespace
}  // namespace llamatrain::obs
