// The tokenizer files a training checkpoint carries (train::save_checkpoint over
// io::tokenizer_source_files): a tokenizer.json folder gives tokenizer.json and tokenizer_config.json
// byte for byte, a tokenizer.model file that file alone; the checkpoint still loads, and an export of
// it (as `llamatrain export` takes the checkpoint's own files) carries the same tokenizer files.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/hf_checkpoint.h"
#include "io/hf_export.h"
#include "model/config.h"
#include "model/llama.h"
#include "test_util.h"
#include "train/checkpoint.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const std::string kQwen2 = testing::source_path("tests/golden/tiny_qwen2");
const std::string kSpm = testing::fixture("tokenizer.model");

std::vector<std::string> tokenizer_files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const char* f : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"})
    if (fs::exists(dir + "/" + f)) out.push_back(f);
  return out;
}

TEST(CheckpointTokenizer, ATokenizerJsonTravelsThroughCheckpointAndExport) {
  model::LlamaConfig c = model::preset_config("tiny");
  c.vocab_size = 512;
  c.bos_id = -1;
  c.eos_id = 456;
  model::LlamaModel m(c, model::Precision::fp32, 3);
  m.init_random(0.05f);
  train::TrainerState st;
  st.step = 3;
  st.optimizer_steps = 3;
  st.seed = 1;
  TempDir tmp;
  const std::string ckpt = train::save_checkpoint(tmp / "checkpoints", m, st, kQwen2, "seed: 1\n");
  EXPECT_EQ(tokenizer_files_in(ckpt), (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    EXPECT_EQ(testing::read_file(ckpt + "/" + f), testing::read_file(kQwen2 + "/" + f)) << f;

  model::LlamaModel back(c, model::Precision::fp32, 99);
  EXPECT_EQ(train::load_checkpoint(ckpt, back).step, 3);
  io::ExportOptions o;
  o.torch_dtype = "float32";
  o.tokenizer_model = ckpt;  // what `llamatrain export CKPT` passes when the checkpoint has tokenizer files
  io::export_hf(back, tmp / "hf", o);
  EXPECT_EQ(tokenizer_files_in(tmp / "hf"), (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
  EXPECT_EQ(testing::read_file(tmp / "hf/tokenizer.json"), testing::read_file(kQwen2 + "/tokenizer.json"));

  // A SentencePiece file: that file alone, as tokenizer.model.
  st.step = 4;
  const std::string spm = train::save_checkpoint(tmp / "checkpoints", m, st, kSpm, "seed: 1\n");
  EXPECT_EQ(tokenizer_files_in(spm), std::vector<std::string>{"tokenizer.model"});
  EXPECT_EQ(testing::read_file(spm + "/tokenizer.model"), testing::read_file(kSpm));
}

}  // namespace
}  // namespace llamatrain
