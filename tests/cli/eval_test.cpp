// `llamatrain eval` against an independent computation: a tiny model trained and exported by the
// binary is evaluated by `eval --json` and by tools/reference/bits_per_byte.py (PyTorch float64 on the
// same token windows, byte and character counts from SentencePiece's Python module, its definition
// checked against decoded documents): loss, loss sum, bits per byte and per character agree to 1e-6
// relative and the counts exactly, and bits per byte is the loss sum / ln 2 / bytes. The checkpoint
// folder gives the export's figures; a folder without tokenizer.model leaves them out with a note,
// and --tokenizer brings them back. On conversations (--chat) eval gives the loss, target count and
// bits per byte that training's validation reported for the same file, padded or packed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "obs/metrics.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using testing::run_cli;
using testing::TempDir;
namespace fs = std::filesystem;

const std::string kSpm = testing::fixture("tokenizer.model");
constexpr int kSteps = 10;

struct TrainedRun {
  TempDir tmp;
  std::string data, hf, checkpoint;
};

// The fixture corpus preprocessed, and a few fp32 steps of the tiny config exported, once per binary.
const TrainedRun& trained() {
  static TrainedRun r;
  static const bool done = [] {
    r.data = r.tmp / "fx_text_document";
    auto pre = run_cli({"preprocess", "--quiet", "--input", testing::fixture("corpus.jsonl"), "--tokenizer-model", kSpm,
                        "--output-prefix", r.tmp / "fx", "--append-eod"});
    EXPECT_TRUE(pre.exited && pre.code == 0) << testing::describe(pre);
    r.hf = r.tmp / "tiny-hf";
    r.checkpoint = r.tmp / ("run/checkpoints/step_" + std::to_string(kSteps));
    auto train = run_cli(
        {"train", testing::source_path("configs/tiny.yaml"), "model.data.data_prefix=[1.0," + r.data + "]",
         "model.tokenizer.model=" + kSpm, "exp_manager.explicit_log_dir=" + (r.tmp / "run"),
         "trainer.max_steps=" + std::to_string(kSteps), "model.optim.sched.warmup_steps=2",
         "trainer.limit_val_batches=0", "trainer.precision=32", "convert_to_hf=true", "model.output_dir=" + r.hf});
    EXPECT_TRUE(train.exited && train.code == 0) << testing::describe(train);
    return true;
  }();
  (void)done;
  return r;
}

nlohmann::json eval_json(const std::string& model, const std::vector<std::string>& extra, std::string* err = nullptr) {
  std::vector<std::string> args = {"eval", model,     "--data", trained().data, "--seq-length",
                                   "32",   "--batch", "3",      "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_cli(args);
  EXPECT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  if (err) *err = r.err;
  return nlohmann::json::parse(r.out);
}

void expect_rel(double got, double want, double tol, const char* what) {
  EXPECT_LE(std::fabs(got - want), tol * std::fabs(want)) << what << ": " << got << " vs " << want;
}

TEST(Eval, BitsPerByteMatchesAnIndependentComputation) {
  if (auto why = testing::python_missing({"numpy", "torch", "sentencepiece"}); !why.empty()) GTEST_SKIP() << why;
  const auto& run = trained();
  const nlohmann::json got = eval_json(run.hf, {});
  ASSERT_TRUE(got.contains("bits_per_byte")) << got.dump();
  std::string out;
  ASSERT_EQ(
      testing::run_capture(testing::system_python() + " " + testing::source_path("tools/reference/bits_per_byte.py") +
                               " " + run.hf + " --data " + run.data + " --seq-length 32",
                           &out),
      0)
      << out;
  const nlohmann::json want = nlohmann::json::parse(out);
  EXPECT_EQ(got["windows"], want["windows"]);
  EXPECT_EQ(got["targets"], want["targets"]);
  EXPECT_EQ(got["bytes"], want["bytes"]);
  EXPECT_EQ(got["chars"], want["chars"]);
  for (const char* key : {"loss", "loss_sum", "bits_per_byte", "bits_per_char"})
    expect_rel(got[key].get<double>(), want[key].get<double>(), 1e-6, key);
  // The definition itself: the summed loss in bits over the bytes (characters).
  const double bits = got["loss_sum"].get<double>() / std::log(2.0);
  expect_rel(got["bits_per_byte"].get<double>(), bits / got["bytes"].get<double>(), 1e-12, "bits / bytes");
  expect_rel(got["bits_per_char"].get<double>(), bits / got["chars"].get<double>(), 1e-12, "bits / chars");
  // The stream exercises what the definition distinguishes.
  EXPECT_GE(want["documents_checked"].get<int>(), 20) << out;
  EXPECT_GT(want["byte_piece_targets"].get<int>(), 20) << out;
  EXPECT_LT(got["chars"].get<int64_t>(), got["bytes"].get<int64_t>());
}

TEST(Eval, CheckpointFolderAndExplicitTokenizerGiveTheSameFigures) {
  const auto& run = trained();
  const nlohmann::json hf = eval_json(run.hf, {});
  const nlohmann::json ck = eval_json(run.checkpoint, {});
  ASSERT_TRUE(ck.contains("bits_per_byte")) << ck.dump();
  EXPECT_EQ(ck["bytes"], hf["bytes"]);
  expect_rel(ck["bits_per_byte"].get<double>(), hf["bits_per_byte"].get<double>(), 1e-12, "checkpoint");

  // Without a tokenizer the figures are left out, and said so; --tokenizer brings them back.
  const std::string bare = run.tmp / "bare";
  fs::remove_all(bare);
  fs::create_directories(bare);
  for (const auto& e : fs::directory_iterator(run.hf))
    if (e.path().filename() != "tokenizer.model") fs::copy(e.path(), bare + "/" + e.path().filename().string());
  std::string err;
  const nlohmann::json none = eval_json(bare, {}, &err);
  EXPECT_FALSE(none.contains("bits_per_byte")) << none.dump();
  EXPECT_FALSE(none.contains("bytes")) << none.dump();
  expect_rel(none["loss"].get<double>(), hf["loss"].get<double>(), 1e-12, "loss without a tokenizer");
  EXPECT_NE(err.find("bits per byte and per character left out"), std::string::npos) << err;
  EXPECT_NE(err.find("--tokenizer"), std::string::npos) << err;
  const nlohmann::json given = eval_json(bare, {"--tokenizer", kSpm});
  EXPECT_EQ(given["bytes"], hf["bytes"]);
  expect_rel(given["bits_per_char"].get<double>(), hf["bits_per_char"].get<double>(), 1e-12, "--tokenizer");

  // The console line carries them too.
  const auto text = run_cli({"eval", run.hf, "--data", run.data, "--seq-length", "32", "--max-windows", "4"});
  ASSERT_TRUE(text.exited && text.code == 0) << testing::describe(text);
  for (const char* s : {"bits per byte", "bits per character", "4 windows of 32 tokens", "bytes,", "characters)"})
    EXPECT_NE(text.out.find(s), std::string::npos) << s << " in\n" << text.out;
}

TEST(Eval, ChatConversationsScoreAsTrainingValidatesThem) {
  TempDir d;
  // 16 conversations of different lengths, {"messages"} and ShareGPT rows, some with a system turn,
  // one of two exchanges, one cut to fit 64 tokens.
  using nlohmann::json;
  auto msg = [](const char* role, const std::string& content) { return json{{"role", role}, {"content", content}}; };
  std::string rows;
  for (int i = 0; i < 16; i++) {
    const std::string q = std::to_string(i) + "+" + std::to_string(3 * i) + "?";
    const std::string ans = std::to_string(4 * i) + (i % 3 ? "." : ", which is even, since four divides it.");
    json row;
    if (i % 4 == 1)
      row = {{"conversations", {{{"from", "human"}, {"value", q}}, {{"from", "gpt"}, {"value", ans}}}}};
    else if (i == 6)
      row = {{"messages",
              {msg("user", q), msg("assistant", ans), msg("user", "And twice that?"), msg("assistant", "Twice.")}}};
    else if (i == 9)
      row = {{"messages", {msg("user", std::string(300, 'a')), msg("assistant", "A long one.")}}};
    else if (i % 2)
      row = {{"messages", {msg("system", "Be brief."), msg("user", q), msg("assistant", ans)}}};
    else
      row = {{"messages", {msg("user", q), msg("assistant", ans)}}};
    rows += row.dump() + "\n";
  }
  const std::string chat = d / "chat.jsonl";
  testing::write_file(chat, rows);
  const std::string tok = testing::source_path("tests/golden/tiny_hf/tokenizer.model");
  // Validation over every conversation once: 2 batches of 8 samples, in fp32.
  const auto train = run_cli(
      {"train", testing::source_path("configs/tiny.yaml"), "model.data.fine_tuning=true", "model.data.chat=true",
       "model.data.chat_template=llama2", "model.data.train_ds.file_names=[" + chat + "]",
       "model.data.validation_ds.file_names=[" + chat + "]", "model.tokenizer.model=" + tok,
       "exp_manager.explicit_log_dir=" + (d / "run"), "trainer.max_steps=2", "model.optim.sched.warmup_steps=1",
       "trainer.val_check_interval=2", "trainer.limit_val_batches=2", "trainer.precision=32"});
  ASSERT_TRUE(train.exited && train.code == 0) << testing::describe(train);
  nlohmann::json val;
  for (const auto& rec : obs::read_metrics(d / "run/metrics.jsonl"))
    if (rec.contains("val_loss")) val = rec;
  ASSERT_FALSE(val.is_null()) << train.out;

  auto eval = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"eval",         d / "run/checkpoints/step_2",
                                     "--chat",       chat,
                                     "--template",   "llama2",
                                     "--seq-length", "64",
                                     "--batch",      "3",
                                     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    EXPECT_TRUE(r.exited && r.code == 0) << testing::describe(r);
    return nlohmann::json::parse(r.out);
  };
  const nlohmann::json padded = eval({});
  EXPECT_EQ(padded["kind"], "chat");
  EXPECT_EQ(padded["conversations"].get<int>(), 16) << padded.dump();
  EXPECT_EQ(padded["samples"].get<int>(), 16);
  EXPECT_EQ(padded["skipped"].get<int>(), 0) << padded.dump();
  EXPECT_GE(padded["truncated"].get<int>(), 1) << padded.dump();
  EXPECT_EQ(padded["targets"].get<int64_t>(), val["val_tokens"].get<int64_t>()) << val.dump();
  expect_rel(padded["loss"].get<double>(), val["val_loss"].get<double>(), 1e-5, "loss vs val_loss");
  expect_rel(padded["bits_per_byte"].get<double>(), val["val_bits_per_byte"].get<double>(), 1e-5, "bits per byte");
  // Only the assistant turns count: far fewer targets than tokens.
  EXPECT_LT(padded["targets"].get<int64_t>(), 16 * 64 / 3);
  // Packed, each conversation attends to itself only and its positions restart: the same targets
  // and losses in fewer samples.
  const nlohmann::json packed = eval({"--pack"});
  EXPECT_LT(packed["samples"].get<int>(), 16) << packed.dump();
  EXPECT_EQ(packed["targets"], padded["targets"]);
  expect_rel(packed["loss_sum"].get<double>(), padded["loss_sum"].get<double>(), 1e-5, "packed loss sum");

  // Nothing to score, and a file without one usable conversation: plain errors that say what to give.
  testing::expect_plain_error(run_cli({"eval", d / "run/checkpoints/step_2"}), {"--data", "--chat"});
  testing::write_file(d / "none.jsonl", R"({"messages": [{"role": "user", "content": "Hi"}]})"
                                        "\n");
  testing::expect_plain_error(
      run_cli({"eval", d / "run/checkpoints/step_2", "--chat", d / "none.jsonl", "--template", "llama2"}),
      {"none.jsonl", "no usable conversation", "assistant"});
}

}  // namespace
}  // namespace llamatrain
