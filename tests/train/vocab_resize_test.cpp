// Growing the vocabulary on load (model.init_from + a larger model.tokenizer.model), through the
// llamatrain binary on the tiny config: a random 512-row base model with a 512-piece Llama-style
// tokenizer, extended to 640 pieces by tools/reference/vocab_resize.py (new pieces after the base
// ones, two control and three unused among them), and the fixture corpus preprocessed with it.
// Checked: the export of a run whose one step has lr 0 keeps the base rows bitwise, its new rows equal
// the reference's independent means (subword_mean, mean) or random init's values (normal), and its
// logits agree with the PyTorch reference; TP2, PP2 and DP2 with ZeRO-1 reproduce one process's loss
// and weights; a resized run resumes from its checkpoint without resizing again; a smaller tokenizer,
// subword_mean without the base tokenizer, and a tokenizer that moves a base piece are errors; tied
// embeddings grow once, and PP2 (both stages hold them) reproduces one process. 640 rows divide
// every layout used, so no layout pads the vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/hf_checkpoint.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/llama.h"
#include "test_util.h"
#include "train/train_runs.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using testing::losses;
using testing::RunResult;
using testing::step_range;
using testing::steps_of;
using testing::TempDir;

constexpr int kBase = 512, kRows = 640, kC = 64;

struct Fixture {
  TempDir dir;
  std::string base, base_tied, ext, prefix;
};

// A random base model of kBase rows with the Llama-style 512-piece tokenizer, as an HF folder.
void write_base(const std::string& dir, bool tied) {
  model::LlamaConfig c;
  c.dim = kC, c.ffn_dim = 176, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = kBase;
  c.max_seq_len = 256, c.norm_eps = 1e-6f, c.tie_embeddings = tied;
  model::LlamaModel m(c, model::Precision::fp32, 7);
  m.init_random(0.02f);
  io::save_hf_checkpoint(
      m, dir, "float32", 5'000'000'000,
      {{"tokenizer.model", testing::read_file(testing::source_path("tests/golden/tiny_hf/tokenizer.model"))}});
}

// The base folder, the extended tokenizer and the corpus preprocessed with it, once per binary.
const Fixture& fixture() {
  static Fixture x;  // (filled once below; a TempDir is not copied)
  static const bool ready = [] {
    x.base = x.dir / "base";
    x.base_tied = x.dir / "base_tied";
    write_base(x.base, false);
    write_base(x.base_tied, true);
    x.ext = x.dir / "ext.model";
    std::string out;
    EXPECT_EQ(testing::run_capture(testing::system_python() + " " +
                                       testing::source_path("tools/reference/vocab_resize.py") + " extend --base " +
                                       x.base + "/tokenizer.model --corpus " + testing::fixture("corpus.jsonl") +
                                       " --out " + x.ext + " --size " + std::to_string(kRows) + " 2>&1",
                                   &out),
              0)
        << out;
    EXPECT_EQ(testing::run_capture(testing::llamatrain_bin() + " preprocess --quiet --input " +
                                       testing::fixture("corpus.jsonl") + " --tokenizer-model " + x.ext +
                                       " --output-prefix " + (x.dir / "ext") + " --append-eod 2>&1",
                                   &out),
              0)
        << out;
    x.prefix = x.dir / "ext_text_document";
    return true;
  }();
  EXPECT_TRUE(ready);
  return x;
}

// A run starting from the base folder with the extended tokenizer, 8 samples per step.
RunResult train(int ranks, const std::string& log_dir, std::vector<std::string> extra) {
  const Fixture& f = fixture();
  extra.insert(extra.begin(), {"model.init_from=" + f.base, "model.tokenizer.model=" + f.ext,
                               "model.data.data_prefix=[1.0," + f.prefix + "]", "model.optim.eps=1e-5"});
  return testing::run_in(log_dir, testing::mpi_train_argv(MPIEXEC, ranks, log_dir, extra));
}

// One step whose lr is 0 (WSD's warmup starts at 0), exported: the resized model as loaded.
const std::vector<std::string> kNoUpdate = {"trainer.max_steps=1",
                                            "model.optim.sched.name=WSD",
                                            "model.optim.sched.warmup_steps=1",
                                            "model.optim.sched.wsd_decay_steps=1",
                                            "model.optim.sched.constant_steps=null",
                                            "model.optim.sched.max_steps=10",
                                            "exp_manager.create_checkpoint_callback=false",
                                            "convert_to_hf=true"};

std::vector<float> tensor(const std::string& dir, const std::string& name) {
  io::SafetensorsCheckpoint ck(dir);
  const auto& t = ck.get(name);
  std::vector<float> v(size_t(t.numel()));
  ck.read_f32(name, t.shape, v.data());
  return v;
}

// Rows [first, last) of a (rows, kC) tensor.
std::vector<float> rows(const std::vector<float>& t, int64_t first, int64_t last) {
  return {t.begin() + first * kC, t.begin() + last * kC};
}

std::vector<float> flat(const nlohmann::json& rows_json) {
  std::vector<float> v;
  for (const auto& r : rows_json)
    for (const auto& x : r) v.push_back(x.get<float>());
  return v;
}

TEST(VocabResize, ExportedRowsAreTheBaseRowsAndTheReferenceNewRows) {
  if (auto why = testing::python_missing({"torch", "numpy", "sentencepiece", "google.protobuf"}); !why.empty())
    GTEST_SKIP() << why;
  const Fixture& f = fixture();
  TempDir dir;
  const auto base_embed = tensor(f.base, "model.embed_tokens.weight"), base_head = tensor(f.base, "lm_head.weight");
  for (const std::string init : {"subword_mean", "mean", "normal"}) {
    SCOPED_TRACE(init);
    const std::string run = dir / init;
    const auto r = train(0, run, [&] {
      auto e = kNoUpdate;
      e.push_back("model.new_token_init=" + init);
      return e;
    }());
    ASSERT_EQ(r.status, 0) << r.log;
    EXPECT_NE(r.log.find(fmt::format("vocabulary {} -> {} rows: {} new rows by {}", kBase, kRows, kRows - kBase, init)),
              std::string::npos)
        << r.log;
    const std::string hf = run + "/hf";
    EXPECT_EQ(io::read_hf_config(hf).vocab_size, kRows);
    EXPECT_EQ(testing::read_file(hf + "/tokenizer.model"), testing::read_file(f.ext));
    const auto embed = tensor(hf, "model.embed_tokens.weight"), head = tensor(hf, "lm_head.weight");
    ASSERT_EQ(embed.size(), size_t(kRows) * kC);
    ASSERT_EQ(head.size(), size_t(kRows) * kC);
    EXPECT_TRUE(testing::bitwise_equal("base embedding rows", rows(embed, 0, kBase), base_embed));
    EXPECT_TRUE(testing::bitwise_equal("base output rows", rows(head, 0, kBase), base_head));
    if (init == "normal") {
      // The values random init gives those elements of a model of 640 rows with the run's seed and std.
      model::LlamaConfig c = io::read_hf_config(hf);
      model::LlamaModel m(c, model::Precision::fp32, 1234);
      m.init_random(0.02f);
      io::save_hf_checkpoint(m, dir / "random", "float32");
      EXPECT_TRUE(testing::bitwise_equal("new embedding rows", rows(embed, kBase, kRows),
                                         rows(tensor(dir / "random", "model.embed_tokens.weight"), kBase, kRows)));
      EXPECT_TRUE(testing::bitwise_equal("new output rows", rows(head, kBase, kRows),
                                         rows(tensor(dir / "random", "lm_head.weight"), kBase, kRows)));
      continue;
    }
    std::string out;
    ASSERT_EQ(testing::run_capture(testing::system_python() + " " +
                                       testing::source_path("tools/reference/vocab_resize.py") + " rows --hf " +
                                       f.base + " --tokenizer " + f.ext + " --init " + init + " --check-library 2>&1",
                                   &out),
              0)
        << out;
    const auto ref = nlohmann::json::parse(out);
    const auto want_embed = flat(ref["embed"]), want_head = flat(ref["lm_head"]);
    const auto de = testing::max_difference(rows(embed, kBase, kRows), want_embed);
    const auto dh = testing::max_difference(rows(head, kBase, kRows), want_head);
    EXPECT_LE(de.max_abs, 1e-6) << "embedding row element " << de.worst;
    EXPECT_LE(dh.max_abs, 1e-6) << "output row element " << dh.worst;
    std::printf("%s: new rows against the reference: largest difference %.2g (embedding), %.2g (output)\n",
                init.c_str(), de.max_abs, dh.max_abs);
    if (init == "subword_mean") {
      // Most new pieces split into base pieces (so their rows are not the mean); the five special
      // pieces do not.
      int split = 0, special = 0;
      for (const auto& s : ref["splits"]) (s.empty() ? special : split)++;
      EXPECT_EQ(special, 5);
      EXPECT_EQ(split, kRows - kBase - 5);
      EXPECT_NE(r.log.find(fmt::format("{} the mean of their base pieces' rows", split)), std::string::npos) << r.log;
      // The export's logits, in llamatrain and in the PyTorch reference, on new and base ids.
      const std::vector<int32_t> tokens = {1, 520, 37, 600, 639, 300, 515, 2};
      auto m = io::load_hf_model(hf, model::Precision::fp32);
      m->forward(tokens.data(), nullptr, 1, int(tokens.size()));
      std::vector<float> ours(tokens.size() * kRows);
      m->logits(ours.data());
      std::string cmd = testing::system_python() + " " + testing::source_path("tools/reference/hf_logits.py") + " " +
                        hf + " --tokens";
      for (int32_t t : tokens) cmd.append(fmt::format(" {}", t));
      ASSERT_EQ(testing::run_capture(cmd + " 2>/dev/null", &out), 0) << out;
      const auto ref_logits = nlohmann::json::parse(out);
      std::vector<double> want;
      for (const auto& row : ref_logits["logits"])
        for (const auto& x : row) want.push_back(x.get<double>());
      const auto d = testing::max_difference(ours, want);
      EXPECT_LE(d.max_abs, 1e-5 * d.scale) << "logits, worst element " << d.worst;
    }
  }
}

TEST(VocabResize, Tp2Pp2AndZero1ReproduceOneProcess) {
  TempDir dir;
  const std::vector<std::string> steps = {"trainer.max_steps=3"};
  const auto one = train(0, dir / "one", steps);
  ASSERT_EQ(one.status, 0) << one.log;
  const auto ref = losses(dir / "one");
  ASSERT_EQ(steps_of(ref), step_range(1, 3)) << one.log;
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"TP2", {"model.tensor_model_parallel_size=2"}},
           {"PP2", {"model.pipeline_model_parallel_size=2"}},
           {"DP2 ZeRO-1", {"model.distributed_optimizer=true"}}}) {
    SCOPED_TRACE(name);
    const std::string run = dir / fmt::format("r{}", name.size());
    auto e = extra;
    e.insert(e.end(), steps.begin(), steps.end());
    const auto r = train(2, run, e);
    ASSERT_EQ(r.status, 0) << r.log;
    EXPECT_NE(r.log.find(fmt::format("vocabulary {} -> {} rows", kBase, kRows)), std::string::npos) << r.log;
    const auto got = losses(run);
    ASSERT_EQ(steps_of(got), step_range(1, 3)) << r.log;
    double worst = 0;
    for (const auto& [s, loss] : got) worst = std::max(worst, std::fabs(loss - ref.at(s)) / ref.at(s));
    EXPECT_LE(worst, 1e-5);
    const auto w = testing::weight_differences(dir / "one/checkpoints/step_3", run + "/checkpoints/step_3");
    EXPECT_LE(w.l2, 1e-5);
    std::printf("%s against one process, resized model, 3 steps: loss %.2g, weights %.2g (L2)\n", name.c_str(), worst,
                w.l2);
  }
}

// Tied embeddings: one tensor, its new rows the reference's embedding rows; under PP2 both the first
// and the last stage hold it, and the run reproduces one process's.
TEST(VocabResize, TiedEmbeddingsGrowOnceAndPp2ReproducesOneProcess) {
  if (auto why = testing::python_missing({"torch", "numpy", "sentencepiece", "google.protobuf"}); !why.empty())
    GTEST_SKIP() << why;
  const Fixture& f = fixture();
  TempDir dir;
  const std::vector<std::string> tied = {"model.init_from=" + f.base_tied,
                                         "model.share_embeddings_and_output_weights=true"};
  auto e = kNoUpdate;
  e.insert(e.end(), tied.begin(), tied.end());
  const auto r = train(0, dir / "export", e);
  ASSERT_EQ(r.status, 0) << r.log;
  io::SafetensorsCheckpoint ck(dir / "export/hf");
  EXPECT_EQ(ck.find("lm_head.weight"), nullptr);
  const auto embed = tensor(dir / "export/hf", "model.embed_tokens.weight");
  EXPECT_TRUE(
      testing::bitwise_equal("base rows", rows(embed, 0, kBase), tensor(f.base_tied, "model.embed_tokens.weight")));
  std::string out;
  ASSERT_EQ(
      testing::run_capture(testing::system_python() + " " + testing::source_path("tools/reference/vocab_resize.py") +
                               " rows --hf " + f.base_tied + " --tokenizer " + f.ext + " 2>&1",
                           &out),
      0)
      << out;
  const auto ref = nlohmann::json::parse(out);
  EXPECT_FALSE(ref.contains("lm_head"));
  EXPECT_LE(testing::max_difference(rows(embed, kBase, kRows), flat(ref["embed"])).max_abs, 1e-6);
  auto steps = tied;
  steps.push_back("trainer.max_steps=3");
  const auto one = train(0, dir / "one", steps);
  ASSERT_EQ(one.status, 0) << one.log;
  steps.push_back("model.pipeline_model_parallel_size=2");
  const auto pp = train(2, dir / "pp2", steps);
  ASSERT_EQ(pp.status, 0) << pp.log;
  const auto a = losses(dir / "one"), b = losses(dir / "pp2");
  ASSERT_EQ(steps_of(b), step_range(1, 3)) << pp.log;
  for (const auto& [s, loss] : b) EXPECT_LE(std::fabs(loss - a.at(s)) / a.at(s), 1e-5) << "step " << s;
  EXPECT_LE(testing::weight_differences(dir / "one/checkpoints/step_3", dir / "pp2/checkpoints/step_3").l2, 1e-5);
}

TEST(VocabResize, AResizedRunResumesFromItsCheckpoint) {
  TempDir dir;
  const auto a = train(0, dir / "a",
                       {"trainer.max_steps=4", "exp_manager.checkpoint_callback_params.every_n_train_steps=2",
                        "exp_manager.checkpoint_callback_params.save_top_k=-1"});
  ASSERT_EQ(a.status, 0) << a.log;
  ASSERT_EQ(steps_of(losses(dir / "a")), step_range(1, 4)) << a.log;
  const auto b =
      train(0, dir / "b", {"trainer.max_steps=4", "model.resume_from_checkpoint=" + (dir / "a/checkpoints/step_2")});
  ASSERT_EQ(b.status, 0) << b.log;
  EXPECT_NE(b.log.find("resumed at step 2"), std::string::npos) << b.log;
  EXPECT_EQ(b.log.find("new rows by"), std::string::npos) << "a resume loads the checkpoint, it does not resize\n"
                                                          << b.log;
  const auto got = losses(dir / "b"), want = losses(dir / "a");
  ASSERT_EQ(steps_of(got), step_range(3, 4)) << b.log;
  for (const auto& [s, loss] : got) EXPECT_EQ(loss, want.at(s)) << "step " << s;
  EXPECT_EQ(testing::weight_differences(dir / "a/checkpoints/step_4", dir / "b/checkpoints/step_4").max_abs, 0.0);
}

// model.freeze_base_vocab with the layers frozen too (the first stage of EEVE's and Colossal's
// recipes): only the 128 new rows of the embedding and the output layer train, at embedding_lr; the
// base rows and the layers keep the base model's bits on one process, under TP2 (the vocabulary split
// across ranks, each holding base rows) and DP2 with ZeRO-1, whose loss curves are one process's; a
// resume keeps training only the new rows. Without a grown vocabulary it is an error naming the fix.
TEST(VocabResize, FreezeBaseVocabTrainsOnlyTheNewRows) {
  const Fixture& f = fixture();
  TempDir dir;
  const std::vector<std::string> common = {"model.freeze_base_vocab=true",
                                           "model.freeze=[model.layers.*,model.norm.weight]",
                                           "model.optim.embedding_lr=1e-3",
                                           "model.optim.weight_decay=0.1",
                                           "convert_to_hf=true",
                                           "exp_manager.checkpoint_callback_params.every_n_train_steps=2",
                                           "exp_manager.checkpoint_callback_params.save_top_k=-1"};
  auto run = [&](int ranks, const std::string& name, std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return train(ranks, dir / name, extra);
  };
  const auto start = run(0, "start", kNoUpdate);  // the resized model as loaded
  ASSERT_EQ(start.status, 0) << start.log;
  const auto one = run(0, "one", {"trainer.max_steps=4"});
  ASSERT_EQ(one.status, 0) << one.log;
  EXPECT_NE(one.log.find("frozen: 19 tensors and part of 2 others, "), std::string::npos) << one.log;
  const auto ref = losses(dir / "one");
  ASSERT_EQ(steps_of(ref), step_range(1, 4)) << one.log;
  const auto base_embed = tensor(f.base, "model.embed_tokens.weight"), base_head = tensor(f.base, "lm_head.weight");
  const std::string init = dir / "start/hf";
  auto check = [&](const std::string& hf) {
    for (const std::string& name : {std::string("model.embed_tokens.weight"), std::string("lm_head.weight")}) {
      const auto w = tensor(hf, name);
      EXPECT_TRUE(testing::bitwise_equal(name + " base rows", rows(w, 0, kBase),
                                         name == "lm_head.weight" ? base_head : base_embed));
      EXPECT_GT(testing::max_difference(rows(w, kBase, kRows), rows(tensor(init, name), kBase, kRows)).max_abs, 0.0)
          << name << "'s new rows did not train";
    }
    for (const std::string& name :
         {std::string("model.layers.1.mlp.down_proj.weight"), std::string("model.norm.weight")})
      EXPECT_TRUE(testing::bitwise_equal(name, tensor(hf, name), tensor(f.base, name)));
  };
  check(dir / "one/hf");
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"tp2", {"model.tensor_model_parallel_size=2"}}, {"dp2", {"model.distributed_optimizer=true"}}}) {
    SCOPED_TRACE(name);
    auto e = extra;
    e.push_back("trainer.max_steps=4");
    const auto r = run(2, name, e);
    ASSERT_EQ(r.status, 0) << r.log;
    const auto got = losses(dir / name);
    ASSERT_EQ(steps_of(got), step_range(1, 4)) << r.log;
    for (const auto& [s, loss] : got) EXPECT_NEAR(loss, ref.at(s), 1e-5 * ref.at(s)) << "step " << s;
    check(dir / (name + "/hf"));
  }
  // Resumed from step 2 with the same settings: the same steps 3 and 4 (the same rows frozen).
  const auto resumed =
      run(0, "resumed", {"trainer.max_steps=4", "model.resume_from_checkpoint=" + (dir / "one/checkpoints/step_2")});
  ASSERT_EQ(resumed.status, 0) << resumed.log;
  const auto again = losses(dir / "resumed");
  ASSERT_EQ(steps_of(again), step_range(3, 4)) << resumed.log;
  for (const auto& [s, loss] : again) EXPECT_EQ(loss, ref.at(s)) << "step " << s;
  EXPECT_EQ(testing::weight_differences(dir / "one/checkpoints/step_4", dir / "resumed/checkpoints/step_4").max_abs,
            0.0);
  // The base rows have no AdamW moments: the checkpoint stores zeros there, and the new rows' moments.
  for (const std::string& name : {std::string("exp_avg.wte"), std::string("exp_avg_sq.wout")}) {
    const auto m = tensor(dir / "one/checkpoints/step_4/optimizer.safetensors", name);
    ASSERT_EQ(m.size(), size_t(kRows * kC)) << name;
    EXPECT_TRUE(testing::bitwise_equal(name + " base rows", rows(m, 0, kBase), std::vector<float>(kBase * kC, 0.0f)));
    EXPECT_GT(testing::max_difference(rows(m, kBase, kRows), std::vector<float>((kRows - kBase) * kC, 0.0f)).max_abs,
              0.0)
        << name << ": no moments for the new rows";
  }
  // One process resumes the ZeRO-1 run's step 2 (its moments, holes and all, resharded): the same
  // steps 3 and 4 as the uninterrupted run.
  const auto moved =
      run(0, "moved", {"trainer.max_steps=4", "model.resume_from_checkpoint=" + (dir / "dp2/checkpoints/step_2")});
  ASSERT_EQ(moved.status, 0) << moved.log;
  const auto continued = losses(dir / "moved");
  ASSERT_EQ(steps_of(continued), step_range(3, 4)) << moved.log;
  for (const auto& [s, loss] : continued) EXPECT_NEAR(loss, ref.at(s), 1e-5 * ref.at(s)) << "step " << s;

  // The base folder's own tokenizer: nothing grows, so there are no new rows to train alone.
  const auto same = testing::run_in(
      dir / "same",
      testing::mpi_train_argv(MPIEXEC, 0, dir / "same",
                              {"model.init_from=" + f.base, "model.tokenizer.model=" + f.base + "/tokenizer.model",
                               "model.data.data_prefix=[1.0," + testing::fixture_prefix() + "]",
                               "model.freeze_base_vocab=true", "trainer.max_steps=3"}));
  EXPECT_NE(same.status, 0);
  EXPECT_NE(same.log.find("model.freeze_base_vocab: true, but the vocabulary does not grow in this run"),
            std::string::npos)
      << same.log;
  EXPECT_NE(same.log.find("model.freeze: [\"model.embed_tokens.weight[:N]\", \"lm_head.weight[:N]\"]"),
            std::string::npos)
      << same.log;
}

// A checkpoint keeps its tokenizer: resuming with another of as many pieces (one piece's score
// changed) is refused, naming both and the fix; the same tokenizer at another path resumes.
TEST(VocabResize, AResumeWithAnotherTokenizerOfAsManyPiecesIsRefused) {
  if (auto why = testing::python_missing({"sentencepiece", "google.protobuf"}); !why.empty()) GTEST_SKIP() << why;
  const Fixture& f = fixture();
  TempDir dir;
  const std::vector<std::string> ck = {"trainer.max_steps=4",
                                       "exp_manager.checkpoint_callback_params.every_n_train_steps=2",
                                       "exp_manager.checkpoint_callback_params.save_top_k=-1"};
  const auto a = train(0, dir / "a", ck);
  ASSERT_EQ(a.status, 0) << a.log;
  const std::string other = dir / "other.model", copy = dir / "copy.model";
  std::string out;
  ASSERT_EQ(testing::run_capture(
                testing::system_python() +
                    " -c \"import sys; from sentencepiece import sentencepiece_model_pb2 as pb; m = pb.ModelProto(); "
                    "m.ParseFromString(open(sys.argv[1], 'rb').read()); m.pieces[-1].score -= 1.0; "
                    "open(sys.argv[2], 'wb').write(m.SerializeToString())\" " +
                    f.ext + " " + other,
                &out),
            0)
      << out;
  testing::write_file(copy, testing::read_file(f.ext));
  const std::string step2 = dir / "a/checkpoints/step_2";
  auto resume = [&](const std::string& name, const std::string& tokenizer) {
    return train(
        0, dir / name,
        {"trainer.max_steps=4", "model.resume_from_checkpoint=" + step2, "model.tokenizer.model=" + tokenizer});
  };
  const auto refused = resume("other", other);
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.log.find("model.tokenizer.model: " + other + " is not the tokenizer checkpoint " + step2 +
                             " was trained with (" + step2 + "/tokenizer.model)"),
            std::string::npos)
      << refused.log;
  EXPECT_NE(refused.log.find("hint: resume with model.tokenizer.model=" + step2 + "/tokenizer.model"),
            std::string::npos)
      << refused.log;
  const auto same = resume("copy", copy);
  EXPECT_EQ(same.status, 0) << same.log;
  EXPECT_NE(same.log.find("resumed at step 2"), std::string::npos) << same.log;
}

TEST(VocabResize, OnTheGpuAResizeAndAFreezeLoadAndTrainAsOnTheCpu) {
  // The CUDA backend (LLAMATRAIN_CUDA_BIN: the CUDA emulation's binary, or the program on a machine
  // with a GPU): the grown model, written onto the device in pieces, exports the bytes the CPU's does;
  // with the layers frozen, 3 steps follow the CPU's curve and leave the frozen weights as loaded.
  const char* cuda = std::getenv("LLAMATRAIN_CUDA_BIN");
  if (!cuda)
    GTEST_SKIP() << "needs a CUDA build of llamatrain: LLAMATRAIN_CUDA_BIN (the CUDA emulation, built with "
                    "libboost-context-dev)";
  TempDir dir;
  auto on = [&](const std::string& bin, const std::string& run, std::vector<std::string> extra) {
    const Fixture& f = fixture();
    extra.insert(extra.begin(), {"model.init_from=" + f.base, "model.tokenizer.model=" + f.ext,
                                 "model.data.data_prefix=[1.0," + f.prefix + "]", "model.optim.eps=1e-5",
                                 "model.encoder_seq_length=32", "model.micro_batch_size=2", "model.global_batch_size=4",
                                 std::string("trainer.accelerator=") + (bin == cuda ? "gpu" : "cpu")});
    auto argv = testing::train_args(run, extra);
    argv[0] = bin;
    return testing::run_in(run, argv, {"LLAMATRAIN_HOST_PIECE_BYTES=1024"});
  };
  std::vector<std::string> grown = kNoUpdate;
  grown.push_back("model.new_token_init=subword_mean");
  ASSERT_EQ(on(testing::llamatrain_bin(), dir / "cpu", grown).status, 0);
  const auto g = on(cuda, dir / "gpu", grown);
  ASSERT_EQ(g.status, 0) << g.log;
  for (const char* t : {"model.embed_tokens.weight", "lm_head.weight", "model.layers.1.mlp.up_proj.weight"})
    EXPECT_EQ(tensor(dir / "gpu/hf", t), tensor(dir / "cpu/hf", t)) << t;

  const std::vector<std::string> frozen = {"trainer.max_steps=3", "model.freeze=[model.layers.*]"};
  ASSERT_EQ(on(testing::llamatrain_bin(), dir / "fcpu", frozen).status, 0);
  const auto h = on(cuda, dir / "fgpu", frozen);
  ASSERT_EQ(h.status, 0) << h.log;
  const auto lc = losses(dir / "fcpu"), lg = losses(dir / "fgpu");
  ASSERT_EQ(steps_of(lg), step_range(1, 3));
  for (const auto& [step, loss] : lc) EXPECT_NEAR(lg.at(step), loss, 1e-5 * loss) << "step " << step;
  EXPECT_EQ(tensor(dir / "fgpu/checkpoints/step_3", "model.layers.0.self_attn.q_proj.weight"),
            tensor(fixture().base, "model.layers.0.self_attn.q_proj.weight"))
      << "a frozen tensor moved";
}

TEST(VocabResize, PlanReportsTheResize) {
  const Fixture& f = fixture();
  TempDir dir;
  std::string out;
  const auto args =
      testing::train_args(dir / "run", {"model.init_from=" + f.base, "model.tokenizer.model=" + f.ext,
                                        "model.data.data_prefix=[1.0," + f.prefix + "]", "model.new_token_init=mean"});
  std::string cmd = testing::llamatrain_bin() + " plan";
  for (size_t i = 2; i < args.size(); i++) cmd += " '" + args[i] + "'";
  ASSERT_EQ(testing::run_capture(cmd + " 2>&1", &out), 0) << out;
  EXPECT_NE(out.find(fmt::format("vocabulary {} -> {} rows: {} new rows by mean", kBase, kRows, kRows - kBase)),
            std::string::npos)
      << out;
}

TEST(VocabResize, ASmallerTokenizerAMovedPieceAndSubwordMeanWithoutTheBaseTokenizerAreErrors) {
  const Fixture& f = fixture();
  TempDir dir;
  // The fixture tokenizer has 500 pieces, the base folder's 512.
  auto r = testing::run_in(dir / "small",
                           testing::train_args(dir / "small", {"model.init_from=" + f.base, "trainer.max_steps=3"}));
  EXPECT_EQ(r.status, 1) << r.log;
  EXPECT_NE(r.log.find("has 500 pieces, but model.init_from " + f.base + " has a tokenizer.model of 512 pieces"),
            std::string::npos)
      << r.log;
  EXPECT_NE(r.log.find("hint: use the checkpoint's own tokenizer"), std::string::npos) << r.log;
  // The base folder without its tokenizer.model.
  const std::string bare = dir / "bare";
  fs::create_directories(bare);
  for (const char* name : {"config.json", "model.safetensors"}) fs::copy_file(f.base + "/" + name, bare + "/" + name);
  r = train(0, dir / "bare_run", {"model.init_from=" + bare, "trainer.max_steps=3"});
  EXPECT_EQ(r.status, 1) << r.log;
  EXPECT_NE(r.log.find("model.new_token_init: subword_mean splits each new piece"), std::string::npos) << r.log;
  r = train(0, dir / "bare_mean", {"model.init_from=" + bare, "trainer.max_steps=3", "model.new_token_init=mean"});
  EXPECT_EQ(r.status, 0) << r.log;
  // A larger tokenizer that moves a base piece.
  if (testing::python_missing({"sentencepiece", "google.protobuf"}).empty()) {
    const std::string moved = dir / "moved.model";
    std::string out;
    ASSERT_EQ(
        testing::run_capture(testing::system_python() +
                                 " -c 'import sys\n"
                                 "from sentencepiece import sentencepiece_model_pb2 as pb\n"
                                 "m = pb.ModelProto(); m.ParseFromString(open(sys.argv[1], \"rb\").read())\n"
                                 "m.pieces[300].piece, m.pieces[600].piece = m.pieces[600].piece, m.pieces[300].piece\n"
                                 "open(sys.argv[2], \"wb\").write(m.SerializeToString())' " +
                                 f.ext + " " + moved,
                             &out),
        0)
        << out;
    r = train(0, dir / "moved_run", {"model.tokenizer.model=" + moved, "trainer.max_steps=3"});
    EXPECT_EQ(r.status, 1) << r.log;
    EXPECT_NE(r.log.find("does not extend the checkpoint's tokenizer " + f.base + "/tokenizer.model: piece 300"),
              std::string::npos)
        << r.log;
  }
}

}  // namespace
}  // namespace llamatrain
