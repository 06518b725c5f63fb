// `export` and `generate` through the binary on the other families' folders
// (tests/golden/tiny_qwen2, tiny_llama3 from tools/reference/make_tiny_hf.py): an export of the folder
// itself writes the same model.safetensors byte for byte and copies tokenizer.json; generate stops on
// any id of an eos_token_id list and adds BOS only when config.json has one; a short training run
// from each folder (its tokenizer.json preprocessing the fixture corpus) exports a folder with the
// source's architecture keys, tokenizer files and tensor layout.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/llama.h"
#include "test_util.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::run_cli;
using testing::TempDir;

const std::string kTinyHf = testing::source_path("tests/golden/tiny_hf");
const std::string kQwen2 = testing::source_path("tests/golden/tiny_qwen2");
const std::string kLlama3 = testing::source_path("tests/golden/tiny_llama3");
const std::string kCorpus = testing::fixture("corpus.jsonl");

std::vector<int> parse_ids(const std::string& text) {
  std::vector<int> ids;
  std::istringstream in(text);
  for (int id; in >> id;) ids.push_back(id);
  return ids;
}

TEST(HfFamilies, ExportOfAFolderWritesItsWeightsByteForByte) {
  struct Case {
    std::string dir, dtype;
  };
  for (const Case& c : {Case{kLlama3, "fp32"}, Case{kQwen2, "bf16"}}) {
    SCOPED_TRACE(c.dir);
    TempDir tmp;
    auto r = run_cli({"export", c.dir, "--hf", tmp / "out", "--dtype", c.dtype});
    ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
    EXPECT_NE(r.out.find("with tokenizer"), std::string::npos) << r.out;
    EXPECT_EQ(testing::slurp(tmp / "out/model.safetensors"), testing::slurp(c.dir + "/model.safetensors"));
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      EXPECT_EQ(testing::slurp(tmp / "out/" + std::string(f)), testing::slurp(c.dir + "/" + f)) << f;
    EXPECT_FALSE(fs::exists(tmp / "out/tokenizer.model"));
  }
}

// tiny_hf's greedy continuation (expected.json) with one of its ids added to an eos_token_id list:
// generation stops right there.
TEST(HfFamilies, GenerateStopsOnAnyIdOfAnEosList) {
  const json expected = json::parse(testing::slurp(kTinyHf + "/expected.json"));
  const std::vector<int> greedy = expected["greedy_ids"].get<std::vector<int>>();
  const std::string prompt = expected["prompt"];
  size_t stop = 3;  // the first position from 3 on whose id did not come earlier
  while (std::find(greedy.begin(), greedy.begin() + long(stop), greedy[stop]) != greedy.begin() + long(stop)) stop++;
  ASSERT_LT(stop, greedy.size());
  TempDir tmp;
  const std::string dir = tmp / "m";
  fs::create_directories(dir);
  for (const char* f : {"model.safetensors", "tokenizer.model"}) fs::copy_file(kTinyHf + "/" + f, dir + "/" + f);
  json cfg = json::parse(testing::slurp(kTinyHf + "/config.json"));
  cfg["eos_token_id"] = json::array({2, greedy[stop]});
  testing::write_file(dir + "/config.json", cfg.dump(2));
  auto r =
      run_cli({"generate", dir, "--prompt", prompt, "--temperature", "0", "--max-new-tokens", "20", "--print-ids"});
  ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  EXPECT_EQ(parse_ids(r.out), std::vector<int>(greedy.begin(), greedy.begin() + long(stop) + 1));
}

// The prompt's token count in generate's context check: the tokenizer's ids, plus BOS only when
// config.json has one (Llama 3: <|begin_of_text|>; the Qwen2 folder with bos_token_id null: none).
TEST(HfFamilies, GenerateAddsBosOnlyWhenTheModelHasOne) {
  TempDir tmp;
  const std::string no_bos = tmp / "qwen2-no-bos";
  fs::create_directories(no_bos);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "model.safetensors"})
    fs::copy_file(kQwen2 + "/" + f, no_bos + "/" + f);
  json cfg = json::parse(testing::slurp(kQwen2 + "/config.json"));
  cfg["bos_token_id"] = nullptr;
  testing::write_file(no_bos + "/config.json", cfg.dump(2));
  // Qwen2's own config.json names a bos_token_id, but its tokenizer adds none, so neither copy has BOS.
  for (const std::string& dir : {kLlama3, kQwen2, no_bos}) {
    SCOPED_TRACE(dir);
    const data::Tokenizer tok(dir + "/tokenizer.json");
    const std::string prompt = "The river runs past the old mill";
    const size_t n = tok.encode(prompt).size();
    auto r = run_cli({"generate", dir, "--prompt", prompt, "--max-new-tokens", "256"});
    const bool bos = dir == kLlama3;
    testing::expect_plain_error(
        r, {fmt::format("prompt ({} tokens{}) + --max-new-tokens 256", n + (bos ? 1 : 0), bos ? " with BOS" : "")});
  }
}

// Train a few steps from the folder (its tokenizer.json preprocessing the fixture corpus), export the
// checkpoint, and find the source's layout again: the same architecture keys, tokenizer files, tensor
// names, shapes and dtype; trained values; generate loads the export.
TEST(HfFamilies, TrainedCheckpointsOfEachFamilyExport) {
  for (const std::string& dir : {kLlama3, kQwen2}) {
    SCOPED_TRACE(dir);
    TempDir tmp;
    auto pre = run_cli({"preprocess", "--quiet", "--input", kCorpus, "--tokenizer-library", "huggingface",
                        "--tokenizer-type", dir, "--output-prefix", tmp / "fx", "--append-eod"});
    ASSERT_TRUE(pre.exited && pre.code == 0) << testing::describe(pre);
    const std::string yaml = tmp / "run.yaml";
    testing::write_file(yaml, fmt::format(R"(name: families
trainer: {{devices: 1, num_nodes: 1, precision: 32, max_steps: 3, max_epochs: null, log_every_n_steps: 1,
           val_check_interval: 3, limit_val_batches: 0, gradient_clip_val: 1.0}}
exp_manager:
  explicit_log_dir: {}
  checkpoint_callback_params: {{save_top_k: 1, every_n_train_steps: 3, save_last: true}}
model:
  micro_batch_size: 2
  global_batch_size: 2
  encoder_seq_length: 32
  init_from: {}
  tokenizer: {{library: huggingface, type: {}}}
  data: {{data_prefix: [1.0, {}], splits_string: '90,10,0', seq_length: 32}}
  optim:
    name: adamw
    lr: 1.0e-3
    sched: {{name: CosineAnnealing, warmup_steps: 1, constant_steps: 0, min_lr: 1.0e-4}}
)",
                                          tmp / "run", dir, dir, tmp / "fx_text_document"));
    auto train = run_cli({"train", yaml});
    ASSERT_TRUE(train.exited && train.code == 0) << testing::describe(train);
    const std::string ckpt = tmp / "run/checkpoints/step_3";
    auto r = run_cli({"export", ckpt, "--hf", tmp / "out", "--dtype", "fp32"});
    ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      EXPECT_EQ(testing::slurp(tmp / "out/" + std::string(f)), testing::slurp(dir + "/" + f)) << f;
    const json src = json::parse(testing::slurp(dir + "/config.json"));
    const json out = json::parse(testing::slurp(tmp / "out/config.json"));
    for (const char* key : {"model_type", "hidden_size", "intermediate_size", "num_attention_heads",
                            "num_key_value_heads", "num_hidden_layers", "vocab_size", "rope_theta", "rms_norm_eps",
                            "tie_word_embeddings", "eos_token_id", "rope_scaling"})
      EXPECT_EQ(out.value(key, json()), src.value(key, json())) << key;
    io::SafetensorsCheckpoint a(dir), b(tmp / "out");
    EXPECT_EQ(b.names(), a.names());
    int changed = 0;
    for (const auto& name : a.names()) {
      EXPECT_EQ(b.get(name).shape, a.get(name).shape) << name;
      EXPECT_EQ(b.get(name).dtype, io::DType::F32) << name;
      std::vector<float> x(size_t(a.get(name).numel())), y(x.size());
      a.read_f32(name, a.get(name).shape, x.data());
      b.read_f32(name, b.get(name).shape, y.data());
      changed += x != y;
    }
    EXPECT_GT(changed, int(a.names().size()) / 2) << "training changed few tensors";
    auto g = run_cli(
        {"generate", tmp / "out", "--prompt", "Once", "--temperature", "0", "--max-new-tokens", "4", "--print-ids"});
    ASSERT_TRUE(g.exited && g.code == 0) << testing::describe(g);
    EXPECT_FALSE(parse_ids(g.out).empty());
  }
}

}  // namespace
}  // namespace llamatrain
