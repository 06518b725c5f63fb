// model.freeze: tensors named by Hugging Face patterns do not train. In the model: the frozen
// weights stay bitwise unchanged through AdamW steps (weight decay on) while the others move, the
// trainable tensors' gradients equal an unfrozen model's, and the gradient and optimizer arenas
// shrink by exactly the frozen parameters' bytes, as LlamaModel::state_parts says. The patterns:
// matched against the HF names, whole tensors or parts of them (some layers, one of q/k/v, a row
// range), errors for a pattern that matches nothing, a malformed or empty row range, one past a
// tensor's rows, or everything. Parts: their bits stay through AdamW with weight decay, in every
// precision, and the rest trains exactly as a model whose gradient there is zeroed by hand;
// embedding_lr moves the embedding and the output layer at their own rate. End to end through the binary: the console line, checkpoints in which
// the frozen tensors keep their bytes, the plan's and bench's figures, the PyTorch reference with
// requires_grad False on the same parameters, TP2, PP2 and DP2 (ZeRO-1) equal to one process, and
// resuming with another model.freeze; parts (one layer, q_proj of every layer) against the PyTorch
// reference freezing the same HF parameters, and TP2, PP2 and DP2 (ZeRO-1) equal to one process, with
// the parts' bits kept in bf16-mixed and bf16 too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "model/llama.h"
#include "model/memory.h"
#include "parallel/data_parallel.h"
#include "obs/metrics.h"
#include "test_util.h"
#include "train/train_runs.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// The anchors' first stage: everything but the embedding and the output layer.
const std::vector<std::string> kLayersAndNorm = {"model.layers.*", "model.norm.weight"};

model::LlamaConfig tiny_config() {
  model::LlamaConfig c;
  c.dim = 32, c.ffn_dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 96;
  c.max_seq_len = 32;
  return c;
}

std::vector<float> tensor_of(model::LlamaModel& m, const std::string& name) {
  for (const auto& s : m.param_specs())
    if (s.name == name) return {m.param_data() + s.offset, m.param_data() + s.offset + s.numel};
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

std::vector<float> grad_of(model::LlamaModel& m, const std::string& name) {
  for (const auto& s : m.param_specs())
    if (s.name == name) {
      EXPECT_FALSE(s.frozen) << name;
      return {m.grad_data() + s.grad_offset, m.grad_data() + s.grad_offset + s.numel};
    }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};
Batch batch(int B, int T, int V, uint32_t seed) {
  Batch b;
  for (int i = 0; i < B * T; i++) {
    b.tokens.push_back(int32_t((uint32_t(i) * 2654435761u + seed * 40503u) % uint32_t(V)));
    b.targets.push_back(int32_t((uint32_t(i) * 7919u + seed * 104729u + 13u) % uint32_t(V)));
  }
  return b;
}

std::vector<std::string> frozen_tensors(const model::LlamaConfig& c, const std::vector<std::string>& patterns) {
  const io::FreezeSet f = io::resolve_freeze(c, patterns);
  EXPECT_TRUE(f.parts.empty()) << patterns.front() << " froze parts of " << f.parts.front().tensor;
  return f.tensors;
}

TEST(Freeze, PatternsResolveToWholeTensors) {
  const model::LlamaConfig c = tiny_config();
  EXPECT_EQ(frozen_tensors(c, kLayersAndNorm),
            (std::vector<std::string>{"attn_norm", "wqkv", "wo", "ffn_norm", "w13", "w2", "norm"}));
  EXPECT_EQ(frozen_tensors(c, {"model.embed_tokens.weight"}), std::vector<std::string>{"wte"});
  EXPECT_EQ(frozen_tensors(c, {"model.layers.*.self_attn.*"}), (std::vector<std::string>{"wqkv", "wo"}));
  EXPECT_EQ(frozen_tensors(c, {"model.layers.*.mlp.down_proj.weight", "*layernorm*"}),
            (std::vector<std::string>{"attn_norm", "ffn_norm", "w2"}));
  EXPECT_TRUE(frozen_tensors(c, {}).empty());
  // Parts that together cover a tensor freeze it whole: each layer by itself, or rows [0, 40) and [40, 96).
  EXPECT_EQ(frozen_tensors(c, {"model.layers.0.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weight"}),
            std::vector<std::string>{"w2"});
  EXPECT_EQ(frozen_tensors(c, {"lm_head.weight[:40]", "lm_head.weight[40:]"}), std::vector<std::string>{"wout"});
  EXPECT_EQ(frozen_tensors(c, {"lm_head.weight[0:96]"}), std::vector<std::string>{"wout"});
}

// Layers, one of q/k/v, row ranges: element ranges of the stacked tensors, in their row-major order
// (wqkv is (L, (H + 2 Hkv) D, C) with q's rows first, w13 (L, 2F, C) with gate's rows first).
TEST(Freeze, PatternsResolveToPartsOfStackedTensors) {
  const model::LlamaConfig c = tiny_config();  // C 32, F 64, L 2, H 4, Hkv 2: D 8, QKV 64
  const int64_t C = 32, F = 64, QKV = 64, D = 8;
  using P = model::FrozenPart;
  const io::FreezeSet layer0 = io::resolve_freeze(c, {"model.layers.0.*"});
  EXPECT_TRUE(layer0.tensors.empty());
  EXPECT_EQ(layer0.parts, (std::vector<P>{{"attn_norm", 0, C},
                                          {"wqkv", 0, QKV * C},
                                          {"wo", 0, C * C},
                                          {"ffn_norm", 0, C},
                                          {"w13", 0, 2 * F * C},
                                          {"w2", 0, C * F}}));
  // q_proj of every layer, v_proj of layer 1, up_proj of layer 1.
  const io::FreezeSet qv =
      io::resolve_freeze(c, {"model.layers.*.self_attn.q_proj.weight", "model.layers.1.self_attn.v_proj.weight",
                             "model.layers.1.mlp.up_proj.weight"});
  EXPECT_EQ(qv.parts, (std::vector<P>{{"wqkv", 0, 4 * D * C},
                                      {"wqkv", QKV * C, QKV * C + 4 * D * C},
                                      {"wqkv", QKV * C + 6 * D * C, 2 * QKV * C},
                                      {"w13", 2 * F * C + F * C, 4 * F * C}}));
  // Row ranges: of a matrix (rows of C), of a norm weight (its elements), overlapping ones merged,
  // and a range past the end cut at the end.
  const io::FreezeSet rows = io::resolve_freeze(c, {"model.embed_tokens.weight[:10]", "model.embed_tokens.weight[5:20]",
                                                    "model.norm.weight[4:8]", "lm_head.weight[90:1000]"});
  EXPECT_EQ(rows.parts, (std::vector<P>{{"wte", 0, 20 * C}, {"norm", 4, 8}, {"wout", 90 * C, 96 * C}}));
  // A row range over every layer: the same rows of each layer's matrix.
  const io::FreezeSet o = io::resolve_freeze(c, {"model.layers.*.self_attn.o_proj.weight[2:3]"});
  EXPECT_EQ(o.parts, (std::vector<P>{{"wo", 2 * C, 3 * C}, {"wo", C * C + 2 * C, C * C + 3 * C}}));
}

TEST(Freeze, PatternErrorsNameThePatternAndTheFix) {
  const model::LlamaConfig c = tiny_config();
  auto message = [&](const std::vector<std::string>& patterns) {
    try {
      io::resolve_freeze(c, patterns);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string none = message({"model.layers.*", "model.layer.*"});
  EXPECT_NE(none.find("model.freeze: 'model.layer.*' matches no parameter"), std::string::npos) << none;
  EXPECT_NE(none.find("model.layers.N.self_attn.q_proj.weight (32, 32)"), std::string::npos) << none;
  EXPECT_NE(none.find("lm_head.weight (96, 32)"), std::string::npos) << none;
  const std::string all = message({"*"});
  EXPECT_NE(all.find("freeze every parameter"), std::string::npos) << all;
  EXPECT_NE(message({"model.layers.0.*", "model.layers.1.*", "model.embed_tokens.weight", "lm_head.weight[:96]",
                     "model.norm.weight"})
                .find("freeze every parameter"),
            std::string::npos);
  // Row ranges: malformed, empty, or starting past the tensor's rows.
  for (const std::string bad : {"lm_head.weight[3]", "lm_head.weight[a:4]", "lm_head.weight[-1:]",
                                "lm_head.weight[:4:2]", "lm_head.weight[4:2x]"}) {
    const std::string m = message({bad});
    EXPECT_NE(m.find("model.freeze: '" + bad + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("hint: e.g. model.embed_tokens.weight[:32000]"), std::string::npos) << m;
  }
  EXPECT_NE(message({"lm_head.weight[5:5]"}).find("'lm_head.weight[5:5]' is an empty row range"), std::string::npos);
  const std::string past = message({"model.layers.*.self_attn.o_proj.weight[32:]"});
  EXPECT_NE(past.find("'model.layers.*.self_attn.o_proj.weight[32:]' starts at row 32 of "
                      "model.layers.0.self_attn.o_proj.weight, which has 32 rows"),
            std::string::npos)
      << past;
  EXPECT_NE(message({"model.layer.0.*[:3]"}).find("'model.layer.0.*' matches no parameter"), std::string::npos);
}

// Frozen weights keep their bits through AdamW steps with weight decay; the trainable ones move and
// get exactly the gradients an unfrozen model computes for them.
void check_frozen_training(model::Precision precision, const std::vector<std::string>& patterns,
                           const std::vector<const char*>& trained, bool tied = false) {
  model::LlamaConfig c = tiny_config();
  c.tie_embeddings = tied;
  model::LlamaModel full(c, precision, 7);
  c.frozen = frozen_tensors(c, patterns);
  model::LlamaModel part(c, precision, 7);
  full.init_random(0.05f);
  part.init_random(0.05f);
  const int B = 2, T = 16;
  const Batch b = batch(B, T, c.vocab_size, 1);
  full.zero_grad();
  part.zero_grad();
  full.forward_backward(b.tokens.data(), b.targets.data(), B, T);
  part.forward_backward(b.tokens.data(), b.targets.data(), B, T);
  for (const char* t : trained)
    EXPECT_TRUE(testing::bitwise_equal(std::string("gradient of ") + t, grad_of(part, t), grad_of(full, t)));
  EXPECT_EQ(part.grads().wqkv, nullptr);
  EXPECT_EQ(part.grads().attn_norm, nullptr);

  std::map<std::string, std::vector<float>> before;
  for (const auto& s : part.param_specs()) before[s.name] = tensor_of(part, s.name);
  model::AdamWConfig opt;
  opt.weight_decay = 0.1f;
  for (int step = 1; step <= 4; step++) {
    const Batch bs = batch(B, T, c.vocab_size, uint32_t(step));
    part.zero_grad();
    part.forward_backward(bs.tokens.data(), bs.targets.data(), B, T);
    part.optimizer_step(opt, 1e-2f, step);
  }
  for (const auto& s : part.param_specs()) {
    const auto after = tensor_of(part, s.name);
    if (s.frozen)
      EXPECT_TRUE(testing::bitwise_equal(s.name, after, before[s.name]));
    else
      EXPECT_GT(testing::max_difference(after, before[s.name]).max_abs, 1e-4) << s.name << " did not train";
  }
}

// fp32 and bf16-mixed; the layers and the final norm frozen (the weight-gradient matmuls skipped,
// the gradient flowing on to the embedding; untied and tied), or the embedding and the layers (the
// backward stops after the final norm).
TEST(Freeze, FrozenTensorsStayBitwiseAndTrainableGradientsAreUnchanged) {
  for (const auto precision : {model::Precision::fp32, model::Precision::bf16_mixed}) {
    SCOPED_TRACE(model::precision_name(precision));
    check_frozen_training(precision, kLayersAndNorm, {"wte", "wout"});
    check_frozen_training(precision, kLayersAndNorm, {"wte"}, true);
    check_frozen_training(precision, {"model.embed_tokens.weight", "model.layers.*"}, {"norm", "wout"});
  }
}

// Parts: layer 0 whole, q_proj of layer 1, the embedding's first 40 rows and lm_head's rows [10, 50).
const std::vector<std::string> kParts = {"model.layers.0.*", "model.layers.1.self_attn.q_proj.weight",
                                         "model.embed_tokens.weight[:40]", "lm_head.weight[10:50]"};

const model::ParamSpec& spec_of(model::LlamaModel& m, const std::string& name) {
  for (const auto& s : m.param_specs())
    if (s.name == name) return s;
  throw Error("no tensor " + name);
}

// In each precision, a model with frozen parts trains bit for bit as the same model with nothing
// frozen whose gradient is zeroed there by hand (weight decay off, so that AdamW leaves a zero
// gradient's weights alone); with weight decay on, the frozen parts keep their bits and every tensor
// that holds them still trains elsewhere.
TEST(Freeze, FrozenPartsTrainAsAGradientZeroedThereAndKeepTheirBits) {
  for (const auto precision : {model::Precision::fp32, model::Precision::bf16_mixed, model::Precision::bf16_sr}) {
    SCOPED_TRACE(model::precision_name(precision));
    model::LlamaConfig c = tiny_config();
    const io::FreezeSet f = io::resolve_freeze(c, kParts);
    ASSERT_TRUE(f.tensors.empty());
    ASSERT_EQ(f.parts.size(), 8u);  // 6 kinds of layer 0 (wqkv's reaching on into layer 1's q), wte, wout
    model::LlamaModel whole(c, precision, 7);
    c.frozen_parts = f.parts;
    model::LlamaModel part(c, precision, 7);
    const int B = 2, T = 16;
    for (const float decay : {0.0f, 0.1f}) {
      SCOPED_TRACE(decay);
      whole.init_random(0.05f);
      part.init_random(0.05f);
      std::map<std::string, std::vector<float>> before;
      for (const auto& s : part.param_specs()) before[s.name] = tensor_of(part, s.name);
      model::AdamWConfig opt;
      opt.weight_decay = decay;
      for (int step = 1; step <= 4; step++) {
        const Batch b = batch(B, T, c.vocab_size, uint32_t(step));
        whole.zero_grad();
        part.zero_grad();
        whole.forward_backward(b.tokens.data(), b.targets.data(), B, T);
        part.forward_backward(b.tokens.data(), b.targets.data(), B, T);
        for (const auto& p : f.parts) {
          const model::ParamSpec& s = spec_of(whole, p.tensor);
          std::fill(whole.grad_data() + s.grad_offset + p.begin, whole.grad_data() + s.grad_offset + p.end, 0.0f);
        }
        if (step == 1) {  // layer 0, frozen whole in every kind: the backward computed no weight gradient there
          for (const char* name : {"attn_norm", "wqkv", "wo", "ffn_norm", "w13", "w2"}) {
            const model::ParamSpec& s = spec_of(part, name);
            EXPECT_EQ(s.frozen_layers, (std::vector<bool>{true, false})) << name;
            const std::vector<float> g = grad_of(part, name), layer0(g.begin(), g.begin() + s.numel / 2);
            EXPECT_TRUE(testing::bitwise_equal(std::string(name) + "'s layer 0 gradient before zeroing", layer0,
                                               std::vector<float>(layer0.size(), 0.0f)));
          }
        }
        part.zero_frozen_grads();
        if (decay == 0.0f || step == 1) {
          for (const auto& s : part.param_specs())
            EXPECT_TRUE(testing::bitwise_equal("gradient of " + s.name, grad_of(part, s.name), grad_of(whole, s.name)));
        }
        const float n_whole = whole.optimizer_step(opt, 1e-2f, step), n_part = part.optimizer_step(opt, 1e-2f, step);
        // (with decay, the hand-zeroed model decays its frozen parts, so only the first step compares)
        if (decay == 0.0f || step == 1) {
          EXPECT_EQ(n_part, n_whole) << "the norm leaves the frozen parts out";
        }
      }
      for (const auto& s : part.param_specs()) {
        const auto after = tensor_of(part, s.name);
        if (decay == 0.0f) {
          EXPECT_TRUE(testing::bitwise_equal(s.name, after, tensor_of(whole, s.name)));
        }
        std::vector<float> frozen_before, frozen_after, free_before, free_after;
        size_t i = 0;
        for (const auto& [b, e] : s.frozen_ranges) {
          for (; i < size_t(b); i++) free_before.push_back(before[s.name][i]), free_after.push_back(after[i]);
          for (; i < size_t(e); i++) frozen_before.push_back(before[s.name][i]), frozen_after.push_back(after[i]);
        }
        for (; i < after.size(); i++) free_before.push_back(before[s.name][i]), free_after.push_back(after[i]);
        EXPECT_TRUE(testing::bitwise_equal(s.name + "'s frozen parts", frozen_after, frozen_before));
        ASSERT_FALSE(free_after.empty()) << s.name;
        EXPECT_GT(testing::max_difference(free_after, free_before).max_abs, 1e-4) << s.name << " did not train";
      }
    }
    // The parts' ranges on the model are the resolved ones (one shard: local = full offsets).
    EXPECT_EQ(spec_of(part, "wte").frozen_ranges, (std::vector<std::pair<int64_t, int64_t>>{{0, 40 * 32}}));
    EXPECT_EQ(spec_of(part, "wout").frozen_ranges, (std::vector<std::pair<int64_t, int64_t>>{{10 * 32, 50 * 32}}));
  }
}

// embedding_lr: one step from the same weights moves the embedding and the output layer as lr =
// embedding_lr would, and every other tensor as lr.
TEST(Freeze, EmbeddingLrMovesTheEmbeddingAndOutputLayerAtItsOwnRate) {
  for (const auto precision : {model::Precision::fp32, model::Precision::bf16_mixed, model::Precision::bf16_sr}) {
    SCOPED_TRACE(model::precision_name(precision));
    const model::LlamaConfig c = tiny_config();
    model::LlamaModel both(c, precision, 7), slow(c, precision, 7), fast(c, precision, 7);
    model::AdamWConfig opt;
    opt.weight_decay = 0.1f;
    const Batch b = batch(2, 16, c.vocab_size, 3);
    for (model::LlamaModel* m : {&both, &slow, &fast}) {
      m->init_random(0.05f);
      m->zero_grad();
      m->forward_backward(b.tokens.data(), b.targets.data(), 2, 16);
    }
    both.optimizer_step(opt, 1e-3f, 1, 3e-2f);
    slow.optimizer_step(opt, 1e-3f, 1);
    fast.optimizer_step(opt, 3e-2f, 1);
    for (const auto& s : both.param_specs()) {
      const bool embedding = s.name == "wte" || s.name == "wout";
      EXPECT_TRUE(testing::bitwise_equal(s.name, tensor_of(both, s.name), tensor_of(embedding ? fast : slow, s.name)));
    }
  }
}

// Gradients and AdamW moments exist for the trainable tensors only: the arenas and the analytic
// figure both shrink by the frozen parameters x (4 gradient + 8 moment bytes), or 4 + 4 in bf16-sr,
// and by the frozen share of the moments under ZeRO-1.
TEST(Freeze, StateShrinksByTheFrozenParametersBytes) {
  for (const auto precision : {model::Precision::fp32, model::Precision::bf16_mixed, model::Precision::bf16_sr}) {
    SCOPED_TRACE(model::precision_name(precision));
    model::LlamaConfig c = tiny_config();
    const model::LlamaConfig plain = c;
    c.frozen = frozen_tensors(c, kLayersAndNorm);
    const model::ShardPlan single = model::ShardPlan::single(c);
    const int64_t frozen = c.num_params() - model::LlamaModel::num_trainable(c, single);
    EXPECT_EQ(frozen, c.num_params() - 2 * int64_t(c.vocab_size) * c.dim);  // all but wte and wout
    const int64_t per = precision == model::Precision::bf16_sr ? 4 + 4 : 4 + 8;

    const auto a = model::LlamaModel::state_parts(plain, single, precision, 1);
    const auto f = model::LlamaModel::state_parts(c, single, precision, 1);
    EXPECT_EQ(a.weights, f.weights);
    EXPECT_EQ(a.gradients + a.optimizer - f.gradients - f.optimizer, frozen * per);
    const auto z = model::LlamaModel::state_parts(c, single, precision, 2);
    EXPECT_EQ(z.optimizer, (c.num_params() - frozen + 1) / 2 * (per - 4));

    model::LlamaModel m_plain(plain, precision, 3), m_frozen(c, precision, 3);
    m_plain.zero_grad();  // allocates the training state
    m_frozen.zero_grad();
    EXPECT_EQ(m_plain.state_bytes() - m_frozen.state_bytes(), frozen * per);
    EXPECT_EQ(m_frozen.state_bytes(), model::LlamaModel::state_bytes(c, precision));

    // The memory plan (what `llamatrain plan` and the trainer print) says the same.
    const model::TrainingShape shape{precision, 2, 16, model::Recompute::none, -1, 1, 1};
    const auto pa = model::MemoryPlan::for_check(plain, single, shape, -1);
    const auto pf = model::MemoryPlan::for_check(c, single, shape, -1);
    EXPECT_EQ(pa.gradients - pf.gradients, frozen * 4);
    EXPECT_EQ(pa.state - pf.state, frozen * per);
  }
}

// Frozen parts keep their weights and gradients but have no AdamW moments: the moments shrink by
// their elements x 8 bytes (4 in bf16-sr), on one process and on every ZeRO-1 shard (the analytic
// figure is the largest shard's), and the state tensors a checkpoint writes name them as holes.
TEST(Freeze, FrozenPartsHaveNoMoments) {
  for (const auto precision : {model::Precision::fp32, model::Precision::bf16_mixed, model::Precision::bf16_sr}) {
    SCOPED_TRACE(model::precision_name(precision));
    model::LlamaConfig c = tiny_config();
    const model::LlamaConfig plain = c;
    c.frozen_parts = io::resolve_freeze(c, kParts).parts;
    int64_t part_elements = 0;
    for (const auto& p : c.frozen_parts) part_elements += p.end - p.begin;
    const int64_t moment = precision == model::Precision::bf16_sr ? 4 : 8;
    const model::ShardPlan single = model::ShardPlan::single(c);

    const auto a = model::LlamaModel::state_parts(plain, single, precision, 1);
    const auto f = model::LlamaModel::state_parts(c, single, precision, 1);
    EXPECT_EQ(a.weights, f.weights);
    EXPECT_EQ(a.gradients, f.gradients);
    EXPECT_EQ(a.optimizer - f.optimizer, part_elements * moment);
    model::LlamaModel m_plain(plain, precision, 3), m_part(c, precision, 3);
    m_plain.zero_grad();  // allocates the training state
    m_part.zero_grad();
    EXPECT_EQ(m_plain.state_bytes() - m_part.state_bytes(), part_elements * moment);
    EXPECT_EQ(m_part.state_bytes(), model::LlamaModel::state_bytes(c, precision));
    int64_t holes = 0;
    for (const auto& t : m_part.state_tensors())
      for (const auto& [b, e] : t.holes) {
        EXPECT_EQ(t.name.rfind("exp_avg", 0), 0u) << t.name << " has holes";
        holes += e - b;
      }
    EXPECT_EQ(holes, 2 * part_elements);  // exp_avg and exp_avg_sq

    // ZeRO-1 over 2 and 3 ranks: each shard's moments lose the frozen elements inside it.
    for (const int ranks : {2, 3}) {
      SCOPED_TRACE(ranks);
      const parallel::ZeroShards split(size_t(model::LlamaModel::num_trainable(c, single)), ranks);
      int64_t lost = 0, largest = 0;
      for (int r = 0; r < ranks; r++) {
        model::LlamaModel zp(plain, precision, 3), zf(c, precision, 3);
        for (model::LlamaModel* m : {&zp, &zf}) {
          m->set_optimizer_shard(int64_t(split.range(r).begin), int64_t(split.range(r).end),
                                 int64_t(split.padded_size()));
          m->zero_grad();
        }
        const int64_t here = (zp.state_bytes() - zf.state_bytes()) / moment;
        lost += here;
        largest = std::max(largest, (int64_t(split.range(r).size()) - here) * moment);
      }
      EXPECT_EQ(lost, part_elements);
      EXPECT_EQ(model::LlamaModel::state_parts(c, single, precision, ranks).optimizer, largest);
    }
  }
}

// ---- end to end ----

using testing::losses;
using testing::run_in;
using testing::RunResult;

std::string quoted(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

const std::string kFreeze = "model.freeze=[model.layers.*,model.norm.weight]";

// Each tensor of a checkpoint's model.safetensors.
std::map<std::string, std::vector<float>> checkpoint_tensors(const std::string& ckpt) {
  io::SafetensorsCheckpoint f(ckpt + "/model.safetensors");
  std::map<std::string, std::vector<float>> out;
  for (const auto& name : f.names()) {
    const auto& t = f.get(name);
    out[name].resize(size_t(t.numel()));
    f.read_f32(name, t.shape, out[name].data());
  }
  return out;
}

bool is_frozen_name(const std::string& hf) { return hf.rfind("model.layers.", 0) == 0 || hf == "model.norm.weight"; }

TEST(FreezeTrain, FrozenTensorsKeepTheirBytesAndUnfreezingOnResumeTrainsThem) {
  TempDir dir;
  const std::string run = dir / "run";
  const std::vector<std::string> ck = {"exp_manager.checkpoint_callback_params.every_n_train_steps=2",
                                       "exp_manager.checkpoint_callback_params.save_top_k=-1"};
  auto args = testing::train_args(run, {"trainer.max_steps=4", kFreeze, ck[0], ck[1]});
  RunResult r = run_in(run, args);
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("frozen: 19 tensors, "), std::string::npos) << r.log;  // 9 per layer x 2 + the norm
  EXPECT_NE(r.log.find("of the model); training "), std::string::npos) << r.log;
  const auto s2 = checkpoint_tensors(run + "/checkpoints/step_2"), s4 = checkpoint_tensors(run + "/checkpoints/step_4");
  ASSERT_EQ(s2.size(), s4.size());
  int frozen = 0;
  for (const auto& [name, w] : s2) {
    if (is_frozen_name(name)) {
      frozen++;
      EXPECT_TRUE(testing::bitwise_equal(name + " at steps 4 and 2", s4.at(name), w));
    } else {
      EXPECT_GT(testing::max_difference(s4.at(name), w).max_abs, 0.0) << name << " did not train";
    }
  }
  EXPECT_EQ(frozen, 19);
  // The checkpoint records what was frozen and holds no moments of it.
  const auto state = nlohmann::json::parse(testing::read_file(run + "/checkpoints/step_2/trainer_state.json"));
  EXPECT_EQ(state["frozen"].size(), 7u) << state.dump();

  // Resume from step 2 with nothing frozen: one line says so, and the layers train from there.
  const std::string again = dir / "again";
  args = testing::train_args(again, {"trainer.max_steps=4", "model.freeze=[]",
                                     "model.resume_from_checkpoint=" + run + "/checkpoints/step_2", ck[0], ck[1]});
  r = run_in(again, args);
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("unfrozen since the checkpoint (optimizer state starts at zero): "
                       "model.layers.*.input_layernorm.weight, model.layers.*.self_attn.q_proj.weight"),
            std::string::npos)
      << r.log;
  EXPECT_EQ(r.log.find("frozen: "), std::string::npos) << r.log;
  const auto u4 = checkpoint_tensors(again + "/checkpoints/step_4");
  for (const auto& [name, w] : s2)
    EXPECT_GT(testing::max_difference(u4.at(name), w).max_abs, 0.0) << name << " did not train after unfreezing";

  // And freezing on resume drops the optimizer state of what is frozen now.
  const std::string refreeze = dir / "refreeze";
  args = testing::train_args(
      refreeze, {"model.freeze=[model.layers.*.mlp.*]", "model.resume_from_checkpoint=" + again + "/checkpoints/step_4",
                 "trainer.max_steps=6"});
  r = run_in(refreeze, args);
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("frozen since the checkpoint (its optimizer state is dropped): "
                       "model.layers.*.mlp.gate_proj.weight, model.layers.*.mlp.up_proj.weight, "
                       "model.layers.*.mlp.down_proj.weight"),
            std::string::npos)
      << r.log;
}

TEST(FreezeTrain, PatternThatMatchesNothingStopsTheRunAndPlanShowsTheSmallerState) {
  TempDir dir;
  std::string out;
  const auto bad = testing::train_args(dir / "bad", {"model.freeze=[model.layer.*]"});
  std::vector<std::string> tail(bad.begin() + 1, bad.end());
  EXPECT_EQ(testing::run_capture(bad[0] + quoted(tail) + " 2>&1", &out), 1) << out;
  EXPECT_NE(
      out.find("error: model.freeze (override 'model.freeze=[model.layer.*]'): 'model.layer.*' matches no parameter"),
      std::string::npos)
      << out;

  // `llamatrain plan --json`: gradients and optimizer shrink by the frozen parameters' bytes.
  auto plan_json = [&](const std::vector<std::string>& extra) {
    auto a = testing::train_args(dir / "plan", extra);
    a[1] = "plan";
    std::vector<std::string> rest(a.begin() + 1, a.end());
    std::string o;
    EXPECT_EQ(testing::run_capture(a[0] + quoted(rest) + " --json 2>/dev/null", &o), 0) << o;
    return nlohmann::json::parse(o, nullptr, false);
  };
  const auto plain = plan_json({}), frozen = plan_json({kFreeze});
  ASSERT_FALSE(plain.is_discarded());
  ASSERT_FALSE(frozen.is_discarded());
  const auto& pm = plain["memory_per_rank"][0];
  const auto& fm = frozen["memory_per_rank"][0];
  // tiny.yaml: 2 layers 64 wide, 4 heads of 16, 2 kv heads, F 176; frozen: the layers and the final norm.
  const int64_t per_layer = (4 + 2 * 2) * 16 * 64 + 64 * 64 + 3 * 176 * 64 + 2 * 64, n_frozen = 2 * per_layer + 64;
  EXPECT_EQ(pm["gradients"].get<int64_t>() - fm["gradients"].get<int64_t>(), n_frozen * 4) << plain << "\n" << frozen;
  EXPECT_EQ(pm["optimizer"].get<int64_t>() - fm["optimizer"].get<int64_t>(), n_frozen * 8) << plain << "\n" << frozen;
  EXPECT_EQ(pm["weights"], fm["weights"]);
}

// `bench --freeze`: the model's arenas equal the analytic state (bench checks this itself and stops
// otherwise), which leaves out the frozen parameters' gradients and moments.
TEST(FreezeTrain, BenchMeasuresTheFrozenModelsState) {
  auto bench = [](const std::string& freeze) {
    std::string out;
    EXPECT_EQ(testing::run_capture(testing::llamatrain_bin() +
                                       " bench --model tiny --seq 16 --batch 1 --steps 1 --precision fp32 --json" +
                                       freeze + " 2>/dev/null",
                                   &out),
              0)
        << out;
    return nlohmann::json::parse(out, nullptr, false);
  };
  const auto plain = bench(""), frozen = bench(" --freeze 'model.layers.*' model.norm.weight");
  ASSERT_FALSE(plain.is_discarded());
  ASSERT_FALSE(frozen.is_discarded());
  const model::LlamaConfig c = model::preset_config("tiny");
  const int64_t embeddings = int64_t(c.vocab_size) * c.dim * (c.tie_embeddings ? 1 : 2);
  EXPECT_EQ(plain["trainable_params"].get<int64_t>(), c.num_params());
  EXPECT_EQ(frozen["trainable_params"].get<int64_t>(), embeddings);
  // state_mb is rounded to 0.1 MB.
  EXPECT_NEAR(plain["state_mb"].get<double>() - frozen["state_mb"].get<double>(),
              double(c.num_params() - embeddings) * 12 / 1e6, 0.11);
}

// A random tiny Llama written as an HF folder: the common start of both trainers.
std::string write_init(const std::string& dir) {
  model::LlamaConfig c;
  c.dim = 64, c.ffn_dim = 176, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 512;
  c.max_seq_len = 256, c.norm_eps = 1e-6f;
  model::LlamaModel m(c, model::Precision::fp32, 5);
  m.init_random(0.02f);
  io::save_hf_checkpoint(m, dir + "/init", "float32");
  return dir + "/init";
}

// The PyTorch comparison's run: fp32 from `init`, 4 samples a step in micro-batches of 2, weight decay
// 0.1, and `extra`; then the samples it read, written to DIR/samples.jsonl for the reference.
struct CurveRun {
  std::vector<std::string> cfg;
  std::string log;  // the trainer's output
};
CurveRun run_for_reference(const TempDir& dir, const std::string& init, const std::string& run, int steps, int warmup,
                           const std::vector<std::string>& extra) {
  CurveRun r;
  r.cfg = {testing::source_path("configs/tiny.yaml"),
           "model.data.data_prefix=[1.0," + testing::fixture_prefix() + "]",
           "model.tokenizer.model=" + testing::fixture("tokenizer.model"),
           "model.init_from=" + init,
           "exp_manager.explicit_log_dir=" + run,
           "exp_manager.create_checkpoint_callback=false",
           "trainer.precision=32",
           "trainer.max_steps=" + std::to_string(steps),
           "trainer.log_every_n_steps=1",
           "trainer.limit_val_batches=0",
           "model.micro_batch_size=2",
           "model.global_batch_size=4",
           "model.optim.lr=2e-3",
           "model.optim.weight_decay=0.1",
           "model.optim.sched.warmup_steps=" + std::to_string(warmup)};
  r.cfg.insert(r.cfg.end(), extra.begin(), extra.end());
  EXPECT_EQ(testing::run_capture(testing::llamatrain_bin() + " train" + quoted(r.cfg) + " 2>&1", &r.log), 0) << r.log;
  std::string out;
  EXPECT_EQ(testing::run_capture(testing::llamatrain_bin() + " data samples" + quoted(r.cfg) + " --first " +
                                     std::to_string(4 * steps) + " --json > " + (dir / "samples.jsonl"),
                                 &out),
            0)
      << out;
  return r;
}

// tools/reference/train_curve.py on that run's samples and learning rates, with `freeze` arguments.
nlohmann::json reference_curve(const TempDir& dir, const std::string& init, const std::string& run, int steps,
                               const std::string& freeze) {
  const std::string py = testing::system_python() + " " + testing::source_path("tools/reference/train_curve.py") +
                         " --hf " + init + " --samples " + (dir / "samples.jsonl") + " --metrics " + run +
                         "/metrics.jsonl --steps " + std::to_string(steps) +
                         " --micro-batch 2 --global-batch 4 --clip 1.0 --weight-decay 0.1 --betas 0.9 0.95 "
                         "--eps 1e-8" +
                         freeze;
  std::string o;
  EXPECT_EQ(testing::run_capture(py + " 2>/dev/null", &o), 0) << o;
  return nlohmann::json::parse(o);
}

// The largest relative gaps over the steps of a run's metrics.jsonl (`ours`): its loss and grad norm
// against the reference's, and the reference's loss against `other`'s (the reference freezing less:
// the comparison is only as strong as that gap is large).
struct CurveGaps {
  double loss = 0, grad_norm = 0, apart = 0;
};
CurveGaps curve_gaps(const std::vector<nlohmann::json>& ours, const nlohmann::json& ref, const nlohmann::json& other) {
  CurveGaps g;
  for (size_t s = 0; s < ours.size(); s++) {
    const double a = obs::metric_value(ours[s], "loss"), b = ref["loss"][s].get<double>();
    g.loss = std::max(g.loss, std::fabs(a - b) / std::fabs(b));
    const double ga = obs::metric_value(ours[s], "grad_norm"), gb = ref["grad_norm"][s].get<double>();
    g.grad_norm = std::max(g.grad_norm, std::fabs(ga - gb) / std::fabs(gb));
    g.apart = std::max(g.apart, std::fabs(b - other["loss"][s].get<double>()) / std::fabs(b));
  }
  return g;
}

TEST(FreezeTrain, LossCurveMatchesPyTorchWithRequiresGradFalse) {
  if (auto why = testing::python_missing({"torch", "numpy"}); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string init = write_init(dir.path()), run = dir / "run";
  const int steps = 20;
  run_for_reference(dir, init, run, steps, 5,
                    {"model.freeze=[model.layers.*.self_attn.*,model.layers.*.mlp.*,model.embed_tokens.weight]"});
  const auto ref = reference_curve(
      dir, init, run, steps, " --freeze 'model.layers.*.self_attn.*' 'model.layers.*.mlp.*' model.embed_tokens.weight");
  const auto unfrozen = reference_curve(dir, init, run, steps, "");
  const auto ours = obs::read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(ours.size(), size_t(steps));
  const CurveGaps gap = curve_gaps(ours, ref, unfrozen);
  EXPECT_LE(gap.loss, 1e-4);
  EXPECT_LE(gap.grad_norm, 1e-3);  // the norm of the trainable gradients only
  EXPECT_GT(gap.apart, 1e-3) << "freezing changed nothing in the reference: the comparison would be weak";
}

// Parts and embedding_lr against the PyTorch reference, which freezes the same HF parameters (one
// layer's, q_proj of every layer) with requires_grad False, keeps the embedding's first 100 rows by
// zeroing their gradient and restoring them after each step, and trains embed_tokens and lm_head in a
// parameter group at the logged embedding_lr.
const std::vector<std::string> kPartPatterns = {"model.layers.0.*", "model.layers.*.self_attn.q_proj.weight",
                                                "model.embed_tokens.weight[:100]"};
const std::string kPartFreeze =
    "model.freeze=[model.layers.0.*,model.layers.*.self_attn.q_proj.weight,\"model.embed_tokens.weight[:100]\"]";

// The frozen parts of an export: layer 0's and every q_proj's tensors whole, the embedding's first
// 100 rows (C = 64).
std::map<std::string, std::vector<float>> frozen_parts_of(const std::map<std::string, std::vector<float>>& w) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [t, v] : w) {
    if (t.rfind("model.layers.0.", 0) == 0 || t.find("q_proj") != std::string::npos) out[t] = v;
    if (t == "model.embed_tokens.weight") out[t] = std::vector<float>(v.begin(), v.begin() + 100 * 64);
  }
  EXPECT_EQ(out.size(), 11u) << "layer 0's 9 tensors, layer 1's q_proj and the embedding";
  return out;
}

TEST(FreezeTrain, PartsAndEmbeddingLrMatchPyTorch) {
  if (auto why = testing::python_missing({"torch", "numpy"}); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string init = write_init(dir.path()), run = dir / "run";
  const int steps = 16;
  const CurveRun r =
      run_for_reference(dir, init, run, steps, 4, {"model.optim.embedding_lr=6e-3", "convert_to_hf=true", kPartFreeze});
  const std::string& out = r.log;
  // layer 0's 9 tensors and layer 1's q_proj whole, the embedding in part
  EXPECT_NE(out.find("frozen: 10 tensors and part of 1 other, "), std::string::npos) << out;
  EXPECT_NE(out.find("embedding and output layer: peak learning rate 6.000e-03, 3x the others'"), std::string::npos)
      << out;
  // `llamatrain plan` says the same before the run.
  std::string plan;
  ASSERT_EQ(testing::run_capture(testing::llamatrain_bin() + " plan" + quoted(r.cfg), &plan), 0) << plan;
  EXPECT_NE(plan.find("PASS freeze   10 tensors and part of 1 other, "), std::string::npos) << plan;
  EXPECT_NE(plan.find("(parts keep their gradient buffer, not their moments)"), std::string::npos) << plan;
  const auto ref = reference_curve(dir, init, run, steps, " --freeze" + quoted(kPartPatterns));
  const auto rows_free =
      reference_curve(dir, init, run, steps, " --freeze 'model.layers.0.*' 'model.layers.*.self_attn.q_proj.weight'");
  const auto ours = obs::read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(ours.size(), size_t(steps));
  for (const auto& rec : ours)
    EXPECT_DOUBLE_EQ(obs::metric_value(rec, "embedding_lr"), 3 * obs::metric_value(rec, "lr"));
  const CurveGaps gap = curve_gaps(ours, ref, rows_free);
  EXPECT_LE(gap.loss, 1e-4);
  EXPECT_LE(gap.grad_norm, 1e-3);
  EXPECT_GT(gap.apart, 1e-5) << "keeping the rows changed nothing in the reference: the comparison would be weak";
  // The export keeps the frozen parts' bits: layer 0, every q_proj, the embedding's first 100 rows.
  const auto start = checkpoint_tensors(init), end = checkpoint_tensors(run + "/hf");
  const auto kept = frozen_parts_of(start), got = frozen_parts_of(end);
  for (const auto& [name, w] : kept) EXPECT_TRUE(testing::bitwise_equal(name, got.at(name), w));
  for (const auto& [name, w] : start)
    if (kept.count(name) == 0 || kept.at(name).size() < w.size()) {  // not frozen whole: it trained
      EXPECT_GT(testing::max_difference(end.at(name), w).max_abs, 0.0) << name << " did not train";
    }
}

// The same parts and embedding_lr under TP2 (q_proj's rows split by heads, the embedding's by
// vocabulary), PP2 (layer 0 on the first stage) and DP2 with ZeRO-1 (shards that cut the parts):
// one process's loss curve and the same frozen bits; the record in trainer_state.json.
TEST(FreezeTrain, PartsUnderEveryLayoutEqualOneProcess) {
  TempDir dir;
  const std::string init = write_init(dir.path());
  const std::vector<std::string> common = {"trainer.max_steps=4",  "model.init_from=" + init,
                                           "model.optim.eps=1e-5", "model.optim.embedding_lr=1e-3",
                                           "convert_to_hf=true",   kPartFreeze};
  auto train = [&](int ranks, const std::string& name, std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    const std::string log = dir / name;
    return run_in(log, testing::mpi_train_argv(MPIEXEC, ranks, log, extra));
  };
  const RunResult one = train(0, "one", {});
  ASSERT_EQ(one.status, 0) << one.log;
  const auto reference = losses(dir / "one");
  ASSERT_EQ(reference.size(), 4u);
  const auto state = nlohmann::json::parse(testing::read_file(dir / "one/checkpoints/step_4/trainer_state.json"));
  ASSERT_EQ(state["frozen_parts"].size(), 7u) << state.dump();
  EXPECT_EQ(state["frozen_parts"][0]["tensor"], "wte");
  EXPECT_EQ(state["frozen_parts"][0]["elements"], nlohmann::json::array({0, 100 * 64}));
  const auto kept = frozen_parts_of(checkpoint_tensors(init)), ref_end = checkpoint_tensors(dir / "one/hf");
  for (const auto& [name, extra] :
       std::vector<std::pair<std::string, std::vector<std::string>>>{{"tp2", {"model.tensor_model_parallel_size=2"}},
                                                                     {"pp2", {"model.pipeline_model_parallel_size=2"}},
                                                                     {"dp2", {"model.distributed_optimizer=true"}}}) {
    SCOPED_TRACE(name);
    const RunResult r = train(2, name, extra);
    ASSERT_EQ(r.status, 0) << r.log;
    const auto curve = losses(dir / name);
    ASSERT_EQ(curve.size(), 4u);
    for (const auto& [step, loss] : curve) EXPECT_NEAR(loss, reference.at(step), 1e-5 * reference.at(step)) << step;
    const auto w = checkpoint_tensors(dir / (name + "/hf"));
    const auto got = frozen_parts_of(w);
    for (const auto& [t, v] : kept) EXPECT_TRUE(testing::bitwise_equal(t, got.at(t), v));
    for (const auto& [t, v] : w)
      if (kept.count(t) == 0) {
        EXPECT_LE(testing::max_difference(v, ref_end.at(t)).max_abs, 1e-4) << t;
      }
  }
}

// In bf16-mixed (fp32 master weights: the parts keep the init's bits) and bf16 with stochastic
// rounding (bf16 weights: the parts keep the init rounded to bf16 once, at load), one process, TP2 and
// DP2 with ZeRO-1 checkpoint the same frozen bits.
TEST(FreezeTrain, PartsKeepTheirBitsInBf16UnderTpAndZero1) {
  TempDir dir;
  const std::string init = write_init(dir.path());
  const auto start = frozen_parts_of(checkpoint_tensors(init));
  for (const std::string precision : {"bf16-mixed", "bf16"}) {
    SCOPED_TRACE(precision);
    std::map<std::string, std::vector<float>> want = start;
    if (precision == "bf16")
      for (auto& [t, v] : want)
        for (float& x : v) x = to_float(to_bf16(x));
    for (const auto& [name, layout] :
         std::vector<std::pair<std::string, std::vector<std::string>>>{{"one", {}},
                                                                       {"tp2", {"model.tensor_model_parallel_size=2"}},
                                                                       {"dp2", {"model.distributed_optimizer=true"}}}) {
      SCOPED_TRACE(name);
      std::vector<std::string> extra = {"trainer.max_steps=3", "model.init_from=" + init,
                                        "trainer.precision=" + precision, "model.optim.embedding_lr=1e-3", kPartFreeze};
      extra.insert(extra.end(), layout.begin(), layout.end());
      const std::string log = dir / (precision + "_" + name);
      const RunResult r = run_in(log, testing::mpi_train_argv(MPIEXEC, name == "one" ? 0 : 2, log, extra));
      ASSERT_EQ(r.status, 0) << r.log;
      const auto all = checkpoint_tensors(log + "/checkpoints/step_3");
      const auto got = frozen_parts_of(all);
      ASSERT_EQ(got.size(), want.size());
      for (const auto& [t, v] : want) EXPECT_TRUE(testing::bitwise_equal(t, got.at(t), v));
      // and the rest trained
      EXPECT_GT(testing::max_difference(all.at("model.layers.1.mlp.down_proj.weight"),
                                        checkpoint_tensors(init).at("model.layers.1.mlp.down_proj.weight"))
                    .max_abs,
                0.0);
    }
  }
}

// TP2, PP2 (untied and tied) and DP2 with ZeRO-1 train the same frozen model as one process: the
// same loss curve, and frozen tensors with the same bits; the TP2 checkpoint then resumes on one
// process with everything trainable.
TEST(FreezeTrain, TensorPipelineAndDataParallelRunsEqualOneProcess) {
  TempDir dir;
  const std::vector<std::string> common = {"trainer.max_steps=6", "model.make_vocab_size_divisible_by=16",
                                           "model.optim.eps=1e-5", kFreeze, "convert_to_hf=true"};
  auto train = [&](int ranks, const std::string& name, std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    const std::string log = dir / name;
    return run_in(log, testing::mpi_train_argv(MPIEXEC, ranks, log, extra));
  };
  const std::string tied = "model.share_embeddings_and_output_weights=true";
  struct Case {
    std::string name, reference, layout;
    std::vector<std::string> extra;
  };
  // The tied case: the embedding's gradient summed over the first and last stage.
  const std::vector<Case> cases = {
      {"tp2", "one", "data 1 x tensor 2 x pipeline 1", {"model.tensor_model_parallel_size=2"}},
      {"pp2", "one", "data 1 x tensor 1 x pipeline 2", {"model.pipeline_model_parallel_size=2"}},
      {"dp2", "one", "optimizer state sharded (ZeRO-1)", {"model.distributed_optimizer=true"}},
      {"pp2_tied", "one_tied", "data 1 x tensor 1 x pipeline 2", {"model.pipeline_model_parallel_size=2", tied}}};
  std::map<std::string, std::map<int64_t, double>> reference;
  std::map<std::string, std::map<std::string, std::vector<float>>> start;
  for (const auto& [name, extra] :
       std::vector<std::pair<std::string, std::vector<std::string>>>{{"one", {}}, {"one_tied", {tied}}}) {
    const RunResult r = train(0, name, extra);
    ASSERT_EQ(r.status, 0) << r.log;
    reference[name] = losses(dir / name);
    ASSERT_EQ(reference[name].size(), 6u);
    start[name] = checkpoint_tensors(dir / (name + "/hf"));
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RunResult r = train(2, c.name, c.extra);
    ASSERT_EQ(r.status, 0) << r.log;
    EXPECT_NE(r.log.find(c.layout), std::string::npos) << r.log;
    const auto curve = losses(dir / c.name);
    const auto& one = reference[c.reference];
    ASSERT_EQ(curve.size(), 6u);
    for (const auto& [step, loss] : curve) EXPECT_NEAR(loss, one.at(step), 1e-5 * one.at(step)) << "step " << step;
    const auto w = checkpoint_tensors(dir / (c.name + "/hf"));
    for (const auto& [t, v] : start[c.reference])
      if (is_frozen_name(t)) {
        EXPECT_TRUE(testing::bitwise_equal(t, w.at(t), v));
      }
  }
  const RunResult r = train(
      0, "resumed",
      {"model.freeze=[]", "trainer.max_steps=8", "model.resume_from_checkpoint=" + (dir / "tp2/checkpoints/step_6")});
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("unfrozen since the checkpoint"), std::string::npos) << r.log;
  EXPECT_EQ(testing::steps_of(losses(dir / "resumed")), testing::step_range(7, 8));
}

}  // namespace
}  // namespace llamatrain
