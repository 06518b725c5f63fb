// model.freeze: tensors named by Hugging Face patterns do not train. In the model: the frozen
// weights stay bitwise unchanged through AdamW steps (weight decay on) while the others move, the
// trainable tensors' gradients equal an unfrozen model's, and the gradient and optimizer arenas
// shrink by exactly the frozen parameters' bytes, as LlamaModel::state_parts says. The patterns:
// matched against the HF names, whole tensors only, errors for a pattern that matches nothing, part
// of a tensor, or everything. End to end through the binary: the console line, checkpoints in which
// the frozen tensors keep their bytes, the plan's and bench's figures, the PyTorch reference with
// requires_grad False on the same parameters, TP2, PP2 and DP2 (ZeRO-1) equal to one process, and
// resuming with another model.freeze.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "model/llama.h"
#include "model/memory.h"
#include "obs/metrics.h"
#include "test_util.h"
#include "train/train_runs.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// The anchors' first stage: everything but the embedding and the output layer.
const std::vector<std::string> kLayersAndNorm = {"model.layers.*", "model.norm.weight"};

model::LlamaConfig tiny_config() {
  model::LlamaConfig c;
  c.dim = 32, c.ffn_dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 96;
  c.max_seq_len = 32;
  return c;
}

std::vector<float> tensor_of(model::LlamaModel& m, const std::string& name) {
  for (const auto& s : m.param_specs())
    if (s.name == name) return {m.param_data() + s.offset, m.param_data() + s.offset + s.numel};
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

std::vector<float> grad_of(model::LlamaModel& m, const std::string& name) {
  for (const auto& s : m.param_specs())
    if (s.name == name) {
      EXPECT_FALSE(s.frozen) << name;
      return {m.grad_data() + s.grad_offset, m.grad_data() + s.grad_offset + s.numel};
    }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};
Batch batch(int B, int T, int V, uint32_t seed) {
  Batch b;
  for (int i = 0; i < B * T; i++) {
    b.tokens.push_back(int32_t((uint32_t(i) * 2654435761u + seed * 40503u) % uint32_t(V)));
    b.targets.push_back(int32_t((uint32_t(i) * 7919u + seed * 104729u + 13u) % uint32_t(V)));
  }
  return b;
}

TEST(Freeze, PatternsResolveToWholeTensors) {
  const model::LlamaConfig c = tiny_config();
  EXPECT_EQ(io::frozen_tensors(c, kLayersAndNorm),
            (std::vector<std::string>{"attn_norm", "wqkv", "wo", "ffn_norm", "w13", "w2", "norm"}));
  EXPECT_EQ(io::frozen_tensors(c, {"model.embed_tokens.weight"}), std::vector<std::string>{"wte"});
  EXPECT_EQ(io::frozen_tensors(c, {"model.layers.*.self_attn.*"}), (std::vector<std::string>{"wqkv", "wo"}));
  EXPECT_EQ(io::frozen_tensors(c, {"model.layers.*.mlp.down_proj.weight", "*layernorm*"}),
            (std::vector<std::string>{"attn_norm", "ffn_norm", "w2"}));
  EXPECT_TRUE(io::frozen_tensors(c, {}).empty());
}

TEST(Freeze, PatternErrorsNameThePatternAndTheFix) {
  const model::LlamaConfig c = tiny_config();
  auto message = [&](const std::vector<std::string>& patterns) {
    try {
      io::frozen_tensors(c, patterns);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string none = message({"model.layers.*", "model.layer.*"});
  EXPECT_NE(none.find("model.freeze: 'model.layer.*' matches no parameter"), std::string::npos) << none;
  EXPECT_NE(none.find("model.layers.N.self_attn.q_proj.weight (32, 32)"), std::string::npos) << none;
  EXPECT_NE(none.find("lm_head.weight (96, 32)"), std::string::npos) << none;
  const std::string one_layer = message({"model.layers.0.*"});
  EXPECT_NE(one_layer.find("model.freeze: the patterns match 1 of the 2 parameters (model.layers.0.input_layernorm"
                           ".weight) that the model keeps in one tensor"),
            std::string::npos)
      << one_layer;
  EXPECT_NE(one_layer.find("hint: freeze whole kinds over all layers"), std::string::npos) << one_layer;
  const std::string q_only = message({"model.layers.*.self_attn.q_proj.weight"});
  EXPECT_NE(q_only.find("match 2 of the 6 parameters"), std::string::npos) << q_only;
  const std::string all = message({"*"});
  EXPECT_NE(all.find("freeze every parameter"), std::string::npos) << all;
}

// Frozen weights keep their bits through AdamW steps with weight decay; the trainable ones move and
// get exactly the gradients an unfrozen model computes for them.
void check_frozen_training(model::Precision precision, const std::vector<std::string>& patterns,
                           const std::vector<const char*>& trained, bool tied = false) {
  model::LlamaConfig c = tiny_config();
  c.tie_embeddings = tied;
  model::LlamaModel full(c, precision, 7);
  c.frozen = io::frozen_tensors(c, patterns);
  model::LlamaModel part(c, precision, 7);
  full.init_random(0.05f);
  part.init_random(0.05f);
  const int B = 2, T = 16;
  const Batch b = batch(B, T, c.vocab_size, 1);
  full.zero_grad();
  part.zero_grad();
  full.forward_backward(b.tokens.data(), b.targets.data(), B, T);
  part.forward_backward(b.tokens.data(), b.targets.data(), B, T);
  for (const char* t : trained)
    EXPECT_TRUE(testing::bitwise_equal(std::string("gradient of ") + t, grad_of(part, t), grad_of(full, t)));
  EXPECT_EQ(part.grads().wqkv, nullptr);
  EXPECT_EQ(part.grads().attn_norm, nullptr);

  std::map<std::string, std::vector<float>> before;
  for (const auto& s : part.param_specs()) before[s.name] = tensor_of(part, s.name);
  model::AdamWConfig opt;
  opt.weight_decay = 0.1f;
  for (int step = 1; step <= 4; step++) {
    const Batch bs = batch(B, T, c.vocab_size, uint32_t(step));
    part.zero_grad();
    part.forward_backward(bs.tokens.data(), bs.targets.data(), B, T);
    part.optimizer_step(opt, 1e-2f, step);
  }
  for (const auto& s : part.param_specs()) {
    const auto after = tensor_of(part, s.name);
    if (s.frozen)
      EXPECT_TRUE(testing::bitwise_equal(s.name, after, before[s.name]));
    else
      EXPECT_GT(testing::max_difference(after, before[s.name]).max_abs, 1e-4) << s.name << " did not train";
  }
}

// fp32 and bf16-mixed; the layers and the final norm frozen (the weight-gradient matmuls skipped,
// the gradient flowing on to the embedding; untied and tied), or the embedding and the layers (the
// backward stops after the final norm).
TEST(Freeze, FrozenTensorsStayBitwiseAndTrainableGradientsAreUnchanged) {
  for (const auto precision : {model::Precision::fp32, model::Precision::bf16_mixed}) {
    SCOPED_TRACE(model::precision_name(precision));
    check_frozen_training(precision, kLayersAndNorm, {"wte", "wout"});
    check_frozen_training(precision, kLayersAndNorm, {"wte"}, true);
    check_frozen_training(precision, {"model.embed_tokens.weight", "model.layers.*"}, {"norm", "wout"});
  }
}

// Gradients and AdamW moments exist for the trainable tensors only: the arenas and the analytic
// figure both shrink by the frozen parameters x (4 gradient + 8 moment bytes), or 4 + 4 in bf16-sr,
// and by the frozen share of the moments under ZeRO-1.
TEST(Freeze, StateShrinksByTheFrozenParametersBytes) {
  for (const auto precision : {model::Precision::fp32, model::Precision::bf16_mixed, model::Precision::bf16_sr}) {
    SCOPED_TRACE(model::precision_name(precision));
    model::LlamaConfig c = tiny_config();
    const model::LlamaConfig plain = c;
    c.frozen = io::frozen_tensors(c, kLayersAndNorm);
    const model::ShardPlan single = model::ShardPlan::single(c);
    const int64_t frozen = c.num_params() - model::LlamaModel::num_trainable(c, single);
    EXPECT_EQ(frozen, c.num_params() - 2 * int64_t(c.vocab_size) * c.dim);  // all but wte and wout
    const int64_t per = precision == model::Precision::bf16_sr ? 4 + 4 : 4 + 8;

    const auto a = model::LlamaModel::state_parts(plain, single, precision, 1);
    const auto f = model::LlamaModel::state_parts(c, single, precision, 1);
    EXPECT_EQ(a.weights, f.weights);
    EXPECT_EQ(a.gradients + a.optimizer - f.gradients - f.optimizer, frozen * per);
    const auto z = model::LlamaModel::state_parts(c, single, precision, 2);
    EXPECT_EQ(z.optimizer, (c.num_params() - frozen + 1) / 2 * (per - 4));

    model::LlamaModel m_plain(plain, precision, 3), m_frozen(c, precision, 3);
    m_plain.zero_grad();  // allocates the training state
    m_frozen.zero_grad();
    EXPECT_EQ(m_plain.state_bytes() - m_frozen.state_bytes(), frozen * per);
    EXPECT_EQ(m_frozen.state_bytes(), model::LlamaModel::state_bytes(c, precision));

    // The memory plan (what `llamatrain plan` and the trainer print) says the same.
    const model::TrainingShape shape{precision, 2, 16, model::Recompute::none, -1, 1, 1};
    const auto pa = model::MemoryPlan::for_check(plain, single, shape, -1);
    const auto pf = model::MemoryPlan::for_check(c, single, shape, -1);
    EXPECT_EQ(pa.gradients - pf.gradients, frozen * 4);
    EXPECT_EQ(pa.state - pf.state, frozen * per);
  }
}

// ---- end to end ----

using testing::losses;
using testing::run_in;
using testing::RunResult;

std::string quoted(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

const std::string kFreeze = "model.freeze=[model.layers.*,model.norm.weight]";

// Each tensor of a checkpoint's model.safetensors.
std::map<std::string, std::vector<float>> checkpoint_tensors(const std::string& ckpt) {
  io::SafetensorsCheckpoint f(ckpt + "/model.safetensors");
  std::map<std::string, std::vector<float>> out;
  for (const auto& name : f.names()) {
    const auto& t = f.get(name);
    out[name].resize(size_t(t.numel()));
    f.read_f32(name, t.shape, out[name].data());
  }
  return out;
}

bool is_frozen_name(const std::string& hf) { return hf.rfind("model.layers.", 0) == 0 || hf == "model.norm.weight"; }

TEST(FreezeTrain, FrozenTensorsKeepTheirBytesAndUnfreezingOnResumeTrainsThem) {
  TempDir dir;
  const std::string run = dir / "run";
  const std::vector<std::string> ck = {"exp_manager.checkpoint_callback_params.every_n_train_steps=2",
                                       "exp_manager.checkpoint_callback_params.save_top_k=-1"};
  auto args = testing::train_args(run, {"trainer.max_steps=4", kFreeze, ck[0], ck[1]});
  RunResult r = run_in(run, args);
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("frozen: 19 tensors, "), std::string::npos) << r.log;  // 9 per layer x 2 + the norm
  EXPECT_NE(r.log.find("of the model); training "), std::string::npos) << r.log;
  const auto s2 = checkpoint_tensors(run + "/checkpoints/step_2"), s4 = checkpoint_tensors(run + "/checkpoints/step_4");
  ASSERT_EQ(s2.size(), s4.size());
  int frozen = 0;
  for (const auto& [name, w] : s2) {
    if (is_frozen_name(name)) {
      frozen++;
      EXPECT_TRUE(testing::bitwise_equal(name + " at steps 4 and 2", s4.at(name), w));
    } else {
      EXPECT_GT(testing::max_difference(s4.at(name), w).max_abs, 0.0) << name << " did not train";
    }
  }
  EXPECT_EQ(frozen, 19);
  // The checkpoint records what was frozen and holds no moments of it.
  const auto state = nlohmann::json::parse(testing::read_file(run + "/checkpoints/step_2/trainer_state.json"));
  EXPECT_EQ(state["frozen"].size(), 7u) << state.dump();

  // Resume from step 2 with nothing frozen: one line says so, and the layers train from there.
  const std::string again = dir / "again";
  args = testing::train_args(again, {"trainer.max_steps=4", "model.freeze=[]",
                                     "model.resume_from_checkpoint=" + run + "/checkpoints/step_2", ck[0], ck[1]});
  r = run_in(again, args);
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("unfrozen since the checkpoint (optimizer state starts at zero): "
                       "model.layers.*.input_layernorm.weight, model.layers.*.self_attn.q_proj.weight"),
            std::string::npos)
      << r.log;
  EXPECT_EQ(r.log.find("frozen: "), std::string::npos) << r.log;
  const auto u4 = checkpoint_tensors(again + "/checkpoints/step_4");
  for (const auto& [name, w] : s2)
    EXPECT_GT(testing::max_difference(u4.at(name), w).max_abs, 0.0) << name << " did not train after unfreezing";

  // And freezing on resume drops the optimizer state of what is frozen now.
  const std::string refreeze = dir / "refreeze";
  args = testing::train_args(refreeze, {"model.freeze=[model.layers.*.mlp.*]",
                                        "model.resume_from_checkpoint=" + again + "/checkpoints/step_4",
                                        "trainer.max_steps=6"});
  r = run_in(refreeze, args);
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("frozen since the checkpoint (its optimizer state is dropped): "
                       "model.layers.*.mlp.gate_proj.weight, model.layers.*.mlp.up_proj.weight, "
                       "model.layers.*.mlp.down_proj.weight"),
            std::string::npos)
      << r.log;
}

TEST(FreezeTrain, PatternThatMatchesNothingStopsTheRunAndPlanShowsTheSmallerState) {
  TempDir dir;
  std::string out;
  const auto bad = testing::train_args(dir / "bad", {"model.freeze=[model.layer.*]"});
  std::vector<std::string> tail(bad.begin() + 1, bad.end());
  EXPECT_EQ(testing::run_capture(bad[0] + quoted(tail) + " 2>&1", &out), 1) << out;
  EXPECT_NE(
      out.find("error: model.freeze (override 'model.freeze=[model.layer.*]'): 'model.layer.*' matches no parameter"),
      std::string::npos)
      << out;

  // `llamatrain plan --json`: gradients and optimizer shrink by the frozen parameters' bytes.
  auto plan_json = [&](const std::vector<std::string>& extra) {
    auto a = testing::train_args(dir / "plan", extra);
    a[1] = "plan";
    std::vector<std::string> rest(a.begin() + 1, a.end());
    std::string o;
    EXPECT_EQ(testing::run_capture(a[0] + quoted(rest) + " --json 2>/dev/null", &o), 0) << o;
    return nlohmann::json::parse(o, nullptr, false);
  };
  const auto plain = plan_json({}), frozen = plan_json({kFreeze});
  ASSERT_FALSE(plain.is_discarded());
  ASSERT_FALSE(frozen.is_discarded());
  const auto& pm = plain["memory_per_rank"][0];
  const auto& fm = frozen["memory_per_rank"][0];
  // tiny.yaml: 2 layers 64 wide, 4 heads of 16, 2 kv heads, F 176; frozen: the layers and the final norm.
  const int64_t per_layer = (4 + 2 * 2) * 16 * 64 + 64 * 64 + 3 * 176 * 64 + 2 * 64, n_frozen = 2 * per_layer + 64;
  EXPECT_EQ(pm["gradients"].get<int64_t>() - fm["gradients"].get<int64_t>(), n_frozen * 4) << plain << "\n" << frozen;
  EXPECT_EQ(pm["optimizer"].get<int64_t>() - fm["optimizer"].get<int64_t>(), n_frozen * 8) << plain << "\n" << frozen;
  EXPECT_EQ(pm["weights"], fm["weights"]);
}

// `bench --freeze`: the model's arenas equal the analytic state (bench checks this itself and stops
// otherwise), which leaves out the frozen parameters' gradients and moments.
TEST(FreezeTrain, BenchMeasuresTheFrozenModelsState) {
  auto bench = [](const std::string& freeze) {
    std::string out;
    EXPECT_EQ(testing::run_capture(testing::llamatrain_bin() +
                                       " bench --model tiny --seq 16 --batch 1 --steps 1 --precision fp32 --json" +
                                       freeze + " 2>/dev/null",
                                   &out),
              0)
        << out;
    return nlohmann::json::parse(out, nullptr, false);
  };
  const auto plain = bench(""), frozen = bench(" --freeze 'model.layers.*' model.norm.weight");
  ASSERT_FALSE(plain.is_discarded());
  ASSERT_FALSE(frozen.is_discarded());
  const model::LlamaConfig c = model::preset_config("tiny");
  const int64_t embeddings = int64_t(c.vocab_size) * c.dim * (c.tie_embeddings ? 1 : 2);
  EXPECT_EQ(plain["trainable_params"].get<int64_t>(), c.num_params());
  EXPECT_EQ(frozen["trainable_params"].get<int64_t>(), embeddings);
  // state_mb is rounded to 0.1 MB.
  EXPECT_NEAR(plain["state_mb"].get<double>() - frozen["state_mb"].get<double>(),
              double(c.num_params() - embeddings) * 12 / 1e6, 0.11);
}

// A random tiny Llama written as an HF folder: the common start of both trainers.
std::string write_init(const std::string& dir) {
  model::LlamaConfig c;
  c.dim = 64, c.ffn_dim = 176, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 512;
  c.max_seq_len = 256, c.norm_eps = 1e-6f;
  model::LlamaModel m(c, model::Precision::fp32, 5);
  m.init_random(0.02f);
  io::save_hf_checkpoint(m, dir + "/init", "float32");
  return dir + "/init";
}

TEST(FreezeTrain, LossCurveMatchesPyTorchWithRequiresGradFalse) {
  if (auto why = testing::python_missing({"torch", "numpy"}); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string init = write_init(dir.path()), run = dir / "run";
  const int steps = 20;
  const std::vector<std::string> cfg = {testing::source_path("configs/tiny.yaml"),
                                        "model.data.data_prefix=[1.0," + testing::fixture_prefix() + "]",
                                        "model.tokenizer.model=" + testing::fixture("tokenizer.model"),
                                        "model.init_from=" + init,
                                        "exp_manager.explicit_log_dir=" + run,
                                        "exp_manager.create_checkpoint_callback=false",
                                        "trainer.precision=32",
                                        "trainer.max_steps=" + std::to_string(steps),
                                        "trainer.log_every_n_steps=1",
                                        "trainer.limit_val_batches=0",
                                        "model.micro_batch_size=2",
                                        "model.global_batch_size=4",
                                        "model.optim.lr=2e-3",
                                        "model.optim.weight_decay=0.1",
                                        "model.optim.sched.warmup_steps=5",
                                        "model.freeze=[model.layers.*.self_attn.*,model.layers.*.mlp.*,"
                                        "model.embed_tokens.weight]"};
  std::string out;
  ASSERT_EQ(testing::run_capture(testing::llamatrain_bin() + " train" + quoted(cfg), &out), 0) << out;
  ASSERT_EQ(testing::run_capture(testing::llamatrain_bin() + " data samples" + quoted(cfg) + " --first " +
                                     std::to_string(4 * steps) + " --json > " + (dir / "samples.jsonl"),
                                 &out),
            0)
      << out;
  auto reference = [&](const std::string& freeze) {
    const std::string py = testing::system_python() + " " + testing::source_path("tools/reference/train_curve.py") +
                           " --hf " + init + " --samples " + (dir / "samples.jsonl") + " --metrics " + run +
                           "/metrics.jsonl --steps " + std::to_string(steps) +
                           " --micro-batch 2 --global-batch 4 --clip 1.0 --weight-decay 0.1 --betas 0.9 0.95 "
                           "--eps 1e-8" + freeze;
    std::string o;
    EXPECT_EQ(testing::run_capture(py + " 2>/dev/null", &o), 0) << o;
    return nlohmann::json::parse(o);
  };
  const auto ref = reference(" --freeze 'model.layers.*.self_attn.*' 'model.layers.*.mlp.*' model.embed_tokens.weight");
  const auto unfrozen = reference("");
  const auto ours = obs::read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(ours.size(), size_t(steps));
  double worst = 0, worst_norm = 0, apart = 0;
  for (int s = 0; s < steps; s++) {
    const double a = obs::metric_value(ours[size_t(s)], "loss"), b = ref["loss"][size_t(s)].get<double>();
    worst = std::max(worst, std::fabs(a - b) / std::fabs(b));
    const double ga = obs::metric_value(ours[size_t(s)], "grad_norm"), gb = ref["grad_norm"][size_t(s)].get<double>();
    worst_norm = std::max(worst_norm, std::fabs(ga - gb) / std::fabs(gb));
    apart = std::max(apart, std::fabs(b - unfrozen["loss"][size_t(s)].get<double>()) / std::fabs(b));
  }
  EXPECT_LE(worst, 1e-4);
  EXPECT_LE(worst_norm, 1e-3);  // the norm of the trainable gradients only
  EXPECT_GT(apart, 1e-3) << "freezing changed nothing in the reference: the comparison would be weak";
}

// TP2, PP2 (untied and tied) and DP2 with ZeRO-1 train the same frozen model as one process: the
// same loss curve, and frozen tensors with the same bits; the TP2 checkpoint then resumes on one
// process with everything trainable.
TEST(FreezeTrain, TensorPipelineAndDataParallelRunsEqualOneProcess) {
  TempDir dir;
  const std::vector<std::string> common = {"trainer.max_steps=6", "model.make_vocab_size_divisible_by=16",
                                           "model.optim.eps=1e-5", kFreeze, "convert_to_hf=true"};
  auto train = [&](int ranks, const std::string& name, std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    const std::string log = dir / name;
    return run_in(log, testing::mpi_train_argv(MPIEXEC, ranks, log, extra));
  };
  const std::string tied = "model.share_embeddings_and_output_weights=true";
  struct Case {
    std::string name, reference, layout;
    std::vector<std::string> extra;
  };
  // The tied case: the embedding's gradient summed over the first and last stage.
  const std::vector<Case> cases = {
      {"tp2", "one", "data 1 x tensor 2 x pipeline 1", {"model.tensor_model_parallel_size=2"}},
      {"pp2", "one", "data 1 x tensor 1 x pipeline 2", {"model.pipeline_model_parallel_size=2"}},
      {"dp2", "one", "optimizer state sharded (ZeRO-1)", {"model.distributed_optimizer=true"}},
      {"pp2_tied", "one_tied", "data 1 x tensor 1 x pipeline 2", {"model.pipeline_model_parallel_size=2", tied}}};
  std::map<std::string, std::map<int64_t, double>> reference;
  std::map<std::string, std::map<std::string, std::vector<float>>> start;
  for (const auto& [name, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"one", {}}, {"one_tied", {tied}}}) {
    const RunResult r = train(0, name, extra);
    ASSERT_EQ(r.status, 0) << r.log;
    reference[name] = losses(dir / name);
    ASSERT_EQ(reference[name].size(), 6u);
    start[name] = checkpoint_tensors(dir / (name + "/hf"));
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RunResult r = train(2, c.name, c.extra);
    ASSERT_EQ(r.status, 0) << r.log;
    EXPECT_NE(r.log.find(c.layout), std::string::npos) << r.log;
    const auto curve = losses(dir / c.name);
    const auto& one = reference[c.reference];
    ASSERT_EQ(curve.size(), 6u);
    for (const auto& [step, loss] : curve) EXPECT_NEAR(loss, one.at(step), 1e-5 * one.at(step)) << "step " << step;
    const auto w = checkpoint_tensors(dir / (c.name + "/hf"));
    for (const auto& [t, v] : start[c.reference])
      if (is_frozen_name(t)) {
        EXPECT_TRUE(testing::bitwise_equal(t, w.at(t), v));
      }
  }
  const RunResult r = train(0, "resumed", {"model.freeze=[]", "trainer.max_steps=8",
                                           "model.resume_from_checkpoint=" + (dir / "tp2/checkpoints/step_6")});
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("unfrozen since the checkpoint"), std::string::npos) << r.log;
  EXPECT_EQ(testing::steps_of(losses(dir / "resumed")), testing::step_range(7, 8));
}

}  // namespace
}  // namespace llamatrain
