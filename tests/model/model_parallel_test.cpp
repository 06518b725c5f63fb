// One training micro-step of a model split over tensor (TP), sequence (SP) and pipeline (PP)
// parallel ranks equals the same step on one rank: the loss, and every rank's gradient of every
// local tensor against the same elements of the single model's gradient (TensorShard maps them),
// after the model-parallel gradient sums (SP norm weights, tied embedding across stages). Ranks are
// threads over LocalCommunicator; the pipeline here runs one micro-batch by hand (the 1F1B schedule
// has its own tests). Also: recomputation under TP+SP changes nothing, bf16-mixed agrees loosely, a
// vocabulary padded for the layout has inert padding rows, and the architecture variants (q/k/v
// biases, a sliding window shorter than the sequence, llama3 RoPE scaling with head_dim != dim /
// heads) and packed documents (positions restarting, attention stopping at each document's start;
// SP's all-gathered attention takes the boundaries of the whole sequence) split the same way.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "model/llama.h"
#include "parallel/collective_checks.h"
#include "parallel/layout.h"
#include "parallel/local_communicator.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using parallel::Communicator;
using testing::bitwise_equal;

model::LlamaConfig config(bool tied) {
  return {.dim = 64,
          .ffn_dim = 96,
          .n_layers = 4,
          .n_heads = 4,
          .n_kv_heads = 2,
          .vocab_size = 128,
          .max_seq_len = 64,
          .norm_eps = 1e-5f,
          .tie_embeddings = tied};
}

constexpr int B = 2, T = 12;

// The variants, on config(tied)'s sizes: "bias" (Qwen2's q/k/v biases, tied), "window" (a window of
// 5 < T), "llama3" (llama3 scaling with an original context of 8 < T, head_dim 24 so H*D = 96 != 64).
model::LlamaConfig variant(const std::string& name) {
  model::LlamaConfig c = config(name == "bias");
  if (name == "bias") c.qkv_bias = true;
  if (name == "window" || name == "packed_window") c.sliding_window = 5;
  if (name == "llama3") {
    c.head_size = 24;
    c.rope_theta = 500000.0f;
    c.rope_scaling = {model::RopeScaling::Type::llama3, 8.0f, 1.0f, 4.0f, 8};
  }
  return c;
}

// The packed variants' documents: row 0 of lengths 5, 1, 6, row 1 of 3, 9 (positions restart at
// each); none for the others.
struct Docs {
  std::vector<int32_t> positions, starts;
  model::Documents view() const {
    return {positions.empty() ? nullptr : positions.data(), starts.empty() ? nullptr : starts.data()};
  }
};
Docs documents(const std::string& name) {
  Docs d;
  if (!name.starts_with("packed")) return d;
  for (const std::vector<int>& row : {std::vector<int>{5, 1, 6}, std::vector<int>{3, 9}}) {
    int at = 0;
    for (int n : row) {
      for (int k = 0; k < n; k++) d.positions.push_back(k), d.starts.push_back(at);
      at += n;
    }
    EXPECT_EQ(at, T);
  }
  return d;
}

// Random init leaves the biases at zero: give them values (a function of each element's place in the
// full tensor, so every layout sets the same ones) for the forward to use.
void set_biases(model::LlamaModel& m) {
  const model::ParamSpec* b = m.find_param("bqkv");
  if (b == nullptr) return;
  float* p = m.param_data() + b->offset;
  b->shard.for_each_run([&](int64_t local, int64_t full, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[local + i] = 0.2f * std::sin(0.7f * float(full + i) + 0.3f);
  });
  m.params_changed();
}

// B*T token ids in [0, V) from the Philox stream `stream` of seed 7; two of them -100 (ignored) if asked.
std::vector<int32_t> ids(int V, uint32_t stream, bool some_ignored) {
  std::vector<int32_t> t = testing::philox_tokens(B * T, V, 7, stream);
  if (some_ignored) t[3] = t[17] = -100;
  return t;
}

struct Layout {
  int tp = 1, pp = 1;
  bool sp = false;
  model::Recompute recompute = model::Recompute::none;
  model::Precision precision = model::Precision::fp32;
};

std::string name_of(const Layout& l) {
  return fmt::format("TP{} PP{}{} recompute {} {}", l.tp, l.pp, l.sp ? " SP" : "", model::recompute_name(l.recompute),
                     model::precision_name(l.precision));
}

// The single-rank step: loss and the full gradient arena.
struct Reference {
  float loss = 0;
  std::vector<float> grads;
  std::vector<model::ParamSpec> specs;
};

Reference reference(const model::LlamaConfig& c, model::Precision p, const std::vector<int32_t>& tokens,
                    const std::vector<int32_t>& targets, const model::Documents& docs = {}) {
  model::LlamaModel m(c, p, 5);
  m.init_random(0.1f, 0.05f);
  set_biases(m);
  m.zero_grad();
  Reference r;
  r.loss = m.forward_backward(tokens.data(), targets.data(), B, T, 1.0f, docs).loss;
  r.grads.assign(m.grad_data(), m.grad_data() + m.num_params());
  r.specs = m.param_specs();
  return r;
}

// What one rank of a layout computed in the micro-step: its loss (meaningful on the last pipeline
// stage), its local gradient arena (after the model-parallel sums) and the specs that place it.
struct RankResult {
  bool last_stage = false;
  float loss = 0;
  std::vector<float> grads;
  std::vector<model::ParamSpec> specs;
  double sum_squares = 0;       // this rank's part of the squared gradient norm
  int64_t padding = 0;          // elements of the vocabulary's padding rows (weights and gradients each)
  int64_t padding_nonzero = 0;  // of which nonzero, weights or gradients
};

// Runs one micro-step of the layout on threads; the ranks' results, by world rank.
std::vector<RankResult> run_layout(const model::LlamaConfig& c, const Layout& lay, const std::vector<int32_t>& tokens,
                                   const std::vector<int32_t>& targets, const model::Documents& docs = {}) {
  const int world = lay.tp * lay.pp;
  std::vector<RankResult> results(static_cast<size_t>(world));  // each rank writes its own element
  parallel::run_local_ranks(
      world,
      [&](Communicator& w) {
        const auto layout = parallel::ParallelLayout::make(world, lay.tp, lay.pp, w.rank());
        auto groups = parallel::ParallelGroups::make(w, layout);
        const auto plan = model::ShardPlan::make(c, lay.tp, layout.tp_rank, lay.pp, layout.pp_rank, lay.sp);
        model::LlamaModel m(c, lay.precision, 5, plan, groups.tp.get());
        m.set_recompute(lay.recompute);
        m.init_random(0.1f, 0.05f);
        set_biases(m);
        m.zero_grad();
        const size_t act = size_t(m.stage_tokens(B, T) * c.dim);
        std::vector<float> buf(act);
        Communicator& pp = *groups.pp;
        // One micro-batch by hand: forwards down the stages, backwards up.
        const float* input = nullptr;
        if (!plan.first_stage()) {
          pp.irecv(buf.data(), act * 4, pp.rank() - 1, 0).wait();
          input = buf.data();
        }
        m.stage_forward(0, tokens.data(), input, B, T, docs);
        if (!plan.last_stage()) pp.isend(m.stage_output(0), act * 4, pp.rank() + 1, 0).wait();
        const float* dout = nullptr;
        std::vector<float> gbuf(act);
        if (!plan.last_stage()) {
          pp.irecv(gbuf.data(), act * 4, pp.rank() + 1, 1).wait();
          dout = gbuf.data();
        }
        const auto stats = m.stage_backward(0, tokens.data(), targets.data(), dout, 1.0f);
        if (!plan.first_stage()) pp.isend(m.stage_input_grad(), act * 4, pp.rank() - 1, 1).wait();
        m.reduce_model_parallel_grads(groups.embedding.get());
        RankResult& r = results[size_t(w.rank())];
        r.last_stage = plan.last_stage();
        r.loss = stats.loss;
        r.grads.assign(m.grad_data(), m.grad_data() + m.num_params());
        r.specs = m.param_specs();
        r.sum_squares = m.grad_sum_squares(0, m.num_params());
        for (const auto& s : r.specs)
          for (int64_t i = s.offset + s.shard.numel(); i < s.offset + s.numel; i++) {
            r.padding++;
            r.padding_nonzero += m.param_data()[i] != 0.0f || m.grad_data()[i] != 0.0f;
          }
      },
      parallel::testing::test_options());
  return results;
}

// The last stage's loss within tol of the single rank's, and every local gradient element against the
// reference's element at the same full position, within tol of that tensor's largest.
void expect_matches_one_rank(const std::vector<RankResult>& ranks, const Reference& ref, float tol,
                             const std::string& name) {
  int64_t compared = 0;
  for (size_t rank = 0; rank < ranks.size(); rank++) {
    const RankResult& r = ranks[rank];
    if (r.last_stage) {
      EXPECT_NEAR(r.loss, ref.loss, tol * std::abs(ref.loss)) << name;
    }
    double worst = 0;
    for (const auto& s : r.specs) {
      const model::ParamSpec* full = nullptr;
      for (const auto& f : ref.specs) {
        if (f.name == s.name) full = &f;
      }
      if (!full) {
        ADD_FAILURE() << s.name << " not in the single model";
        continue;
      }
      double scale = 0;
      for (int64_t i = 0; i < full->numel; i++)
        scale = std::max(scale, double(std::abs(ref.grads[size_t(full->offset + i)])));
      const float* g = r.grads.data() + s.offset;
      s.shard.for_each_run([&](int64_t local, int64_t f, int64_t len) {
        for (int64_t i = 0; i < len; i++) {
          const double d = std::abs(double(g[local + i]) - ref.grads[size_t(full->offset + f + i)]);
          worst = std::max(worst, d / std::max(scale, 1e-30));
        }
        compared += len;
      });
    }
    EXPECT_LE(worst, tol) << name << " rank " << rank << ": worst gradient difference, relative to "
                          << "the tensor's largest";
  }
  // Every parameter was compared at least once (replicas count again; padding rows are no parameters).
  int64_t params = 0;
  for (const auto& f : ref.specs) params += f.shard.numel();
  EXPECT_GE(compared, params) << name;
}

void check_layout(const model::LlamaConfig& c, const Layout& lay, const Reference& ref,
                  const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, float tol,
                  const model::Documents& docs = {}) {
  expect_matches_one_rank(run_layout(c, lay, tokens, targets, docs), ref, tol, name_of(lay));
}

class ModelParallel : public ::testing::TestWithParam<bool> {};

TEST_P(ModelParallel, StepEqualsOneRank) {
  const auto c = config(GetParam());
  const auto tokens = ids(c.vocab_size, 1, false), targets = ids(c.vocab_size, 2, true);
  const Reference ref = reference(c, model::Precision::fp32, tokens, targets);
  // TP 4 over 2 kv heads replicates each kv head on two ranks.
  for (const Layout& lay :
       {Layout{2, 1, false}, Layout{2, 1, true}, Layout{2, 4, true}, Layout{1, 2, false}, Layout{1, 4, false},
        Layout{2, 2, true}, Layout{2, 2, false}, Layout{4, 1, false}, Layout{4, 2, true}})
    check_layout(c, lay, ref, tokens, targets, 2e-5f);
}

TEST_P(ModelParallel, RecomputeUnderTensorAndSequenceParallelism) {
  // Recomputation reruns the same kernels on the same inputs (model/llama.h), under TP and SP too: each
  // rank's loss and every gradient are bitwise those of the same layout saving everything. Each run
  // also matches the single rank, within the tolerance of the split's summation order.
  const auto c = config(GetParam());
  const auto tokens = ids(c.vocab_size, 3, false), targets = ids(c.vocab_size, 4, false);
  const Reference ref = reference(c, model::Precision::fp32, tokens, targets);
  const Layout saved{2, 2, true, model::Recompute::none};
  const std::vector<RankResult> want = run_layout(c, saved, tokens, targets);
  expect_matches_one_rank(want, ref, 2e-5f, name_of(saved));
  for (auto r : {model::Recompute::selective, model::Recompute::full}) {
    const Layout lay{2, 2, true, r};
    const std::vector<RankResult> got = run_layout(c, lay, tokens, targets);
    expect_matches_one_rank(got, ref, 2e-5f, name_of(lay));
    ASSERT_EQ(got.size(), want.size());
    for (size_t rank = 0; rank < got.size(); rank++) {
      const std::string where = name_of(lay) + " rank " + std::to_string(rank);
      const std::string against = " (want: " + name_of(saved) + ")";
      EXPECT_TRUE(bitwise_equal(where + " loss" + against, std::vector<float>{got[rank].loss},
                                std::vector<float>{want[rank].loss}));
      ASSERT_EQ(got[rank].specs.size(), want[rank].specs.size()) << where;
      ASSERT_FALSE(got[rank].specs.empty()) << where;
      for (const auto& s : got[rank].specs) {
        const auto begin = got[rank].grads.begin() + s.offset, wbegin = want[rank].grads.begin() + s.offset;
        EXPECT_TRUE(bitwise_equal(where + " d" + s.name + against, std::vector<float>(begin, begin + s.numel),
                                  std::vector<float>(wbegin, wbegin + s.numel)));
      }
    }
  }
}

TEST_P(ModelParallel, Bf16MixedAgreesWithItsSingleRank) {
  const auto c = config(GetParam());
  const auto tokens = ids(c.vocab_size, 5, false), targets = ids(c.vocab_size, 6, false);
  const Reference ref = reference(c, model::Precision::bf16_mixed, tokens, targets);
  // bf16 operands: the split changes summation order, so gradients agree to bf16's precision.
  check_layout(c, Layout{2, 1, true, model::Recompute::none, model::Precision::bf16_mixed}, ref, tokens, targets,
               2e-2f);
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, ModelParallel, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "tied" : "untied"; });

class ModelParallelVariant : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelParallelVariant, StepEqualsOneRank) {
  // bqkv splits as wqkv's rows (TP 4 replicates the kv heads and their biases), the window and the
  // scaled RoPE act within each rank's heads, and head_dim sizes o_proj's split columns.
  const auto c = variant(GetParam());
  const auto tokens = ids(c.vocab_size, 7, false), targets = ids(c.vocab_size, 8, true);
  const Docs docs = documents(GetParam());
  const Reference ref = reference(c, model::Precision::fp32, tokens, targets, docs.view());
  for (const Layout& lay :
       {Layout{2, 1, false}, Layout{2, 1, true}, Layout{1, 2, false}, Layout{2, 2, true}, Layout{4, 1, false},
        Layout{2, 2, false, model::Recompute::selective}, Layout{2, 2, true, model::Recompute::full}})
    check_layout(c, lay, ref, tokens, targets, 2e-5f, docs.view());
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelParallelVariant,
                         ::testing::Values("bias", "window", "llama3", "packed", "packed_window"),
                         [](const auto& info) { return info.param; });

TEST(ModelParallel, PaddedVocabularyRowsAreInert) {
  // Vocabularies that no padding multiple divides: the embedding and lm head hold vocab_size rounded
  // up to vocab_multiple x TP rows, a different count under each layout (1000: 1000, 1008, 1024 rows;
  // 49953: 49960, 49968, 49984; 60 at multiple 32: 64 rows on one rank, and TP2's second rank holds
  // padding only). The step still equals the single rank's (loss, every real gradient element, the
  // gradient norm), and the padding rows' weights and gradients stay exactly 0.
  struct Case {
    int vocab, multiple;
  };
  for (const Case& k : {Case{1000, 8}, Case{49953, 8}, Case{60, 32}}) {
    model::LlamaConfig c = config(false);
    c.dim = 32, c.vocab_size = k.vocab, c.vocab_multiple = k.multiple;
    const std::string what = fmt::format("vocabulary {} padded to multiples of {} x TP", k.vocab, k.multiple);
    const auto tokens = ids(c.vocab_size, 7, false), targets = ids(c.vocab_size, 8, true);
    const Reference ref = reference(c, model::Precision::fp32, tokens, targets);
    double ref_squares = 0;
    for (float g : ref.grads) ref_squares += double(g) * g;
    for (const Layout& lay : {Layout{2, 1, false}, Layout{4, 1, true}, Layout{2, 2, true}}) {
      const std::string name = what + ", " + name_of(lay);
      const auto ranks = run_layout(c, lay, tokens, targets);
      expect_matches_one_rank(ranks, ref, 2e-5f, name);
      double squares = 0;
      int64_t padding = 0, nonzero = 0;
      for (const RankResult& r : ranks) {
        squares += r.sum_squares;
        padding += r.padding;
        nonzero += r.padding_nonzero;
      }
      EXPECT_NEAR(std::sqrt(squares), std::sqrt(ref_squares), 1e-5 * std::sqrt(ref_squares)) << name;
      // Padding rows of the embedding (first stages) and the lm head (last stages): every TP rank's share.
      const int64_t rows = c.padded_vocab_size(lay.tp) - c.vocab_size;
      EXPECT_EQ(padding, 2 * rows * c.dim) << name;
      EXPECT_EQ(nonzero, 0) << name << ": padding weights or gradients that are not 0";
    }
  }
  // AdamW (weight decay on) keeps them exactly 0 in every precision, the bf16 copies included.
  for (auto p : {model::Precision::fp32, model::Precision::bf16_mixed, model::Precision::bf16_sr}) {
    model::LlamaConfig c = config(false);
    c.vocab_size = 1000, c.vocab_multiple = 64;  // 1024 rows
    model::LlamaModel m(c, p, 5);
    m.init_random(0.1f, 0.05f);
    const auto tokens = ids(c.vocab_size, 9, false), targets = ids(c.vocab_size, 10, false);
    model::AdamWConfig opt;
    for (int step = 1; step <= 3; step++) {
      m.zero_grad();
      m.forward_backward(tokens.data(), targets.data(), B, T);
      m.optimizer_step(opt, 1e-2f, step);
    }
    int64_t padding = 0, nonzero = 0;
    for (const auto& s : m.param_specs())
      for (int64_t i = s.offset + s.shard.numel(); i < s.offset + s.numel; i++) {
        padding++;
        nonzero += m.param_data()[i] != 0.0f;
      }
    EXPECT_EQ(padding, 2 * 24 * c.dim) << model::precision_name(p);
    EXPECT_EQ(nonzero, 0) << model::precision_name(p);
    // The logits the model computes are the real vocabulary's (the rows the padding would add are not there).
    m.forward(tokens.data(), nullptr, B, T);
    std::vector<float> logits(size_t(B) * T * c.vocab_size + 1, -1.0f);
    m.logits(logits.data());
    EXPECT_EQ(logits.back(), -1.0f) << "logits past (B*T, vocab_size)";
  }
  // Where the padding goes: the last rows of the table, so of the last ranks' blocks.
  model::LlamaConfig c = config(false);
  c.vocab_size = 60, c.vocab_multiple = 32;
  const auto d0 = model::local_dims(c, model::ShardPlan::make(c, 2, 0, 1, 0, false));
  const auto d1 = model::local_dims(c, model::ShardPlan::make(c, 2, 1, 1, 0, false));
  EXPECT_EQ(d0.V, 32);
  EXPECT_EQ(d0.V_valid, 32);
  EXPECT_EQ(d1.vocab_begin, 32);
  EXPECT_EQ(d1.V_valid, 28);
  c.vocab_multiple = 64;
  EXPECT_EQ(model::local_dims(c, model::ShardPlan::make(c, 2, 1, 1, 0, false)).V_valid, 0);
  EXPECT_EQ(model::local_dims(c, model::ShardPlan::single(c)).V, 64);
}

TEST(ShardPlan, RejectsSplitsThatDoNotDivide) {
  auto c = config(false);
  EXPECT_THROW(model::ShardPlan::make(c, 3, 0, 1, 0, false), Error);  // 4 heads over 3
  {
    // 2 kv heads over 4 ranks: replicated, ranks 0-1 on kv head 0 (rank 0 owns it), ranks 2-3 on 1.
    for (int r = 0; r < 4; r++) {
      const auto d = model::local_dims(config(false), model::ShardPlan::make(config(false), 4, r, 1, 0, false));
      EXPECT_EQ(d.Hkv, 1);
      EXPECT_EQ(d.kv_head_begin, r / 2);
      EXPECT_EQ(d.kv_replicas, 2);
      EXPECT_EQ(d.kv_owner, r % 2 == 0);
    }
    // 3 kv heads over 2 ranks: neither divides the other.
    model::LlamaConfig k = config(false);
    k.dim = 48, k.n_heads = 6, k.n_kv_heads = 3;
    EXPECT_THROW(model::ShardPlan::make(k, 2, 0, 1, 0, false), Error);
  }
  c.vocab_size = 129;  // any vocabulary: padded to 130 rows, 65 per rank, the second rank's last is padding
  EXPECT_EQ(model::local_dims(c, model::ShardPlan::make(c, 2, 1, 1, 0, false)).V_valid, 64);
  EXPECT_THROW(model::ShardPlan::make(config(false), 1, 0, 5, 0, false), Error);  // 5 stages, 4 layers
  // Without an explicit split the stages share the layers evenly (Megatron's rule, model::pipeline_split).
  EXPECT_THROW(model::ShardPlan::make(config(false), 1, 0, 3, 0, false), Error);  // 3 stages, 4 layers
  const auto p = model::ShardPlan::make(config(false), 1, 0, 3, 0, false, {2, 1, 1});
  EXPECT_EQ(p.layer_begin, 0);
  EXPECT_EQ(p.layer_end, 2);
  const auto q = model::ShardPlan::make(config(false), 1, 0, 2, 1, false, {1, 3});
  EXPECT_EQ(q.layer_begin, 1);
  EXPECT_EQ(q.layer_end, 4);
  EXPECT_THROW(model::ShardPlan::make(config(false), 1, 0, 2, 1, false, {1, 2}), Error);
}

TEST(TensorShard, CopyBetweenShardsMovesExactlyTheCommonElements) {
  // A (2, 6, 5) tensor: source holds layer 1, rows {1..2, 4..5}, columns 1..3, of which the flat range
  // [2, 10); the destination holds all layers, rows 2..5, columns 0..4 (whole rows).
  model::TensorShard src = model::TensorShard::whole_tensor(2, 6, 5), dst = model::TensorShard::whole_tensor(2, 6, 5);
  src.layer_begin = 1, src.layers = 1, src.rows = {{1, 2}, {4, 2}}, src.col_begin = 1, src.cols = 3;
  dst.rows = {{2, 4}};
  std::vector<float> s(size_t(src.numel()));
  std::vector<int64_t> full_of(s.size());
  src.for_each_run([&](int64_t local, int64_t full, int64_t n) {
    for (int64_t i = 0; i < n; i++) full_of[size_t(local + i)] = full + i;
  });
  for (size_t i = 0; i < s.size(); i++) s[i] = float(full_of[i]);
  std::vector<float> d(size_t(dst.numel()), -1.0f);
  const int64_t copied = model::copy_between_shards(d.data(), dst, 0, dst.numel(), s.data() + 2, src, 2, 8);
  int64_t expected = 0;
  for (int64_t i = 2; i < 10; i++) {
    const int64_t f = full_of[size_t(i)];
    const int64_t at = dst.local_offset(f);
    if (at < 0) continue;
    expected++;
    EXPECT_EQ(d[size_t(at)], float(f));
  }
  EXPECT_EQ(copied, expected);
  int64_t written = 0;
  for (float v : d) written += v >= 0;
  EXPECT_EQ(written, expected);
  EXPECT_EQ(model::TensorShard::from_json(src.to_json()).to_json(), src.to_json());
  EXPECT_THROW(model::TensorShard::from_json(R"({"full":[1,2,3],"layers":[0,2],"rows":[],"cols":[0,3]})"), Error);
}

}  // namespace
}  // namespace llamatrain
