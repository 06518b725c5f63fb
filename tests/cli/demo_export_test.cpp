// The demo chain the help suggests: `train --demo --export DIR` writes a folder `generate DIR` loads
// (config.json, model.safetensors, tokenizer.model). In fp32 the greedy sample train prints and the
// one generate prints from the export are the same text; sampled text printed while generating is
// exactly the decode of the sampled ids (at a high temperature the byte-level model emits broken and
// multi-byte UTF-8); exporting again replaces the previous export atomically.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "data/demo_corpus.h"
#include "data/tokenizer.h"
#include "io/hf_checkpoint.h"
#include "model/config.h"
#include "model/llama.h"

namespace llamatrain {
namespace {

using testing::CliTempDir;
using testing::run_cli;

namespace fs = std::filesystem;

std::vector<std::string> train_args(const std::string& dir, const std::string& seed) {
  return {"train", "--demo", "--precision", "fp32", "--steps", "30", "--batch", "2", "--seq", "64",
          "--log-interval", "30", "--seed", seed, "--export", dir};
}

TEST(DemoExport, GenerateLoadsTheExportAndRepeatsTheTrainSample) {
  CliTempDir tmp;
  const std::string dir = tmp / "demo-hf";
  auto train = run_cli(train_args(dir, "11"));
  ASSERT_TRUE(train.exited && train.code == 0) << testing::describe(train);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model"})
    EXPECT_TRUE(fs::is_regular_file(dir + "/" + f)) << f;
  EXPECT_TRUE(testing::temporaries_in(tmp.path()).empty());
  const std::string tag = "sample (greedy): ";
  const size_t at = train.out.find(tag);
  ASSERT_NE(at, std::string::npos) << train.out;
  const std::string sample = train.out.substr(at + tag.size(), train.out.find('\n', at) - at - tag.size());
  ASSERT_EQ(sample.rfind("The miller", 0), 0u) << sample;

  // 1 (BOS) + 10 prompt tokens + 120 new = the 131 tokens train's sample used (max_seq_len 256)
  auto gen = run_cli({"generate", dir, "--prompt", "The miller", "--temperature", "0", "--max-new-tokens", "120"});
  ASSERT_TRUE(gen.exited && gen.code == 0) << testing::describe(gen);
  EXPECT_EQ(gen.out, sample + "\n");
}

TEST(DemoExport, PrintedTextIsExactlyTheDecodedIds) {
  CliTempDir tmp;
  const std::string dir = tmp / "demo-hf";
  ASSERT_EQ(run_cli(train_args(dir, "12")).code, 0);
  data::Tokenizer tok(dir + "/tokenizer.model");
  int checked_non_ascii = 0;
  for (const char* seed : {"1", "2", "3", "4"}) {
    std::vector<std::string> args = {"generate", dir, "--prompt", "Once", "--temperature", "3", "--top-p", "1",
                                     "--max-new-tokens", "200", "--seed", seed};
    auto text = run_cli(args);
    args.push_back("--print-ids");
    auto ids_run = run_cli(args);
    ASSERT_TRUE(text.exited && text.code == 0) << testing::describe(text);
    ASSERT_TRUE(ids_run.exited && ids_run.code == 0) << testing::describe(ids_run);
    std::vector<int> ids;
    std::istringstream in(ids_run.out);
    for (int id; in >> id;) ids.push_back(id);
    ASSERT_FALSE(ids.empty());
    if (ids.back() == tok.eos_id()) ids.pop_back();
    const std::string decoded = tok.decode(ids);
    EXPECT_EQ(text.out, "Once" + decoded + "\n") << "seed " << seed;
    for (int id : ids) checked_non_ascii += id >= 128 + 3;
  }
  EXPECT_GT(checked_non_ascii, 0) << "the samples held no byte >= 0x80; the test did not exercise held-back bytes";
}

TEST(DemoExport, ExportingAgainReplacesThePreviousExport) {
  CliTempDir tmp;
  const std::string dir = tmp / "demo-hf";
  ASSERT_EQ(run_cli(train_args(dir, "21")).code, 0);
  const std::string first = testing::slurp(dir + "/model.safetensors");
  auto again = run_cli(train_args(dir, "22"));
  ASSERT_TRUE(again.exited && again.code == 0) << testing::describe(again);
  EXPECT_NE(testing::slurp(dir + "/model.safetensors"), first);
  EXPECT_TRUE(fs::is_regular_file(dir + "/tokenizer.model"));
  EXPECT_TRUE(testing::temporaries_in(tmp.path()).empty());
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(tmp.path())) entries.push_back(e.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{"demo-hf"});
}

// A model whose embedding is wider than its tokenizer (a padded vocab, like 32000 pieces in a 32064
// embedding): the ids past the pieces have no text and are never sampled (decoding one would fail).
TEST(DemoExport, PaddedVocabIdsAreNeverSampled) {
  CliTempDir tmp;
  auto cfg = model::preset_config("tiny");
  cfg.vocab_size = 320;  // 259 pieces
  model::LlamaModel m(cfg, model::Precision::fp32, 3);
  m.init_random(0.5f);
  io::save_hf_checkpoint(m, tmp / "padded", "float32", 5'000'000'000,
                         {{"tokenizer.model", data::demo_tokenizer_model()}});
  for (const char* flag : {"--print-ids", "--seed"}) {
    std::vector<std::string> args = {"generate", tmp / "padded", "--prompt", "a", "--temperature", "5", "--top-p", "1",
                                     "--max-new-tokens", "200", flag};
    if (std::string(flag) == "--seed") args.push_back("9");
    auto r = run_cli(args);
    ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
    if (std::string(flag) == "--print-ids") {
      std::istringstream in(r.out);
      int n = 0;
      for (int id; in >> id; ++n) EXPECT_LT(id, data::kDemoVocabSize);
      EXPECT_GT(n, 0);
    }
  }
}

}  // namespace
}  // namespace llamatrain
