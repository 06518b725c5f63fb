// Every failure a user can cause ends in a plain "error: ..." line and a status from 1 to 125, never
// an abort or an uncaught exception: folders where files are expected, out-of-range numbers and
// config values, unknown keys and Megatron-only flags, outputs that cannot be written and jobs that
// cannot fit in memory (checked before the work), inputs that give no document (saying what the
// input holds). Runs the real binary ($LLAMATRAIN_BIN).
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"
#include "core/memory.h"
#include "kernels/cpu/matmul_choice.h"
#include "kernels/cpu/ops.h"
#include "model/config.h"
#include "model/llama.h"

namespace llamatrain {
namespace {

using testing::expect_plain_error;
using testing::run_cli;
using testing::TempDir;

namespace fs = std::filesystem;

const std::string kTiny = std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/golden/tiny_hf";
const std::string kFixtures = std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/data/fixtures";
const std::string kSpm = kFixtures + "/tokenizer.model";

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

// ---- generate ----

TEST(CliErrors, GenerateTokenizerModelFolderIsAPlainError) {
  auto r = run_cli({"generate", kTiny, "--prompt", "hi", "--tokenizer-model", kTiny});
  expect_plain_error(r, {kTiny, "is a folder", kTiny + "/tokenizer.model"});
  // the same class in `data inspect`, whose option existed before
  r = run_cli({"data", "inspect", std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/golden/data/fixture_eod_text_document",
               "--tokenizer-model", kFixtures});
  expect_plain_error(r, {kFixtures, "is a folder"});
}

TEST(CliErrors, GenerateNumbersOutOfRange) {
  auto r = run_cli({"generate", kTiny, "--prompt", "hi", "--max-new-tokens", "-5"});
  expect_plain_error(r, {"--max-new-tokens", "-5", ">= 1"});
  r = run_cli({"generate", kTiny, "--prompt", "hi", "--max-new-tokens", "2147483647"});
  expect_plain_error(r, {"--max-new-tokens 2147483647", "max_position_embeddings"});
  r = run_cli({"generate", kTiny, "--prompt", "hi", "--temperature", "-1"});
  expect_plain_error(r, {"--temperature", "-1"});
  r = run_cli({"generate", kTiny, "--prompt", "hi", "--temperature", "nan"});
  expect_plain_error(r, {"--temperature", "nan"});
  r = run_cli({"generate", kTiny, "--prompt", "hi", "--top-p", "1.5"});
  expect_plain_error(r, {"--top-p", "1.5", "<= 1"});
  r = run_cli({"generate", kTiny, "--prompt", "hi", "--top-p", "0"});
  expect_plain_error(r, {"--top-p", "> 0"});
  r = run_cli({"generate", kTiny, "--prompt", "hi", "--max-new-tokens", "abc"});
  expect_plain_error(r, {"--max-new-tokens", "'abc'"});
}

TEST(CliErrors, GenerateMissingFolderIsReportedAsTheFolder) {
  auto r = run_cli({"generate", "/nonexistent/model", "--prompt", "hi"});
  expect_plain_error(r, {"/nonexistent/model does not exist"});
  EXPECT_EQ(r.err.find("tokenizer.model: file not found"), std::string::npos) << r.err;
}

TEST(CliErrors, GenerateFolderWithoutTokenizerNamesTheOption) {
  TempDir dir;
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(kTiny + "/" + f, dir / f);
  auto r = run_cli({"generate", dir.path(), "--prompt", "hi", "--max-new-tokens", "3"});
  expect_plain_error(r, {dir.path(), "tokenizer.model", "--tokenizer-model"});
  r = run_cli({"generate", dir.path(), "--prompt", "hi", "--max-new-tokens", "3", "--tokenizer-model",
               kTiny + "/tokenizer.model"});
  EXPECT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  EXPECT_EQ(r.out.rfind("hi", 0), 0u) << r.out;
}

// ---- train ----

// The fixture corpus preprocessed once per test binary, for train's checks that come after the data.
const std::string& fixture_prefix() {
  static TempDir dir;
  static const std::string prefix = [] {
    auto r = run_cli({"preprocess", "--quiet", "--input", kFixtures + "/corpus.jsonl", "--tokenizer-model", kSpm,
                      "--output-prefix", dir / "fx", "--append-eod"});
    EXPECT_TRUE(r.exited && r.code == 0) << testing::describe(r);
    return dir / "fx_text_document";
  }();
  return prefix;
}

// `train configs/tiny.yaml` on the fixture corpus, one step, logging into log_dir, plus overrides.
testing::CliResult train(const std::string& log_dir, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"train",
                                   std::string(LLAMATRAIN_SOURCE_DIR) + "/configs/tiny.yaml",
                                   "model.data.data_prefix=[1.0," + fixture_prefix() + "]",
                                   "model.tokenizer.model=" + kSpm,
                                   "exp_manager.explicit_log_dir=" + log_dir,
                                   "trainer.max_steps=1",
                                   "trainer.limit_val_batches=0",
                                   "model.optim.sched.warmup_steps=0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args);
}

// Nothing was trained: no model was built and no step ran.
void expect_no_training(const testing::CliResult& r) {
  EXPECT_EQ(r.out.find("training:"), std::string::npos) << "trained before the check:\n" << r.out;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << "trained before the check:\n" << r.out;
}

TEST(CliErrors, TrainWithoutConfigSaysWhatToGiveAndSpeaksOfNoPlans) {
  auto r = run_cli({"train"});
  expect_plain_error(r, {"no config given", "configs/tiny.yaml"});
  for (const char* word : {"issue", "plan", "later", "not yet", "for now", "comes with"})
    EXPECT_EQ(r.err.find(word), std::string::npos) << word << " in " << r.err;
  r = run_cli({"train", "--demo"});
  expect_plain_error(r, {"--demo"});
}

TEST(CliErrors, HelpTextsSpeakOfNoIssuesOrPlans) {
  for (std::vector<std::string> cmd : std::vector<std::vector<std::string>>{{"--help"},
                                                                            {"train", "--help"},
                                                                            {"generate", "--help"},
                                                                            {"bench", "--help"},
                                                                            {"preprocess", "--help"},
                                                                            {"data", "--help"},
                                                                            {"data", "inspect", "--help"},
                                                                            {"data", "merge", "--help"},
                                                                            {"plan", "--help"},
                                                                            {"tokenizer", "--help"},
                                                                            {"tokenizer", "train", "--help"},
                                                                            {"tokenizer", "merge", "--help"},
                                                                            {"tokenizer", "stats", "--help"}}) {
    auto r = run_cli(cmd);
    EXPECT_TRUE(r.exited && r.code == 0) << testing::describe(r);
    // The usage lines name the binary by its path, which may say anything: leave it out. `plan` is a
    // command's name; plans as intentions are what may not appear.
    std::string text = r.out;
    for (size_t at; (at = text.find(testing::llamatrain_bin())) != std::string::npos;)
      text.erase(at, testing::llamatrain_bin().size());
    const std::regex words("\\b(issue|planned|plans|plan to|later|not yet|for now|session)\\b", std::regex::icase);
    EXPECT_FALSE(std::regex_search(text, words)) << cmd[0] << ":\n" << r.out;
  }
}

TEST(CliErrors, TrainHfExportOntoAFileFailsBeforeTraining) {
  TempDir dir;
  write(dir / "file", "x");
  auto r = train(dir / "run", {"convert_to_hf=true", "model.output_dir=" + (dir / "file")});
  expect_plain_error(r, {dir / "file", "is a file"});
  expect_no_training(r);
  EXPECT_EQ(testing::slurp(dir / "file"), "x");
}

TEST(CliErrors, TrainHfExportIntoAFolderWithOtherFilesFailsBeforeTraining) {
  TempDir dir;
  fs::create_directories(dir / "mine");
  write(dir / "mine/notes.txt", "keep me");
  auto r = train(dir / "run", {"convert_to_hf=true", "model.output_dir=" + (dir / "mine")});
  expect_plain_error(r, {dir / "mine", "notes.txt"});
  expect_no_training(r);
  EXPECT_EQ(testing::slurp(dir / "mine/notes.txt"), "keep me");
}

TEST(CliErrors, TrainHfExportIntoAReadOnlyFolderFailsBeforeTraining) {
  TempDir dir;
  const std::string ro = dir / "ro";
  fs::create_directories(ro);
  if (::mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, "size=64k") != 0)
    GTEST_SKIP() << "cannot mount a read-only tmpfs here (needs root with CAP_SYS_ADMIN)";
  auto r = train(dir / "run", {"convert_to_hf=true", "model.output_dir=" + ro + "/out"});
  ::umount(ro.c_str());
  expect_plain_error(r, {dir / "ro/out", "Read-only file system"});
  expect_no_training(r);
}

TEST(CliErrors, TrainLogDirOntoAFileFailsBeforeTraining) {
  TempDir dir;
  write(dir / "file", "x");
  auto r = train(dir / "file", {});
  expect_plain_error(r, {dir / "file", "explicit_log_dir"});
  expect_no_training(r);
  EXPECT_EQ(testing::slurp(dir / "file"), "x");
}

TEST(CliErrors, TrainConfigValuesOutOfRange) {
  TempDir dir;
  expect_plain_error(train(dir / "run", {"trainer.max_steps=0"}), {"trainer.max_steps", "got '0'", ">= 1"});
  expect_plain_error(train(dir / "run", {"model.optim.lr=-1"}), {"model.optim.lr", "-1"});
  expect_plain_error(train(dir / "run", {"model.optim.lr=.inf"}), {"model.optim.lr", "inf"});
  expect_plain_error(train(dir / "run", {"model.optim.sched.warmup_steps=-1"}), {"warmup_steps", "-1"});
  expect_plain_error(train(dir / "run", {"trainer.precision=fp8"}), {"trainer.precision", "fp8", "bf16-mixed"});
  expect_plain_error(train(dir / "run", {"trainer.max_step=5"}),
                     {"unknown key 'trainer.max_step'", "did you mean trainer.max_steps"});
  EXPECT_FALSE(fs::exists(dir / "run")) << "a config error created the log folder";
}

TEST(CliErrors, TrainJobThatCannotFitInMemoryFailsBeforeAnyWork) {
  const int64_t avail = available_memory_bytes();
  if (avail < 0) GTEST_SKIP() << "available memory unknown here";
  TempDir dir;
  // 2^30 tokens per micro-batch, as many sequences or as long ones: terabytes of activations.
  for (const auto& [mbs, seq] :
       std::vector<std::pair<std::string, std::string>>{{"4194304", "256"}, {"131072", "8192"}}) {
    auto r = train(dir / "run", {"model.micro_batch_size=" + mbs, "model.global_batch_size=" + mbs,
                                 "model.encoder_seq_length=" + seq, "model.max_position_embeddings=" + seq});
    expect_plain_error(r, {"memory", "model.micro_batch_size"});
    expect_no_training(r);
    EXPECT_EQ(r.out.find("model:"), std::string::npos) << "built the model before the memory check:\n" << r.out;
  }
}

// ---- bench ----

TEST(CliErrors, BenchProgressWritesNoCarriageReturnIntoAFile) {
  auto r = run_cli({"bench", "--model", "tiny", "--seq", "16", "--batch", "1", "--steps", "2"});
  ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bench: step 2/2"), std::string::npos) << r.err;
}

TEST(CliErrors, BenchSaysWhichOperandFormItUses) {
  // bf16 compute keeps its operands as bf16, or as bf16 values in floats where the fp32 kernel runs
  // the matmuls; bench says which, and its memory figures (checked against the model's own inside
  // bench) follow the form. Forced here through the policy variable, in a private cache folder.
  // On a CPU without oneDNN's bf16 kernel (AVX2 only), the operands are always floats and forcing
  // bf16 is a plain error that names the variable and the fix.
  const std::string cache = std::string(LLAMATRAIN_BINARY_DIR) + "/tmp_bench_cache";
  ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  const bool bf16_kernel = cpu::matmul_chooser().bf16_available();
  for (const char* policy : {"fp32", "bf16"}) {
    ::setenv("LLAMATRAIN_BF16_MATMUL", policy, 1);
    const bool floats = std::string(policy) == "fp32" || !bf16_kernel;
    if (!bf16_kernel && std::string(policy) == "bf16") {
      auto r = run_cli({"bench", "--model", "tiny", "--seq", "16", "--batch", "2", "--steps", "1"});
      EXPECT_TRUE(r.exited && r.code == 1) << testing::describe(r);
      EXPECT_NE(r.err.find("LLAMATRAIN_BF16_MATMUL=bf16: oneDNN has no bf16 matmul kernel on this CPU"),
                std::string::npos)
          << r.err;
      EXPECT_NE(r.err.find("hint: unset LLAMATRAIN_BF16_MATMUL"), std::string::npos) << r.err;
      continue;
    }
    for (const char* precision : {"bf16-mixed", "bf16-sr"}) {
      auto r = run_cli({"bench", "--model", "tiny", "--seq", "16", "--batch", "2", "--steps", "1", "--precision",
                        precision, "--json"});
      ASSERT_TRUE(r.exited && r.code == 0) << policy << " " << precision << "\n" << testing::describe(r);
      EXPECT_NE(r.out.find(floats ? "\"float_operands\":true" : "\"float_operands\":false"), std::string::npos)
          << policy << " " << precision << ": " << r.out;
    }
    auto r = run_cli({"bench", "--model", "tiny", "--seq", "16", "--batch", "2", "--steps", "1"});
    ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
    EXPECT_NE(r.out.find(floats ? "operands       bf16 values held in floats" : "operands       bf16 (the bf16"),
              std::string::npos)
        << r.out;
    if (!bf16_kernel) {
      EXPECT_NE(r.out.find("oneDNN has no bf16 kernel on this CPU"), std::string::npos) << r.out;
    }
  }
  ::unsetenv("LLAMATRAIN_BF16_MATMUL");
  ::unsetenv("XDG_CACHE_HOME");
  std::filesystem::remove_all(cache);
}

int64_t job_bytes(const model::LlamaConfig& c, model::Precision p, int B, int T) {
  const auto ct = p == model::Precision::fp32 ? cpu::ComputeType::f32 : cpu::ComputeType::bf16;
  return model::LlamaModel::state_bytes(c, p) + model::LlamaModel::activation_bytes(c, p, B, T) +
         cpu::lmhead_ce_scratch_bytes(B * T, c.dim, c.vocab_size, ct);
}

TEST(CliErrors, BenchOutOfMemoryHintSuggestsOnlyWhatHelps) {
  const int64_t avail = available_memory_bytes();
  if (avail < 0) GTEST_SKIP() << "available memory unknown here";
  // The 7B model: its state alone is larger than this machine, so no batch or sequence change helps.
  const auto big = model::preset_config("llama2-7b");
  auto r = run_cli({"bench", "--model", "llama2-7b", "--seq", "4096", "--batch", "64", "--steps", "1"});
  expect_plain_error(r, {"memory: llama2-7b", "hint:"});
  if (model::LlamaModel::state_bytes(big, model::Precision::bf16_sr) + int64_t(1 << 30) > avail) {
    EXPECT_EQ(r.err.find("--batch"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("--seq"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("bf16-sr"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("smaller model"), std::string::npos) << r.err;
  }
  // A tiny model at a batch far too large: a smaller batch helps, bf16-sr (smaller state) does not.
  const auto tiny = model::preset_config("tiny");
  const int T = 256;
  int B = 1;
  while (job_bytes(tiny, model::Precision::bf16_mixed, B, T) < 2 * avail && B < (1 << 22)) B *= 2;
  ASSERT_GT(job_bytes(tiny, model::Precision::bf16_mixed, B, T), avail);
  r = run_cli({"bench", "--model", "tiny", "--seq", std::to_string(T), "--batch", std::to_string(B), "--steps", "1"});
  expect_plain_error(r, {"memory: tiny", "hint: --batch "});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("--batch (\\d+) \\(or less\\)"))) << r.err;
  const int suggested = std::stoi(m[1]);
  EXPECT_LT(suggested, B);
  EXPECT_LE(job_bytes(tiny, model::Precision::bf16_mixed, suggested, T), avail + avail / 10) << r.err;
  EXPECT_GT(job_bytes(tiny, model::Precision::bf16_mixed, suggested * 2 + 2, T), avail - avail / 10) << r.err;
  if (job_bytes(tiny, model::Precision::bf16_sr, B, T) > avail) {
    EXPECT_EQ(r.err.find("bf16-sr"), std::string::npos) << "suggests a precision that cannot help:\n" << r.err;
  }
}

// ---- preprocess ----

std::vector<std::string> preprocess_args(const std::string& input, const std::string& prefix) {
  return {"preprocess", "--input", input, "--tokenizer-model", kSpm, "--output-prefix", prefix, "--quiet"};
}

void expect_nothing_written(const TempDir& dir) {
  for (const auto& e : fs::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.ends_with(".jsonl") || name.ends_with(".json") || name.ends_with(".txt")) << "left " << name;
  }
}

TEST(CliErrors, PreprocessWithWrongJsonKeysSaysWhichKeysTheObjectsHave) {
  TempDir dir;
  write(dir / "in.jsonl",
        "{\"text\": \"hello there\", \"source\": \"web\"}\n{\"text\": \"more\", \"source\": \"x\"}\n");
  auto args = preprocess_args(dir / "in.jsonl", dir / "out");
  args.insert(args.end(), {"--json-keys", "content"});
  expect_plain_error(run_cli(args), {"--json-keys content", "objects have keys: text, source", "missing_key"});
  expect_nothing_written(dir);
}

TEST(CliErrors, PreprocessOfATextFileAsJsonlSuggestsTextFormat) {
  TempDir dir;
  write(dir / "book.jsonl", "It was a bright cold day in April.\nThe clocks were striking thirteen.\n");
  expect_plain_error(run_cli(preprocess_args(dir / "book.jsonl", dir / "out")),
                     {"not JSON", "--input-format text", "invalid_json"});
  expect_nothing_written(dir);
}

TEST(CliErrors, PreprocessOfAJsonArraySaysSo) {
  TempDir dir;
  write(dir / "a.json", "[\n  {\"text\": \"one\"},\n  {\"text\": \"two\"}\n]\n");
  expect_plain_error(run_cli(preprocess_args(dir / "a.json", dir / "out")), {"JSON array", "one object per line"});
  write(dir / "b.json", "[{\"text\": \"one\"}, {\"text\": \"two\"}]\n");
  expect_plain_error(run_cli(preprocess_args(dir / "b.json", dir / "out")), {"JSON array"});
  expect_nothing_written(dir);
}

TEST(CliErrors, PreprocessOfAnEmptyFileIsAnError) {
  TempDir dir;
  write(dir / "empty.jsonl", "");
  expect_plain_error(run_cli(preprocess_args(dir / "empty.jsonl", dir / "out")), {"empty.jsonl", "empty (0 lines)"});
  write(dir / "blank.txt", "\n\n");
  auto args = preprocess_args(dir / "blank.txt", dir / "out");
  args.insert(args.end(), {"--input-format", "text"});
  expect_plain_error(run_cli(args), {"blank.txt", "every line is empty"});
  expect_nothing_written(dir);
}

TEST(CliErrors, PreprocessNumbersAndUnknownFlags) {
  TempDir dir;
  auto args = preprocess_args(kFixtures + "/corpus.jsonl", dir / "out");
  auto with = [&](std::vector<std::string> extra) {
    auto a = args;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  expect_plain_error(with({"--workers", "0"}), {"--workers", "got 0", "from 1 to 1024"});
  expect_plain_error(with({"--workers", "100000"}), {"--workers", "100000"});
  expect_plain_error(with({"--frobnicate", "7"}), {"unknown option --frobnicate 7"});
  auto r = run_cli({"preprocess", "--input", kFixtures + "/corpus.jsonl", "--tokenizer-model", kSpm, "--output-prefix",
                    "/nonexistent/dir/out"});
  expect_plain_error(r, {"/nonexistent/dir", "does not exist"});
}

TEST(CliErrors, PreprocessAcceptsMegatronFlagsThatChangeNothing) {
  TempDir dir;
  auto plain = run_cli(preprocess_args(kFixtures + "/corpus.jsonl", dir / "plain"));
  ASSERT_TRUE(plain.exited && plain.code == 0) << testing::describe(plain);
  // Megatron-LM style
  auto args = preprocess_args(kFixtures + "/corpus.jsonl", dir / "mg");
  args.insert(args.end(),
              {"--dataset-impl", "mmap", "--tokenizer-type", "GPTSentencePieceTokenizer", "--keep-newlines",
               "--partitions", "2", "--log-interval", "100", "--keep-sequential-samples", "--lang", "english"});
  auto r = run_cli(args);
  ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  for (const char* ext : {".bin", ".idx"})
    EXPECT_EQ(testing::slurp(dir / (std::string("mg_text_document") + ext)),
              testing::slurp(dir / (std::string("plain_text_document") + ext)));
  // NeMo style: the tokenizer named by the model folder
  fs::create_directories(dir / "hf");
  fs::copy_file(kSpm, dir / "hf/tokenizer.model");
  r = run_cli({"preprocess", "--input", kFixtures + "/corpus.jsonl", "--output-prefix", dir / "nemo", "--quiet",
               "--tokenizer-library", "huggingface", "--tokenizer-type", dir / "hf", "--dataset-impl", "mmap",
               "--preproc-folder"});
  ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  EXPECT_EQ(testing::slurp(dir / "nemo_text_document.bin"), testing::slurp(dir / "plain_text_document.bin"));
  // Megatron's Llama 2 tokenizer class prepends BOS, like --bos
  auto bos = preprocess_args(kFixtures + "/corpus.jsonl", dir / "bos");
  bos.push_back("--bos");
  ASSERT_EQ(run_cli(bos).code, 0);
  args = preprocess_args(kFixtures + "/corpus.jsonl", dir / "l2");
  args.insert(args.end(), {"--tokenizer-type", "Llama2Tokenizer"});
  ASSERT_EQ(run_cli(args).code, 0);
  EXPECT_EQ(testing::slurp(dir / "l2_text_document.bin"), testing::slurp(dir / "bos_text_document.bin"));
}

TEST(CliErrors, PreprocessNamesUnsupportedMegatronFlags) {
  TempDir dir;
  auto with = [&](std::vector<std::string> extra) {
    auto a = preprocess_args(kFixtures + "/corpus.jsonl", dir / "out");
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  expect_plain_error(with({"--split-sentences"}), {"--split-sentences", "sentence", "hint: drop --split-sentences"});
  expect_plain_error(with({"--dataset-impl", "lazy"}), {"--dataset-impl lazy", "mmap"});
  expect_plain_error(with({"--tokenizer-library", "megatron"}), {"--tokenizer-library megatron", "SentencePiece"});
  expect_plain_error(with({"--tokenizer-type", "GPT2BPETokenizer"}), {"--tokenizer-type GPT2BPETokenizer"});
  expect_plain_error(with({"--vocab-file", "gpt2-vocab.json"}), {"--vocab-file", "SentencePiece"});
  expect_plain_error(with({"--apply-ftfy"}), {"--apply-ftfy", "ftfy"});
  expect_nothing_written(dir);
}

// ---- data ----

TEST(CliErrors, DataNumbersAndOutputs) {
  const std::string ds = std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/golden/data/fixture_eod_text_document";
  expect_plain_error(run_cli({"data", "inspect", ds, "--docs", "-1"}), {"--docs", "-1"});
  expect_plain_error(run_cli({"data", "inspect", ds, "--max-tokens", "-3"}), {"--max-tokens", "-3"});
  expect_plain_error(run_cli({"data", "merge", "/nonexistent/dir/out", ds}), {"/nonexistent/dir", "does not exist"});
  expect_plain_error(run_cli({"data", "inspect", "/nonexistent/ds"}), {"/nonexistent/ds.idx"});
}

}  // namespace
}  // namespace llamatrain
