// Packed fine-tuning samples are exact: fine-tuning examples packed into one sample (data::make_sft_sample:
// positions and documents restarting per example) give each example the loss and the gradients it
// gets alone, one padded example per sample; the summed losses and gradients agree within fp32
// rounding (1e-5 of each tensor's scale), on the reference and the CPU backend, for MHA, GQA and a
// sliding window, in one micro-batch of several packed rows. Without the document mask they do not
// (the check can fail). The model refuses document starts that describe no documents and positions
// outside the sequence, by name. (The packed goldens hold the model to PyTorch's explicit mask;
// tests/model/model_parallel_test.cpp holds TP, SP and PP to one rank.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/sft.h"
#include "model/llama.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using model::Device;

model::LlamaConfig config(const std::string& kind) {
  model::LlamaConfig c{.dim = 48,
                       .ffn_dim = 96,
                       .n_layers = 2,
                       .n_heads = 4,
                       .n_kv_heads = 2,
                       .vocab_size = 101,
                       .max_seq_len = 128,
                       .norm_eps = 1e-5f};
  if (kind == "mha") c.n_kv_heads = 4;
  if (kind == "window") c.sliding_window = 6;
  return c;
}

// Examples of 3..40 ids from a fixed stream; the loss covers ids from prompt_len on.
std::vector<data::SftExample> examples(int n, int V) {
  const std::vector<int32_t> ids = testing::philox_tokens(4000, V, 17, 3);
  std::vector<data::SftExample> out;
  size_t at = 0;
  for (int e = 0; e < n; e++) {
    data::SftExample ex;
    const int len = 3 + int((ids[at] * 7 + e * 13) % 38);
    ex.text.assign(ids.begin() + int64_t(at), ids.begin() + int64_t(at + size_t(len)));
    ex.prompt_len = 1 + e % std::max(1, len - 2);
    at += size_t(len);
    out.push_back(std::move(ex));
  }
  return out;
}

struct Sums {
  double loss = 0;  // summed over the valid targets
  int64_t valid = 0;
  std::vector<double> grads;  // summed over the valid targets
};

// The micro-batch's loss sum and gradient sum (mean times count) on a fresh copy of the weights.
void add_step(model::LlamaModel& m, const std::vector<data::GptSample>& samples, bool with_documents, Sums* s) {
  const int B = int(samples.size()), T = int(samples[0].tokens.size());
  std::vector<int32_t> tokens, targets, positions, starts;
  for (const auto& smp : samples)
    for (int t = 0; t < T; t++) {
      tokens.push_back(smp.tokens[size_t(t)]);
      targets.push_back(smp.loss_mask[size_t(t)] > 0 ? smp.labels[size_t(t)] : -100);
      positions.push_back(smp.position_ids[size_t(t)]);
      starts.push_back(smp.doc_start[size_t(t)]);
    }
  m.zero_grad();
  const model::Documents docs{positions.data(), with_documents ? starts.data() : nullptr};
  const auto st = m.forward_backward(tokens.data(), targets.data(), B, T, 1.0f, docs);
  std::vector<float> g(size_t(m.num_trainable()));
  m.copy_grads_to_host(g.data());
  if (s->grads.empty()) s->grads.assign(g.size(), 0.0);
  for (size_t i = 0; i < g.size(); i++) s->grads[i] += double(g[i]) * double(st.num_valid);
  s->loss += double(st.loss) * double(st.num_valid);
  s->valid += st.num_valid;
}

// Packed (rows of several examples, B rows in one micro-batch) against one example per sample.
// Returns the worst gradient error relative to the gradients' scale.
double packed_against_separate(const model::LlamaConfig& c, Device device, bool with_documents, double* loss_err) {
  const int T = 64;
  data::SftConfig cfg;
  cfg.seq_length = T;
  cfg.pad_id = 0;
  const auto exs = examples(14, c.vocab_size);
  const auto groups = data::pack_sft_examples(exs, T + 1);
  EXPECT_LT(groups.size(), exs.size() / 2) << "most samples hold several examples";
  model::LlamaModel m(c, model::Precision::fp32, 9, model::ShardPlan::make(c, 1, 0, 1, 0, false), nullptr, device);
  m.init_random(0.1f, 0.05f);
  Sums packed, separate;
  std::vector<data::GptSample> rows;
  for (const auto& g : groups) {
    std::vector<const data::SftExample*> members;
    for (int64_t e : g) members.push_back(&exs[size_t(e)]);
    data::make_sft_sample(&rows.emplace_back(), members, cfg);
  }
  add_step(m, rows, with_documents, &packed);  // one micro-batch of every packed row
  for (const auto& ex : exs) {
    std::vector<data::GptSample> one(1);
    data::make_sft_sample(&one[0], {&ex}, cfg);
    add_step(m, one, false, &separate);
  }
  EXPECT_EQ(packed.valid, separate.valid);
  *loss_err = std::abs(packed.loss - separate.loss) / separate.loss;
  double scale = 0, worst = 0;
  for (double g : separate.grads) scale = std::max(scale, std::abs(g));
  for (size_t i = 0; i < packed.grads.size(); i++)
    worst = std::max(worst, std::abs(packed.grads[i] - separate.grads[i]));
  return worst / scale;
}

class Packing : public ::testing::TestWithParam<std::tuple<std::string, Device>> {};

TEST_P(Packing, PackedExamplesEqualSeparateOnes) {
  const auto& [kind, device] = GetParam();
  double loss_err = 0;
  const double grad_err = packed_against_separate(config(kind), device, true, &loss_err);
  EXPECT_LT(loss_err, 1e-5);
  EXPECT_LT(grad_err, 1e-5);
  std::printf("%s on %s: loss sum relative error %.2e, worst gradient %.2e of the scale\n", kind.c_str(),
              model::device_name(device), loss_err, grad_err);
}

INSTANTIATE_TEST_SUITE_P(Kinds, Packing,
                         ::testing::Combine(::testing::Values("gqa", "mha", "window"),
                                            ::testing::Values(Device::cpu, Device::ref)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + model::device_name(std::get<1>(info.param));
                         });

TEST(Packing, WithoutTheDocumentMaskExamplesSeeTheirNeighbours) {
  double loss_err = 0;
  const double grad_err = packed_against_separate(config("gqa"), Device::cpu, false, &loss_err);
  EXPECT_GT(std::max(loss_err, grad_err), 1e-3) << "the comparison above must be able to fail";
}

TEST(Packing, BadDocumentsAndPositionsAreErrors) {
  model::LlamaModel m(config("gqa"), model::Precision::fp32, 9);
  m.init_random(0.1f);
  const int T = 6;
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6}, targets = {2, 3, 4, 5, 6, 7};
  const std::vector<int32_t> good_pos = {0, 1, 2, 0, 1, 2};
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{1, 1, 1, 1, 1, 1}, std::vector<int32_t>{0, 0, 0, 2, 2, 2},
        std::vector<int32_t>{0, 0, 2, 2, 0, 0}}) {
    try {
      m.forward(tokens.data(), targets.data(), 1, T, {good_pos.data(), bad.data()});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("document start"), std::string::npos) << e.what();
    }
  }
  const std::vector<int32_t> bad_pos = {0, 1, 2, 6, 1, 2};
  EXPECT_THROW(m.forward(tokens.data(), targets.data(), 1, T, {bad_pos.data(), nullptr}), Error);
  // After a refusal the model still runs a plain batch.
  EXPECT_TRUE(std::isfinite(m.forward(tokens.data(), targets.data(), 1, T).loss));
}

}  // namespace
}  // namespace llamatrain
