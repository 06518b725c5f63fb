// The trainer against the PyTorch reference (tools/reference/, Debian's python3-torch): a 200-step
// fp32 loss curve on the same batches and learning rates, and the Hugging Face export loaded by the
// reference giving the logits our reload gives.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "io/hf_checkpoint.h"
#include "model/llama.h"
#include "obs/metrics.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string preprocess_fixture(const TempDir& dir) {
  std::string out;
  const std::string cmd = testing::llamatrain_bin() + " preprocess --quiet --input " +
                          testing::fixture("corpus.jsonl") + " --tokenizer-model " +
                          testing::fixture("tokenizer.model") + " --output-prefix " + (dir / "fx") + " --append-eod";
  EXPECT_EQ(testing::run_capture(cmd, &out), 0) << out;
  return dir / "fx_text_document";
}

// A random tiny Llama written as an HF folder (the common starting point of both trainers).
std::string write_init(const TempDir& dir) {
  model::LlamaConfig c;
  c.dim = 64, c.ffn_dim = 176, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 512;
  c.max_seq_len = 256, c.norm_eps = 1e-6f;
  model::LlamaModel m(c, model::Precision::fp32, 5);
  m.init_random(0.02f);
  io::save_hf_checkpoint(m, dir / "init", "float32");
  return dir / "init";
}

std::string quote_args(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) {
    s.append(" '");
    s.append(a);
    s.push_back('\'');
  }
  return s;
}

TEST(TrainerReference, Fp32LossCurveMatchesPyTorchFor200Steps) {
  if (auto why = testing::python_missing({"torch", "numpy"}); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string prefix = preprocess_fixture(dir), init = write_init(dir), run = dir / "run";
  const std::vector<std::string> cfg = {testing::source_path("configs/tiny.yaml"),
                                        "model.data.data_prefix=[1.0," + prefix + "]",
                                        "model.tokenizer.model=" + testing::fixture("tokenizer.model"),
                                        "model.init_from=" + init,
                                        "exp_manager.explicit_log_dir=" + run,
                                        "exp_manager.create_checkpoint_callback=false",
                                        "trainer.precision=32",
                                        "trainer.max_steps=200",
                                        "trainer.log_every_n_steps=1",
                                        "trainer.limit_val_batches=0",
                                        "trainer.gradient_clip_val=1.0",
                                        "model.micro_batch_size=2",
                                        "model.global_batch_size=4",
                                        "model.optim.lr=2e-3",
                                        "model.optim.weight_decay=0.1",
                                        "model.optim.betas=[0.9,0.95]",
                                        "model.optim.eps=1e-8",
                                        "model.optim.sched.warmup_steps=10",
                                        "model.optim.sched.min_lr=2e-4"};
  std::string out;
  ASSERT_EQ(testing::run_capture(testing::llamatrain_bin() + " train" + quote_args(cfg), &out), 0) << out;
  ASSERT_EQ(testing::run_capture(testing::llamatrain_bin() + " data samples" + quote_args(cfg) +
                                     " --first 800 --json > " + (dir / "samples.jsonl"),
                                 &out),
            0)
      << out;
  const std::string py = testing::system_python() + " " + testing::source_path("tools/reference/train_curve.py") +
                         " --hf " + init + " --samples " + (dir / "samples.jsonl") + " --metrics " + run +
                         "/metrics.jsonl --steps 200 --micro-batch 2 --global-batch 4 --clip 1.0 --weight-decay 0.1 "
                         "--betas 0.9 0.95 --eps 1e-8";
  ASSERT_EQ(testing::run_capture(py + " 2>/dev/null", &out), 0) << out;
  const auto ref = nlohmann::json::parse(out);
  const auto ours = obs::read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(ours.size(), 200u);
  double worst = 0;
  int worst_step = 0;
  for (int s = 0; s < 200; s++) {
    const double a = obs::metric_value(ours[size_t(s)], "loss"), b = ref["loss"][size_t(s)].get<double>();
    ASSERT_TRUE(std::isfinite(a)) << "step " << s + 1 << ": loss " << a << " in " << ours[size_t(s)].dump();
    const double rel = std::fabs(a - b) / std::fabs(b);
    if (rel > worst) worst = rel, worst_step = s + 1;
  }
  const double first = ref["loss"][0].get<double>(), last = ref["loss"][199].get<double>();
  EXPECT_LT(last, first - 1.0) << "the reference did not learn: the comparison would be weak";
  EXPECT_LE(worst, 1e-4) << "worst relative loss difference at step " << worst_step;
  std::printf("fp32 loss curve vs PyTorch float64: worst relative difference %.3g (step %d), loss %.4f -> %.4f\n",
              worst, worst_step, first, last);
}

TEST(TrainerReference, HfExportLoadsInThePyTorchReferenceWithTheSameLogits) {
  if (auto why = testing::python_missing({"torch", "numpy"}); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string prefix = preprocess_fixture(dir), run = dir / "run";
  for (const char* precision : {"32", "bf16-mixed"}) {
    SCOPED_TRACE(precision);
    const std::string hf = dir / (std::string("hf_") + precision);
    std::string out;
    const std::vector<std::string> cfg = {testing::source_path("configs/tiny.yaml"),
                                          "model.data.data_prefix=[1.0," + prefix + "]",
                                          "model.tokenizer.model=" + testing::fixture("tokenizer.model"),
                                          "exp_manager.explicit_log_dir=" + run + precision,
                                          std::string("trainer.precision=") + precision,
                                          "trainer.max_steps=20",
                                          "trainer.limit_val_batches=0",
                                          "model.optim.sched.warmup_steps=2",
                                          "convert_to_hf=true",
                                          "model.output_dir=" + hf};
    ASSERT_EQ(testing::run_capture(testing::llamatrain_bin() + " train" + quote_args(cfg), &out), 0) << out;
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.model",
                          "tokenizer_config.json", "special_tokens_map.json"})
      EXPECT_TRUE(fs::exists(hf + "/" + f)) << f;
    const auto config = nlohmann::json::parse(testing::read_file(hf + "/config.json"));
    EXPECT_EQ(config["torch_dtype"], std::string(precision) == "32" ? "float32" : "bfloat16");

    const std::vector<int32_t> tokens = {1, 57, 300, 12, 499, 3, 88, 250, 7, 402};
    auto m = io::load_hf_model(hf, model::Precision::fp32);
    const int T = int(tokens.size()), V = m->config().vocab_size;
    m->forward(tokens.data(), nullptr, 1, T);
    std::vector<float> ours(size_t(T) * V);
    m->logits(ours.data());
    std::string cmd =
        testing::system_python() + " " + testing::source_path("tools/reference/hf_logits.py") + " " + hf + " --tokens";
    for (int32_t t : tokens) cmd.append(fmt::format(" {}", t));
    ASSERT_EQ(testing::run_capture(cmd + " 2>/dev/null", &out), 0) << out;
    const auto ref = nlohmann::json::parse(out)["logits"];
    std::vector<double> want;  // (T,V)
    for (int t = 0; t < T; t++)
      for (int v = 0; v < V; v++) want.push_back(ref.at(size_t(t)).at(size_t(v)).get<double>());
    const auto d = testing::max_difference(ours, want);
    EXPECT_LE(d.max_abs, 1e-5 * d.scale) << "logits of the export: ours (fp32) against the float64 reference, "
                                         << "worst element " << d.worst;
  }
}

}  // namespace
}  // namespace llamatrain
