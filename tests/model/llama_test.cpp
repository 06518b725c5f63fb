// Model-level properties that need no golden file: KV-cache decoding equals the full forward,
// HF export/import round trips bitwise, initial loss is ~ln(V), fully ignored targets give zero loss
// and zero gradients, bad token ids are Errors, and gradient accumulation over micro-batches equals
// one big batch.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "kernels/cpu/matmul_choice.h"
#include "model/llama.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using testing::philox_tokens;

model::LlamaConfig small_config() {
  return {.dim = 48,
          .ffn_dim = 100,
          .n_layers = 2,
          .n_heads = 6,
          .n_kv_heads = 2,
          .vocab_size = 97,
          .max_seq_len = 64,
          .norm_eps = 1e-5f};
}

// Token ids in [0, V) from the Philox streams of this seed, one per stream id.
constexpr uint64_t kTokenSeed = 99;

// Forces the process-wide matmul kernel choice (and so the bf16 modes' operand form) while alive.
class ForcePolicy {
 public:
  explicit ForcePolicy(cpu::MatmulPolicy p) : old_(cpu::matmul_chooser().policy()) {
    cpu::matmul_chooser().set_policy(p);
  }
  ~ForcePolicy() { cpu::matmul_chooser().set_policy(old_); }

 private:
  cpu::MatmulPolicy old_;
};

TEST(Llama, StateBytesFromTheConfigEqualTheModels) {
  // bench and the memory check size a job before building it; the figure must be the model's own.
  // Gradients and Adam state exist only once training starts.
  for (const char* name : {"tiny", "stories15m"})
    for (auto p : {model::Precision::fp32, model::Precision::bf16_mixed, model::Precision::bf16_sr}) {
      const model::LlamaConfig cfg = model::preset_config(name);
      model::LlamaModel m(cfg, p);
      // inference holds the weights only: fp32 copy (+ bf16 copy in the bf16 modes)
      EXPECT_EQ(m.state_bytes(), cfg.num_params() * (p == model::Precision::fp32 ? 4 : 6))
          << name << " " << model::precision_name(p);
      EXPECT_EQ(model::LlamaModel::weight_bytes(cfg, p), m.state_bytes()) << name;
      m.zero_grad();  // first use of the training state allocates it
      EXPECT_EQ(model::LlamaModel::state_bytes(cfg, p), m.state_bytes()) << name << " " << model::precision_name(p);
    }
}

TEST(Llama, FloatOperandsAreSizedByTheConfigToo) {
  // Where the fp32 kernel runs the bf16 matmuls, the bf16 modes keep their operands as bf16 values in
  // floats: bf16-mixed's weight copy and the matmul-only activations take 4 bytes, not 2.
  const ForcePolicy force(cpu::MatmulPolicy::f32);
  const model::LlamaConfig cfg = model::preset_config("tiny");
  const int B = 2, T = 16;
  for (auto p : {model::Precision::bf16_mixed, model::Precision::bf16_sr}) {
    ASSERT_TRUE(model::LlamaModel::float_operands_at(cfg, model::ShardPlan::single(cfg), p, B * T));
    model::LlamaModel m(cfg, p);
    m.ensure_activations(B, T);
    EXPECT_TRUE(m.float_operands()) << model::precision_name(p);
    m.zero_grad();
    EXPECT_EQ(model::LlamaModel::state_bytes(cfg, p, 1, true), m.state_bytes()) << model::precision_name(p);
    const int64_t floats = model::LlamaModel::activation_bytes(cfg, p, B, T, model::Recompute::none, -1, true);
    const int64_t halves = model::LlamaModel::activation_bytes(cfg, p, B, T, model::Recompute::none, -1, false);
    EXPECT_GT(floats, halves) << model::precision_name(p);
  }
  EXPECT_EQ(model::LlamaModel::state_bytes(cfg, model::Precision::bf16_mixed, 1, true),
            model::LlamaModel::state_bytes(cfg, model::Precision::bf16_mixed) + 2 * cfg.num_params());
  EXPECT_EQ(model::LlamaModel::state_bytes(cfg, model::Precision::bf16_sr, 1, true),
            model::LlamaModel::state_bytes(cfg, model::Precision::bf16_sr));  // its compute copy is that form
}

// Losses of `steps` training steps (lr 1e-2) of a bf16 model under a forced kernel policy.
std::vector<float> bf16_training_losses(model::Precision p, cpu::MatmulPolicy policy, int steps, bool* floats) {
  const ForcePolicy force(policy);
  const auto c = small_config();
  const int B = 2, T = 37;
  const auto tokens = philox_tokens(B * T, c.vocab_size, kTokenSeed, 21);
  const auto targets = philox_tokens(B * T, c.vocab_size, kTokenSeed, 22);
  model::LlamaModel m(c, p, 5);
  m.init_random(0.2f);
  model::AdamWConfig opt;
  std::vector<float> losses;
  for (int step = 1; step <= steps; step++) {
    m.zero_grad();
    losses.push_back(m.forward_backward(tokens.data(), targets.data(), B, T).loss);
    m.optimizer_step(opt, 1e-2f, step);
  }
  *floats = m.float_operands();
  return losses;
}

TEST(Llama, Bf16OperandFormsTrainAlike) {
  // bf16 operands on the bf16 kernel against bf16 values in floats on the fp32 kernel: the same
  // products summed in another order, which can flip the rounding of a bf16 activation here and
  // there, so the losses agree to ~1e-3 step after step (measured: at most 1.2e-3 relative). A
  // weight copy the optimizer left stale would show from the second step: each step moves the loss
  // by more than 0.3 here.
  constexpr double kTol = 5e-3;
  if (!cpu::matmul_chooser().bf16_available()) GTEST_SKIP() << "oneDNN has no bf16 matmul kernel on this CPU";
  for (auto p : {model::Precision::bf16_mixed, model::Precision::bf16_sr}) {
    bool floats16 = true, floats32 = false;
    const auto l16 = bf16_training_losses(p, cpu::MatmulPolicy::bf16, 4, &floats16);
    const auto l32 = bf16_training_losses(p, cpu::MatmulPolicy::f32, 4, &floats32);
    EXPECT_FALSE(floats16);
    EXPECT_TRUE(floats32);
    for (size_t i = 0; i < l16.size(); i++) {
      EXPECT_NEAR(l32[i], l16[i], kTol * std::abs(l16[i])) << model::precision_name(p) << " step " << i + 1;
      if (i > 0) {  // the check bites only if a step moves the loss far more than the tolerance
        EXPECT_GT(std::abs(l16[i] - l16[i - 1]), 20 * kTol * std::abs(l16[i])) << "step " << i + 1;
      }
    }
  }
}

TEST(Llama, SwitchingTheOperandFormKeepsTheWeights) {
  // The form is chosen per activation size; when it changes, the weight copy is rebuilt from the
  // master weights: a trained model then computes bitwise what a fresh model with its weights does.
  const auto c = small_config();
  const int T = 21;
  const auto tokens = philox_tokens(3 * T, c.vocab_size, kTokenSeed, 31);
  const auto targets = philox_tokens(3 * T, c.vocab_size, kTokenSeed, 32);
  if (!cpu::matmul_chooser().bf16_available()) GTEST_SKIP() << "oneDNN has no bf16 matmul kernel on this CPU";
  for (auto p : {model::Precision::bf16_mixed, model::Precision::bf16_sr})
    for (auto [first, second] : {std::pair{cpu::MatmulPolicy::f32, cpu::MatmulPolicy::bf16},
                                 std::pair{cpu::MatmulPolicy::bf16, cpu::MatmulPolicy::f32}}) {
      SCOPED_TRACE(::testing::Message() << model::precision_name(p) << " " << cpu::matmul_policy_name(first) << " then "
                                        << cpu::matmul_policy_name(second));
      model::LlamaModel m(c, p, 9);
      m.init_random(0.2f);
      model::AdamWConfig opt;
      {
        const ForcePolicy force(first);
        for (int step = 1; step <= 2; step++) {
          m.zero_grad();
          m.forward_backward(tokens.data(), targets.data(), 2, T);
          m.optimizer_step(opt, 1e-2f, step);
        }
        EXPECT_EQ(m.float_operands(), first == cpu::MatmulPolicy::f32);
      }
      const ForcePolicy force(second);
      const float loss = m.forward(tokens.data(), targets.data(), 3, T).loss;  // new size: the form is chosen again
      EXPECT_EQ(m.float_operands(), second == cpu::MatmulPolicy::f32);
      model::LlamaModel fresh(c, p, 9);
      std::copy(m.param_data(), m.param_data() + m.num_params(), fresh.param_data());
      fresh.params_changed();
      EXPECT_EQ(fresh.forward(tokens.data(), targets.data(), 3, T).loss, loss);
    }
}

TEST(Llama, WithoutABf16KernelTheOperandsAreFloats) {
  // A CPU where oneDNN has no bf16 matmul (AVX2 only): the bf16 modes hold their operands as bf16
  // values in floats at every size (the tiny ones too, which are never probed) and compute what the
  // same model does on the fp32 kernel with the bf16 kernel present.
  const auto c = small_config();
  const int T = 9;
  const auto tokens = philox_tokens(2 * T, c.vocab_size, kTokenSeed, 41);
  const auto targets = philox_tokens(2 * T, c.vocab_size, kTokenSeed, 42);
  cpu::MatmulChooser& chooser = cpu::matmul_chooser();
  const bool had = chooser.bf16_available();
  for (auto p : {model::Precision::bf16_mixed, model::Precision::bf16_sr}) {
    float loss[2];
    for (int i = 0; i < 2; i++) {
      chooser.set_bf16_available(i == 1 && had);
      const ForcePolicy force(i == 0 ? cpu::MatmulPolicy::automatic : cpu::MatmulPolicy::f32);
      model::LlamaModel m(c, p, 4);
      m.init_random(0.2f);
      loss[i] = m.forward(tokens.data(), targets.data(), 2, T).loss;
      EXPECT_TRUE(m.float_operands()) << model::precision_name(p);
    }
    EXPECT_EQ(loss[0], loss[1]) << model::precision_name(p);
  }
  chooser.set_bf16_available(had);
}

TEST(Llama, DecodeWithKvCacheEqualsFullForward) {
  const auto c = small_config();
  model::LlamaModel m(c, model::Precision::fp32, 3);
  m.init_random(0.2f);
  const int T = 13;
  const auto tokens = philox_tokens(T, c.vocab_size, kTokenSeed, 1);
  m.forward(tokens.data(), nullptr, 1, T);
  std::vector<float> full(size_t(T) * c.vocab_size);
  m.logits(full.data());
  m.reset_cache(T);
  std::vector<float> step(c.vocab_size);
  for (int t = 0; t < T; t++) {
    m.decode_step(step.data(), tokens[t], t);
    for (int v = 0; v < c.vocab_size; v++)
      ASSERT_NEAR(step[v], full[size_t(t) * c.vocab_size + v], 1e-4) << "position " << t << " vocab " << v;
  }
}

TEST(Llama, HfExportImportRoundTripIsBitwise) {
  const auto c = small_config();
  model::LlamaModel a(c, model::Precision::fp32, 5);
  a.init_random(0.05f);
  const auto dir = std::filesystem::temp_directory_path() / "llamatrain_roundtrip_test";
  std::filesystem::remove_all(dir);
  io::save_hf_checkpoint(a, dir.string(), "float32");
  auto b = io::load_hf_model(dir.string(), model::Precision::fp32);
  ASSERT_EQ(a.num_params(), b->num_params());
  EXPECT_EQ(0, std::memcmp(a.param_data(), b->param_data(), sizeof(float) * a.num_params()));
  // bf16 export: every value comes back as its round-to-nearest bf16.
  io::save_hf_checkpoint(a, dir.string(), "bfloat16");
  auto h = io::load_hf_model(dir.string(), model::Precision::fp32);
  for (int64_t i = 0; i < a.num_params(); i++)
    ASSERT_EQ(h->param_data()[i], to_float(to_bf16(a.param_data()[i]))) << "element " << i;
  std::filesystem::remove_all(dir);
}

TEST(Llama, InitialLossIsNearLogVocab) {
  const auto c = small_config();
  model::LlamaModel m(c, model::Precision::fp32);
  m.init_random(0.02f);
  const int B = 2, T = 16;
  const auto tokens = philox_tokens(B * T, c.vocab_size, kTokenSeed, 2);
  const auto targets = philox_tokens(B * T, c.vocab_size, kTokenSeed, 3);
  const auto s = m.forward(tokens.data(), targets.data(), B, T);
  EXPECT_NEAR(s.loss, std::log(float(c.vocab_size)), 0.05);
  EXPECT_EQ(s.num_valid, B * T);
}

TEST(Llama, AllTargetsIgnoredGivesZeroLossAndGrads) {
  const auto c = small_config();
  model::LlamaModel m(c, model::Precision::fp32);
  m.init_random();
  const int B = 1, T = 8;
  const auto tokens = philox_tokens(B * T, c.vocab_size, kTokenSeed, 4);
  std::vector<int32_t> targets(B * T, -100);
  m.zero_grad();
  const auto s = m.forward_backward(tokens.data(), targets.data(), B, T);
  EXPECT_EQ(s.loss, 0.0f);
  EXPECT_EQ(s.num_valid, 0);
  for (int64_t i = 0; i < m.num_params(); i++) ASSERT_EQ(m.grad_data()[i], 0.0f) << i;
}

TEST(Llama, BadTokenIdIsAnError) {
  const auto c = small_config();
  model::LlamaModel m(c, model::Precision::fp32);
  std::vector<int32_t> tokens = {1, 2, c.vocab_size};
  EXPECT_THROW(m.forward(tokens.data(), nullptr, 1, 3), Error);
  tokens[2] = 5;
  std::vector<int32_t> targets = {1, 2, c.vocab_size + 3};
  EXPECT_THROW(m.forward(tokens.data(), targets.data(), 1, 3), Error);
}

TEST(Llama, SequenceLongerThanContextIsAnError) {
  auto c = small_config();
  c.max_seq_len = 8;
  model::LlamaModel m(c, model::Precision::fp32);
  std::vector<int32_t> tokens(9, 1);
  EXPECT_THROW(m.forward(tokens.data(), nullptr, 1, 9), Error);
}

// Two micro-batches with grad_scale 1/2 each accumulate the gradient of the mean of their losses,
// which equals one forward_backward over both sequences when both have the same number of targets.
TEST(Llama, GradientAccumulationEqualsLargerBatch) {
  const auto c = small_config();
  model::LlamaModel m(c, model::Precision::fp32, 11);
  m.init_random(0.1f);
  const int T = 10;
  const auto tokens = philox_tokens(2 * T, c.vocab_size, kTokenSeed, 5);
  const auto targets = philox_tokens(2 * T, c.vocab_size, kTokenSeed, 6);
  m.zero_grad();
  m.forward_backward(tokens.data(), targets.data(), 2, T);
  std::vector<float> big(m.grad_data(), m.grad_data() + m.num_params());
  m.zero_grad();
  m.forward_backward(tokens.data(), targets.data(), 1, T, 0.5f);
  m.forward_backward(tokens.data() + T, targets.data() + T, 1, T, 0.5f);
  const std::vector<float> accumulated(m.grad_data(), m.grad_data() + m.num_params());
  const auto d = testing::max_difference(accumulated, big);
  EXPECT_GT(d.scale, 0.0) << "the larger batch has no gradient";
  EXPECT_LT(d.relative(), 1e-5) << "worst element " << d.worst;
}

TEST(Llama, Bf16SrKeepsComputeCopyExactlyBf16) {
  const auto c = small_config();
  model::LlamaModel m(c, model::Precision::bf16_sr, 2);
  m.init_random();
  const int T = 8;
  const auto tokens = philox_tokens(T, c.vocab_size, kTokenSeed, 7);
  const auto targets = philox_tokens(T, c.vocab_size, kTokenSeed, 8);
  model::AdamWConfig opt;
  for (int step = 1; step <= 3; step++) {
    m.zero_grad();
    m.forward_backward(tokens.data(), targets.data(), 1, T);
    m.optimizer_step(opt, 1e-2f, step);
  }
  for (int64_t i = 0; i < m.num_params(); i++)
    ASSERT_EQ(m.param_data()[i], to_float(to_bf16(m.param_data()[i]))) << "element " << i << " is not a bf16 value";
}

TEST(Llama, RecomputeModesGiveBitwiseTheSameLossAndGradients) {
  // selective and full recompute rerun the same kernels on the same inputs in the backward, so every
  // gradient equals the one of a run that saved everything, bit for bit, in every precision mode;
  // two steps check that the recomputation also sees the updated weights.
  const auto c = small_config();
  const int B = 2, T = 37;
  const auto tokens = philox_tokens(B * T, c.vocab_size, kTokenSeed, 5);
  const auto targets = philox_tokens(B * T, c.vocab_size, kTokenSeed, 6);
  for (auto p : {model::Precision::fp32, model::Precision::bf16_mixed, model::Precision::bf16_sr}) {
    std::vector<float> ref_grads, ref_params;
    float ref_loss = 0;
    // (mode, layers): every layer, or Megatron's block method (only layer 0 of the two recomputes).
    const std::pair<model::Recompute, int> modes[] = {{model::Recompute::none, -1},
                                                      {model::Recompute::selective, -1},
                                                      {model::Recompute::full, -1},
                                                      {model::Recompute::full, 1},
                                                      {model::Recompute::selective, 1}};
    for (const auto& [r, layers] : modes) {
      model::LlamaModel m(c, p, 11);
      m.init_random(0.1f);
      m.set_recompute(r, layers);
      model::AdamWConfig opt;
      float loss = 0;
      for (int step = 1; step <= 2; step++) {
        m.zero_grad();
        loss = m.forward_backward(tokens.data(), targets.data(), B, T).loss;
        if (step == 1) m.optimizer_step(opt, 1e-2f, step);
      }
      std::vector<float> grads(m.grad_data(), m.grad_data() + m.num_params());
      std::vector<float> params(m.param_data(), m.param_data() + m.num_params());
      if (r == model::Recompute::none) {
        ref_grads = grads, ref_params = params, ref_loss = loss;
        continue;
      }
      EXPECT_EQ(loss, ref_loss) << model::recompute_name(r) << " " << layers << " " << model::precision_name(p);
      int64_t differ = 0;
      for (size_t i = 0; i < grads.size(); i++) differ += grads[i] != ref_grads[i] || params[i] != ref_params[i];
      EXPECT_EQ(differ, 0) << model::recompute_name(r) << " " << layers << " " << model::precision_name(p);
    }
  }
}

TEST(Llama, RecomputeSavesActivationMemory) {
  // The analytic figure is the allocation (one layout sizes both); recompute must shrink it in the
  // order none > selective > full, and full keeps about one layer plus the residual stream.
  const auto c = model::preset_config("stories15m");
  for (auto p : {model::Precision::fp32, model::Precision::bf16_mixed}) {
    const int64_t none = model::LlamaModel::activation_bytes(c, p, 4, 256, model::Recompute::none);
    const int64_t sel = model::LlamaModel::activation_bytes(c, p, 4, 256, model::Recompute::selective);
    const int64_t full = model::LlamaModel::activation_bytes(c, p, 4, 256, model::Recompute::full);
    EXPECT_GT(none, sel);
    EXPECT_GT(sel, full);
    EXPECT_LT(full * 2, none) << "full recompute should keep well under half of 6 layers' activations";
    const int64_t block2 = model::LlamaModel::activation_bytes(c, p, 4, 256, model::Recompute::full, 2);
    EXPECT_GT(block2, full);  // 2 of 6 layers recompute: between full and none
    EXPECT_LT(block2, none);
  }
  EXPECT_THROW(model::parse_recompute("partial"), Error);
  EXPECT_EQ(model::parse_recompute("null"), model::Recompute::none);
}

}  // namespace
}  // namespace llamatrain
