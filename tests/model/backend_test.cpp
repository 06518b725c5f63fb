// The fast backends against the reference backend, whole model: all run the same passes
// (model/passes.cpp) through model/backend.h, over kernels/cpu, kernels/cuda (where a GPU is usable)
// and kernels/ref. On every golden config (packed documents among them) and in every precision: the loss, the logits, every
// gradient and three AdamW steps' weights; in the bf16 modes for both of the CPU's operand forms; a
// frozen model; and decoding.
//
// Error metric per tensor: max|cpu - ref| / max|ref|. fp32: the two differ only in summation order
// (measured below 1e-6 of each tensor's scale; bound 1e-5). bf16 modes: both round the same operands
// to bf16, but an fp32 value that differs in its last bits between the backends may round to the
// neighbouring bf16 (one ulp, 2^-8 of the value) and that difference propagates; bound 2e-2 of each
// tensor's scale (a few ulp), the loss 2e-3.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "kernels/cpu/matmul_choice.h"
#include "model/llama.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using model::Device;
using model::Precision;

const std::string kGolden = std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/golden/";

struct Batch {
  std::vector<int32_t> tokens, targets;
  std::vector<int32_t> positions, doc_start;  // the packed goldens' documents
  int B = 0, T = 0;
  model::Documents docs() const {
    return {positions.empty() ? nullptr : positions.data(), doc_start.empty() ? nullptr : doc_start.data()};
  }
};

Batch golden_batch(const std::string& dir) {
  io::SafetensorsCheckpoint g(dir + "/golden.safetensors");
  const auto& tok = g.get("tokens");
  Batch b;
  b.B = int(tok.shape[0]);
  b.T = int(tok.shape[1]);
  b.tokens.resize(size_t(b.B) * b.T);
  b.targets.resize(size_t(b.B) * b.T);
  std::memcpy(b.tokens.data(), tok.data, tok.nbytes);
  std::memcpy(b.targets.data(), g.get("targets").data, g.get("targets").nbytes);
  for (auto [name, out] : {std::pair{"positions", &b.positions}, std::pair{"doc_start", &b.doc_start}})
    if (const auto* t = g.find(name)) {
      out->resize(size_t(b.B) * b.T);
      std::memcpy(out->data(), t->data, t->nbytes);
    }
  return b;
}

// Forces the process-wide matmul kernel choice (and so the CPU's operand form) while alive.
class ForcePolicy {
 public:
  explicit ForcePolicy(cpu::MatmulPolicy p) : old_(cpu::matmul_chooser().policy()) {
    cpu::matmul_chooser().set_policy(p);
  }
  ~ForcePolicy() { cpu::matmul_chooser().set_policy(old_); }

 private:
  cpu::MatmulPolicy old_;
};

double rel_err(const float* got, const float* want, size_t n) {
  return testing::max_difference(std::span<const float>(got, n), std::span<const float>(want, n)).relative();
}

size_t numel(const io::HfTensorSlice& t) {
  size_t n = 1;
  for (const int64_t d : t.shape) n *= size_t(d);
  return n;
}

struct Bounds {
  double tensors, loss, weights;
};
// weights: after an optimizer step on the same gradients (see compare_training).
Bounds bounds_of(Precision p) {
  if (p == Precision::fp32) return {1e-5, 1e-5, 1e-6};
  // bf16-sr: a weight the two backends round to neighbouring bf16 values differs by one bf16 ulp,
  // at most 2^-7 of its magnitude, so of the tensor's scale (how many may: compare_training).
  return {2e-2, 2e-3, p == Precision::bf16_sr ? 0x1p-7 : 1e-6};
}

// Runs `steps` training steps on both models, checking the loss, the logits of the first forward
// and every gradient of every step; then both optimizers step on the CPU's gradients (copied into
// the reference model), so their weights must agree to rounding: AdamW divides by sqrt(v), so a
// gradient element below the other backend's rounding noise would otherwise step by lr in a random
// direction. bf16-sr rounds both with the same random bits: a weight may land one bf16 step apart
// only where the two fp32 results straddle a rounding boundary. Returns the worst gradient error.
double compare_training(model::LlamaModel& cpu, model::LlamaModel& ref, const Batch& b, int steps,
                        const std::string& label) {
  // `cpu` is the fast backend under test (cpu or cuda); both are read through host copies.
  auto grads = [](model::LlamaModel& m) {
    std::vector<float> g(size_t(m.num_trainable()));
    m.copy_grads_to_host(g.data());
    return g;
  };
  auto params = [](const model::LlamaModel& m) {
    std::vector<float> p(size_t(m.num_params()));
    m.copy_params_to_host(p.data());
    return p;
  };
  const Bounds bound = bounds_of(cpu.precision());
  const auto& c = cpu.config();
  model::AdamWConfig opt;
  opt.lr = 1e-3f;
  double worst = 0, worst_weights = 0;
  for (int step = 1; step <= steps; step++) {
    cpu.zero_grad();
    ref.zero_grad();
    const auto sc = cpu.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.0f, b.docs());
    const auto sr = ref.forward_backward(b.tokens.data(), b.targets.data(), b.B, b.T, 1.0f, b.docs());
    EXPECT_EQ(sc.num_valid, sr.num_valid) << label;
    EXPECT_NEAR(sc.loss, sr.loss, bound.loss * std::abs(sr.loss)) << label << " loss at step " << step;
    EXPECT_TRUE(std::isfinite(sc.loss) && std::isfinite(sr.loss)) << label;
    if (step == 1) {
      const size_t n = size_t(b.B) * b.T * c.vocab_size;
      std::vector<float> lc(n, NAN), lr(n, NAN);
      cpu.logits(lc.data());
      ref.logits(lr.data());
      const double e = rel_err(lc.data(), lr.data(), n);
      EXPECT_LT(e, bound.tensors) << label << " logits";
      worst = std::max(worst, e);
    }
    const std::vector<float> gc = grads(cpu), gr = grads(ref);
    for (const auto& t : io::hf_tensor_slices(cpu)) {
      const model::ParamSpec* s = cpu.find_param(t.param);
      EXPECT_NE(s, nullptr) << t.param;
      if (s == nullptr || s->frozen) continue;
      const int64_t at = t.offset - s->offset + s->grad_offset;
      const double e = rel_err(gc.data() + at, gr.data() + at, numel(t));
      EXPECT_LT(e, bound.tensors) << label << " gradient of " << t.hf_name << " at step " << step;
      worst = std::max(worst, e);
    }
    std::memcpy(ref.grad_data(), gc.data(), sizeof(float) * gc.size());
    const float nc = cpu.optimizer_step(opt, opt.lr, step), nr = ref.optimizer_step(opt, opt.lr, step);
    EXPECT_NEAR(nc, nr, 1e-6 * nr) << label << " gradient norm at step " << step;
    const std::vector<float> pc = params(cpu), pr = params(ref);
    for (const auto& t : io::hf_tensor_slices(cpu)) {
      const size_t n = numel(t);
      const float* wc = pc.data() + t.offset;
      const float* wr = pr.data() + t.offset;
      const double e = rel_err(wc, wr, n);
      EXPECT_LT(e, bound.weights) << label << " weights of " << t.hf_name << " after step " << step;
      size_t differ = 0;
      for (size_t i = 0; i < n; i++) differ += wc[i] != wr[i];
      if (cpu.precision() == Precision::bf16_sr) {
        EXPECT_LE(differ, n / 1000) << label << " weights of " << t.hf_name << " rounded apart after step " << step;
      }
      worst_weights = std::max(worst_weights, e);
    }
  }
  std::printf("%s: worst gradient or logits error %.2e, weights after the same update %.2e\n", label.c_str(), worst,
              worst_weights);
  return worst;
}

class BackendTest : public ::testing::TestWithParam<std::tuple<std::string, Precision>> {};

TEST_P(BackendTest, CpuMatchesTheReferenceBackend) {
  const auto& [name, precision] = GetParam();
  const std::string dir = kGolden + name;
  const Batch b = golden_batch(dir);
  // The bf16 modes in each of the CPU's operand forms (bf16, where oneDNN has a bf16 kernel here, and
  // bf16 values in floats); fp32 has one.
  std::vector<cpu::MatmulPolicy> policies = {cpu::MatmulPolicy::automatic};
  if (precision != Precision::fp32) policies = {cpu::MatmulPolicy::f32};
  if (precision != Precision::fp32 && cpu::matmul_chooser().bf16_available())
    policies.insert(policies.begin(), cpu::MatmulPolicy::bf16);
  for (const auto policy : policies) {
    ForcePolicy force(policy);
    auto cpu = io::load_hf_model(dir, precision, Device::cpu);
    auto ref = io::load_hf_model(dir, precision, Device::ref);
    EXPECT_EQ(cpu->device(), Device::cpu);
    EXPECT_EQ(ref->device(), Device::ref);
    const std::string label =
        name + " " + model::precision_name(precision) + " matmul policy " + cpu::matmul_policy_name(policy);
    compare_training(*cpu, *ref, b, 3, label);
    if (precision != Precision::fp32 && cpu::matmul_chooser().bf16_available()) {
      EXPECT_EQ(cpu->float_operands(), policy == cpu::MatmulPolicy::f32) << label;
    }
  }
}

// The CUDA backend against the reference backend, the same way, where a GPU is usable.
TEST_P(BackendTest, CudaMatchesTheReferenceBackend) {
  if (std::string why; !model::device_usable(Device::cuda, &why)) GTEST_SKIP() << "needs an NVIDIA GPU: " << why;
  const auto& [name, precision] = GetParam();
  const std::string dir = kGolden + name;
  const Batch b = golden_batch(dir);
  auto cuda = io::load_hf_model(dir, precision, Device::cuda);
  auto ref = io::load_hf_model(dir, precision, Device::ref);
  EXPECT_EQ(cuda->device(), Device::cuda);
  compare_training(*cuda, *ref, b, 3, name + " " + model::precision_name(precision) + " on cuda");
}

INSTANTIATE_TEST_SUITE_P(Goldens, BackendTest,
                         ::testing::Combine(::testing::Values("mha_untied", "gqa", "tied", "odd", "qwen_bias",
                                                              "llama3_scaled", "window", "packed", "packed_window"),
                                            ::testing::Values(Precision::fp32, Precision::bf16_mixed,
                                                              Precision::bf16_sr)),
                         [](const auto& info) {
                           std::string p = model::precision_name(std::get<1>(info.param));
                           for (char& ch : p)
                             if (ch == '-') ch = '_';
                           return std::get<0>(info.param) + "_" + p;
                         });

TEST(Backend, FrozenTensorsAndRecomputeMatch) {
  // Frozen weights (no gradient: the kernels' nullptr paths) and full recomputation on both backends.
  const std::string dir = kGolden + "gqa";
  const Batch b = golden_batch(dir);
  model::LlamaConfig c = io::read_hf_config(dir);
  c.frozen = {"wte", "wqkv", "attn_norm"};
  for (const Precision p : {Precision::fp32, Precision::bf16_mixed}) {
    auto cpu = std::make_unique<model::LlamaModel>(c, p, 7, model::ShardPlan{}, nullptr, Device::cpu);
    auto ref = std::make_unique<model::LlamaModel>(c, p, 7, model::ShardPlan{}, nullptr, Device::ref);
    io::load_hf_weights(*cpu, dir);
    io::load_hf_weights(*ref, dir);
    cpu->set_recompute(model::Recompute::full);
    ref->set_recompute(model::Recompute::selective);
    compare_training(*cpu, *ref, b, 2, std::string("frozen, recompute, ") + model::precision_name(p));
  }
}

TEST(Backend, RandomInitIsTheSameOnBothBackends) {
  // init_random draws each element from its place in the full tensor, on either backend.
  const model::LlamaConfig c = io::read_hf_config(kGolden + "odd");
  model::LlamaModel cpu(c, Precision::fp32, 11, model::ShardPlan{}, nullptr, Device::cpu);
  model::LlamaModel ref(c, Precision::fp32, 11, model::ShardPlan{}, nullptr, Device::ref);
  cpu.init_random(0.02f, 0.01f);
  ref.init_random(0.02f, 0.01f);
  ASSERT_EQ(cpu.num_params(), ref.num_params());
  EXPECT_EQ(std::memcmp(cpu.param_data(), ref.param_data(), sizeof(float) * size_t(cpu.num_params())), 0);
}

TEST(Backend, DecodingMatches) {
  const std::string dir = kGolden + "mha_untied";
  for (const Precision p : {Precision::fp32, Precision::bf16_mixed}) {
    auto cpu = io::load_hf_model(dir, p, Device::cpu);
    auto ref = io::load_hf_model(dir, p, Device::ref);
    const int V = cpu->config().vocab_size, steps = 12;
    cpu->reset_cache(steps);
    ref->reset_cache(steps);
    std::vector<float> lc(size_t(V), NAN), lr(size_t(V), NAN);
    for (int pos = 0; pos < steps; pos++) {
      const int32_t token = (pos * 37 + 5) % V;
      cpu->decode_step(lc.data(), token, pos);
      ref->decode_step(lr.data(), token, pos);
      EXPECT_LT(rel_err(lc.data(), lr.data(), size_t(V)), bounds_of(p).tensors)
          << model::precision_name(p) << " logits at position " << pos;
    }
  }
}

TEST(Backend, UnknownDeviceIsAnError) {
  EXPECT_EQ(model::parse_device("ref"), Device::ref);
  try {
    model::parse_device("tpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected cpu, ref or cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace llamatrain
