// The chain the help suggests, through the binary: `train configs/tiny.yaml convert_to_hf=true
// model.output_dir=DIR` on the preprocessed fixture corpus writes a folder `generate DIR` loads
// (config.json, model.safetensors, tokenizer.model); `generate` also loads the run's checkpoint
// folder (checkpoints/step_N) and gives the same greedy ids; printed text is exactly the decode of
// the generated ids, greedy and sampled at a high temperature (broken and multi-byte UTF-8 from byte
// pieces); the export holds the tokenizer's vocabulary, not the rows the run padded it to; ids past
// the tokenizer's pieces (a Hugging Face model with a wider vocab) are never sampled; `export CKPT
// --hf DIR` replaces a previous export atomically.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "data/tokenizer.h"
#include "io/hf_checkpoint.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/llama.h"

namespace llamatrain {
namespace {

using testing::run_cli;
using testing::TempDir;

namespace fs = std::filesystem;

const std::string kFixtures = std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/data/fixtures";
const std::string kSpm = kFixtures + "/tokenizer.model";
constexpr int kSteps = 30;

// One fp32 training run of the tiny config for the whole binary: its Hugging Face export and its
// final checkpoint. Tests that change files copy them first.
struct TrainedRun {
  TempDir tmp;
  std::string hf, checkpoint;
  testing::CliResult train;
};

const TrainedRun& trained() {
  static TrainedRun r;
  static const bool done = [] {
    auto pre = run_cli({"preprocess", "--quiet", "--input", kFixtures + "/corpus.jsonl", "--tokenizer-model", kSpm,
                        "--output-prefix", r.tmp / "fx", "--append-eod"});
    EXPECT_TRUE(pre.exited && pre.code == 0) << testing::describe(pre);
    r.hf = r.tmp / "tiny-hf";
    r.checkpoint = r.tmp / ("run/checkpoints/step_" + std::to_string(kSteps));
    r.train = run_cli({"train", std::string(LLAMATRAIN_SOURCE_DIR) + "/configs/tiny.yaml",
                       "model.data.data_prefix=[1.0," + (r.tmp / "fx_text_document") + "]",
                       "model.tokenizer.model=" + kSpm, "exp_manager.explicit_log_dir=" + (r.tmp / "run"),
                       "trainer.max_steps=" + std::to_string(kSteps), "trainer.limit_val_batches=0",
                       "trainer.precision=32", "convert_to_hf=true", "model.output_dir=" + r.hf});
    return true;
  }();
  (void)done;
  return r;
}

std::vector<int> parse_ids(const std::string& text) {
  std::vector<int> ids;
  std::istringstream in(text);
  for (int id; in >> id;) ids.push_back(id);
  return ids;
}

// `generate MODEL --prompt PROMPT extra...` twice, as text and with --print-ids.
struct Generated {
  std::string text;
  std::vector<int> ids;
};

Generated generate(const std::string& model, const std::string& prompt, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"generate", model, "--prompt", prompt};
  args.insert(args.end(), extra.begin(), extra.end());
  auto text = run_cli(args);
  args.push_back("--print-ids");
  auto ids = run_cli(args);
  EXPECT_TRUE(text.exited && text.code == 0) << testing::describe(text);
  EXPECT_TRUE(ids.exited && ids.code == 0) << testing::describe(ids);
  return {text.out, parse_ids(ids.out)};
}

bool is_high_byte_piece(const data::Tokenizer& tok, int id) {
  const std::string p = tok.id_to_piece(id);
  return p.size() == 6 && p.rfind("<0x", 0) == 0 && std::stoi(p.substr(3, 2), nullptr, 16) >= 0x80;
}

TEST(ExportChain, TrainWritesAFolderGenerateLoads) {
  const auto& run = trained();
  ASSERT_TRUE(run.train.exited && run.train.code == 0) << testing::describe(run.train);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model"})
    EXPECT_TRUE(fs::is_regular_file(run.hf + "/" + f)) << f;
  EXPECT_TRUE(fs::is_directory(run.checkpoint)) << run.train.out;
  EXPECT_TRUE(testing::temporaries_in(run.tmp.path()).empty());
  EXPECT_EQ(testing::slurp(run.hf + "/tokenizer.model"), testing::slurp(kSpm));

  data::Tokenizer tok(kSpm);
  const auto greedy = generate(run.hf, "The miller", {"--temperature", "0", "--max-new-tokens", "60"});
  ASSERT_FALSE(greedy.ids.empty());
  for (int id : greedy.ids) ASSERT_LT(id, tok.vocab_size()) << "a padded id";
  std::vector<int> ids = greedy.ids;
  if (ids.back() == tok.eos_id()) ids.pop_back();
  EXPECT_EQ(greedy.text, "The miller" + tok.decode(ids) + "\n");
  // greedy is greedy: the same ids again, and from the checkpoint folder, which holds the same fp32 weights
  EXPECT_EQ(generate(run.hf, "The miller", {"--temperature", "0", "--max-new-tokens", "60"}).ids, greedy.ids);
  const auto from_ckpt = generate(run.checkpoint, "The miller", {"--temperature", "0", "--max-new-tokens", "60"});
  EXPECT_EQ(from_ckpt.ids, greedy.ids);
  EXPECT_EQ(from_ckpt.text, greedy.text);
}

TEST(ExportChain, SampledTextIsExactlyTheDecodedIds) {
  const auto& run = trained();
  ASSERT_EQ(run.train.code, 0) << testing::describe(run.train);
  data::Tokenizer tok(run.hf + "/tokenizer.model");
  // The run padded the 500 pieces to 504 rows (make_vocab_size_divisible_by 8); the padding is not exported.
  EXPECT_EQ(io::read_hf_config(run.hf).vocab_size, tok.vocab_size());
  EXPECT_EQ(io::SafetensorsCheckpoint(run.hf + "/model.safetensors").get("lm_head.weight").shape,
            (std::vector<int64_t>{tok.vocab_size(), 64}));
  int high_bytes = 0;
  for (const char* seed : {"1", "2", "3", "4"}) {
    const auto g =
        generate(run.hf, "Once", {"--temperature", "3", "--top-p", "1", "--max-new-tokens", "200", "--seed", seed});
    ASSERT_FALSE(g.ids.empty());
    for (int id : g.ids) {
      ASSERT_LT(id, tok.vocab_size()) << "sampled a padded id, seed " << seed;
      high_bytes += is_high_byte_piece(tok, id);
    }
    std::vector<int> ids = g.ids;
    if (ids.back() == tok.eos_id()) ids.pop_back();
    EXPECT_EQ(g.text, "Once" + tok.decode(ids) + "\n") << "seed " << seed;
  }
  EXPECT_GT(high_bytes, 0) << "no byte piece >= 0x80 was sampled; the test did not exercise held-back bytes";
}

TEST(ExportChain, ExportOfTheCheckpointReplacesThePreviousExport) {
  const auto& run = trained();
  ASSERT_EQ(run.train.code, 0) << testing::describe(run.train);
  TempDir tmp;
  const std::string dir = tmp / "tiny-hf";
  fs::copy(run.hf, dir);
  const std::string fp32 = testing::slurp(dir + "/model.safetensors");
  auto r = run_cli({"export", run.checkpoint, "--hf", dir, "--dtype", "bf16"});
  ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  const std::string bf16 = testing::slurp(dir + "/model.safetensors");
  EXPECT_NE(bf16, fp32);
  EXPECT_LT(bf16.size(), fp32.size() * 3 / 4) << "bf16 weights should take about half the bytes";
  EXPECT_NE(testing::slurp(dir + "/config.json").find("bfloat16"), std::string::npos);
  EXPECT_EQ(testing::slurp(dir + "/tokenizer.model"), testing::slurp(kSpm));
  EXPECT_TRUE(testing::temporaries_in(tmp.path()).empty());
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(tmp.path())) entries.push_back(e.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{"tiny-hf"});
  const auto g = generate(dir, "The", {"--temperature", "0", "--max-new-tokens", "8"});
  EXPECT_FALSE(g.ids.empty());
}

// A model whose embedding is much wider than its tokenizer (like 32000 pieces in a 32064 embedding),
// with large random weights so that the padded ids would often win: they are never sampled.
TEST(ExportChain, PaddedVocabIdsAreNeverSampled) {
  TempDir tmp;
  const data::Tokenizer tok(kSpm);
  auto cfg = model::preset_config("tiny");
  cfg.vocab_size = tok.vocab_size() + 140;
  model::LlamaModel m(cfg, model::Precision::fp32, 3);
  m.init_random(0.5f);
  io::save_hf_checkpoint(m, tmp / "padded", "float32", 5'000'000'000, {{"tokenizer.model", testing::slurp(kSpm)}});
  for (const char* seed : {"9", "10"}) {
    const auto g = generate(tmp / "padded", "a",
                            {"--temperature", "5", "--top-p", "1", "--max-new-tokens", "200", "--seed", seed});
    ASSERT_FALSE(g.ids.empty());
    for (int id : g.ids) EXPECT_LT(id, tok.vocab_size()) << "seed " << seed;
  }
}

}  // namespace
}  // namespace llamatrain
