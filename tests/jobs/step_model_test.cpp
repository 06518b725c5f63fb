// jobs/step_model: what a step's work costs on a machine's rates; the FLOPs it reports are
// obs/throughput's, of the text only where samples are padded or packed.
#include <gtest/gtest.h>

#include "jobs/step_model.h"
#include "model/config.h"
#include "obs/throughput.h"

namespace llamatrain::train {
namespace {

// The step model of samples that are partly padding or packed documents: the matmuls run over every
// input, attention over the pairs the kernel computes, and FLOPs and tokens/s count the text only.
TEST(StepModel, CountsTheTextAndTheAttentionOfItsDocuments) {
  model::LlamaConfig c;
  c.dim = 256, c.ffn_dim = 688, c.n_layers = 4, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 1000;
  StepWork w;
  w.model = c;
  w.B = 2, w.T = 512, w.micro_batches = 3;
  w.params_per_rank = c.num_params();
  MachineRates m;
  m.matmul_seconds = [](int64_t M, int64_t N, int64_t K) { return 2.0 * double(M) * double(N) * double(K) / 1e12; };
  m.attention_flops_per_s = 1e11, m.memory_bytes_per_s = 1e11, m.kernel_call_s = 1e-6;
  const StepPrediction full = predict_step(w, m);
  EXPECT_DOUBLE_EQ(full.flops, obs::step_flops(c, 2 * 3, 512));
  EXPECT_DOUBLE_EQ(full.tokens_per_s, full.seq_per_s * 512);
  w.text_fraction = 0.75, w.attention_fraction = 0.125, w.text_attention_fraction = 0.1;
  const StepPrediction packed = predict_step(w, m);
  EXPECT_DOUBLE_EQ(packed.matmul_s, full.matmul_s) << "padding is computed";
  EXPECT_NEAR(packed.attention_s, 0.125 * full.attention_s, 1e-12 * full.attention_s);
  EXPECT_DOUBLE_EQ(packed.flops, obs::step_flops_of(c, 6.0 * 512 * 0.75, 6.0 * 512 * 512 / 2 * 0.1));
  EXPECT_DOUBLE_EQ(packed.tokens_per_s, packed.seq_per_s * 512 * 0.75);
  EXPECT_EQ(packed.text_fraction, 0.75);
  EXPECT_LT(packed.step_s, full.step_s);
}

}  // namespace
}  // namespace llamatrain::train
