// `llamatrain plan`: every check on the tiny config and the fixture corpus, each failure caused for
// real (a layout the heads do not divide, token ids beyond the vocabulary, a checkpoint of another
// shape, an output path under a file, a model whose checkpoints cannot fit any disk, memory that an
// accelerator does not have, then the override the plan suggests), the figures against their
// definitions, the calibrated trn1 prediction, and that planning writes nothing; fine-tuning data
// and weights that train refuses before its first step are FAILs of plan with train's own words.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "io/hf_checkpoint.h"
#include "model/machine.h"
#include "model/config.h"
#include "model/backend.h"
#include "obs/throughput.h"
#include "test_util.h"
#include "train/train_runs.h"

namespace llamatrain::testing {
namespace {

using json = nlohmann::json;

std::vector<std::string> plan_args(const std::string& log_dir, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {
      "plan", source_path("configs/tiny.yaml"), "model.data.data_prefix=[1.0," + fixture_prefix() + "]",
      "model.tokenizer.model=" + fixture("tokenizer.model"), "exp_manager.explicit_log_dir=" + log_dir};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

json plan_json(const CliResult& r) {
  EXPECT_TRUE(r.exited) << describe(r);
  try {
    return json::parse(r.out);
  } catch (const json::exception& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\n" << describe(r);
    return json::object();
  }
}

json check(const json& plan, const std::string& what) {
  if (plan.contains("checks"))
    for (const json& c : plan["checks"])
      if (c["what"] == what) return c;
  ADD_FAILURE() << "no check '" << what << "' in " << plan.dump(1);
  return json::object();
}

// A Hugging Face folder of a config.json and a model.safetensors that holds every tensor of that
// config in bf16 with no data written: plan reads the weights' headers only (the tensors' values are
// read when a run starts), and the file is sparse, so a 7B folder takes no disk.
// eps and max_positions as the config file on top states them (tiny: 1e-6, 256; Llama 2: 1e-5, 4096).
std::string hf_folder(const TempDir& dir, const std::string& name, int hidden, int ffn, int layers, int heads,
                      int kv_heads, int vocab, double eps = 1e-5, int max_positions = 4096) {
  const std::string path = dir / name;
  std::filesystem::create_directories(path);
  json c = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_size", hidden},
            {"intermediate_size", ffn},
            {"num_hidden_layers", layers},
            {"num_attention_heads", heads},
            {"num_key_value_heads", kv_heads},
            {"vocab_size", vocab},
            {"max_position_embeddings", max_positions},
            {"rms_norm_eps", eps},
            {"rope_theta", 10000.0},
            {"tie_word_embeddings", false},
            {"bos_token_id", 1},
            {"eos_token_id", 2}};
  write_file(path + "/config.json", c.dump(1));
  model::LlamaConfig config;  // the same model, for the tensors its loader reads
  config.dim = hidden, config.ffn_dim = ffn, config.n_layers = layers, config.n_heads = heads;
  config.n_kv_heads = kv_heads, config.vocab_size = vocab;
  json header = json::object();
  int64_t offset = 0;
  for (const io::HfTensorSlice& t : io::hf_tensor_slices(config)) {
    int64_t bytes = 2;
    for (int64_t d : t.shape) bytes *= d;
    header[t.hf_name] = {{"dtype", "BF16"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string st(8, '\0');
  for (int i = 0; i < 8; i++) st[size_t(i)] = char((uint64_t(h.size()) >> (8 * i)) & 0xff);
  write_file(path + "/model.safetensors", st + h);
  std::filesystem::resize_file(path + "/model.safetensors", 8 + h.size() + uint64_t(offset));  // sparse
  return path;
}

TEST(Plan, TinyPassesWithFiguresThatAddUpAndWritesNothing) {
  TempDir dir;
  const std::string run = dir / "run";
  const CliResult r = run_cli(plan_args(run, {"--json"}));
  ASSERT_EQ(r.code, 0) << describe(r);
  const json p = plan_json(r);
  EXPECT_TRUE(p["ok"].get<bool>());
  EXPECT_EQ(p["layout"]["dp"], 1);
  EXPECT_EQ(p["layout"]["tp"], 1);
  for (const char* what : {"layout", "model", "data", "resume", "outputs", "disk", "memory"})
    EXPECT_EQ(check(p, what).value("status", ""), "PASS") << what << ": " << check(p, what).dump();
  ASSERT_EQ(p["memory_per_rank"].size(), 1u);
  const json& m = p["memory_per_rank"][0];
  int64_t sum = 0;
  for (const char* part :
       {"weights", "gradients", "optimizer", "activations", "communication", "save_gather", "save_copy", "runtime"}) {
    EXPECT_GE(m[part].get<int64_t>(), 0) << part;
    sum += m[part].get<int64_t>();
  }
  EXPECT_EQ(sum, m["total"].get<int64_t>());
  EXPECT_GT(m["runtime"].get<int64_t>(), 1'000'000) << "this process's libraries were not counted";
  // tiny: bf16-mixed, 2 layers of width 64; the model's state from its parameter count (fp32 weights
  // and the bf16 copy, fp32 gradients, two fp32 moments), the tokenizer's 500 pieces padded to 504
  // rows (make_vocab_size_divisible_by 8): memory holds the padding rows, the flops are the real rows'.
  model::LlamaConfig c;
  c.dim = 64, c.ffn_dim = 176, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 504;
  EXPECT_EQ(m["gradients"].get<int64_t>(), c.num_params() * 4);
  EXPECT_EQ(m["optimizer"].get<int64_t>(), c.num_params() * 8);
  // (the bf16 copy: 2 bytes, or 4 where the figures assume bf16 values in floats, the CPU's form
  // without a bf16 matmul kernel)
  ASSERT_TRUE(m["operand_form"] == "bf16" || m["operand_form"] == "bf16_in_f32") << m.dump();
  EXPECT_EQ(m["weights"].get<int64_t>(), c.num_params() * (m["operand_form"] == "bf16" ? 6 : 8));
  if (!model::bf16_matmul_available()) {
    EXPECT_EQ(m["operand_form"], "bf16_in_f32");
  }
  const json& q = p["prediction"];
  c.vocab_size = 500;
  EXPECT_DOUBLE_EQ(q["flops_per_step"].get<double>(), obs::step_flops(c, 8, 64));
  double parts = 0;
  for (const char* part : {"matmul_s", "attention_s", "elementwise_s", "tensor_parallel_s", "pipeline_s",
                           "data_parallel_s", "optimizer_s"})
    parts += q[part].get<double>();
  EXPECT_GT(q["step_s"].get<double>(), 0);
  EXPECT_NEAR(parts, q["step_s"].get<double>(), 1e-9 * parts);
  EXPECT_NEAR(q["tokens_per_s"].get<double>(), 8 * 64 / q["step_s"].get<double>(),
              1e-6 * q["tokens_per_s"].get<double>());
  EXPECT_FALSE(exists(run)) << "plan created the run folder";

  const CliResult text = run_cli(plan_args(run, {}));
  ASSERT_EQ(text.code, 0) << describe(text);
  for (const char* s : {"memory per rank", "weights", "activations by recompute mode", "predicted step", "PASS data",
                        "plan: the job can run"})
    EXPECT_NE(text.out.find(s), std::string::npos) << s << "\n" << text.out;
}

TEST(Plan, EveryPipelineStageOfATensorAndPipelineParallelJob) {
  TempDir dir;
  const CliResult r =
      run_cli(plan_args(dir / "run", {"--nodes", "2", "--ranks-per-node", "2", "model.tensor_model_parallel_size=2",
                                      "model.pipeline_model_parallel_size=2", "--json"}));
  ASSERT_EQ(r.code, 0) << describe(r);
  const json p = plan_json(r);
  EXPECT_EQ(p["nodes"], 2);
  EXPECT_EQ(p["layout"]["tp"], 2);
  EXPECT_EQ(p["layout"]["pp"], 2);
  EXPECT_EQ(p["layout"]["dp"], 1);
  ASSERT_EQ(p["memory_per_rank"].size(), 2u);
  // The last stage holds the lm head and receives activations; the first, the embedding and gradients.
  EXPECT_NE(p["memory_per_rank"][0]["weights"], p["memory_per_rank"][1]["weights"]);
  EXPECT_GT(p["memory_per_rank"][1]["communication"].get<int64_t>(), 0);
  EXPECT_GT(p["prediction"]["pipeline_s"].get<double>(), 0);
  EXPECT_GT(p["prediction"]["tensor_parallel_s"].get<double>(), 0);
}

TEST(Plan, ALayoutThatCannotRunFailsWithTheKey) {
  TempDir dir;
  // 4 heads over 3 tensor-parallel ranks
  const CliResult heads =
      run_cli(plan_args(dir / "run", {"--ranks-per-node", "3", "model.tensor_model_parallel_size=3"}));
  expect_plain_error(heads, {"model.tensor_model_parallel_size"});
  // 3 ranks cannot hold tensor parallel 2
  const CliResult ranks =
      run_cli(plan_args(dir / "run", {"--ranks-per-node", "3", "model.tensor_model_parallel_size=2"}));
  EXPECT_EQ(ranks.code, 1) << describe(ranks);
  EXPECT_NE((ranks.out + ranks.err).find("tensor_model_parallel_size"), std::string::npos) << describe(ranks);
  EXPECT_FALSE(exists(dir / "run"));
}

TEST(Plan, FitNodesNamesTheLargestNodeCountTheLayoutDivides) {
  // What launch/slurm/run.slurm asks when a node range gave it an allocation: how many of the nodes
  // the config's layout can use (the same TP and PP, fewer data-parallel ranks).
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--nodes", "3", "--ranks-per-node", "1", "model.tensor_model_parallel_size=2"}, "2\n"},
      {{"--nodes", "4", "--ranks-per-node", "1", "model.tensor_model_parallel_size=2"}, "4\n"},
      {{"--nodes", "5", "--ranks-per-node", "2", "model.tensor_model_parallel_size=2",
        "model.pipeline_model_parallel_size=2"},
       "4\n"},
      // global batch 6 of micro-batches of 2: 3 data-parallel ranks, or 1, not 2 or 4
      {{"--nodes", "4", "--ranks-per-node", "1", "model.global_batch_size=6", "model.micro_batch_size=2"}, "3\n"},
      {{"--nodes", "2", "--ranks-per-node", "1", "model.global_batch_size=6", "model.micro_batch_size=2"}, "1\n"},
      {{"--nodes", "1", "--ranks-per-node", "1"}, "1\n"},
  };
  for (const Case& c : cases) {
    auto args = plan_args(dir / "run", c.args);
    args.push_back("--fit-nodes");
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 0) << describe(r);
    EXPECT_EQ(r.out, c.expected) << describe(r);
  }
  // No count fits: the error for the nodes given, naming the key.
  auto none = plan_args(dir / "run",
                        {"--nodes", "3", "--ranks-per-node", "1", "model.tensor_model_parallel_size=4", "--fit-nodes"});
  expect_plain_error(run_cli(none), {"model.tensor_model_parallel_size", "does not divide the 3 ranks"});
  // It needs the nodes the job has.
  auto no_nodes = plan_args(dir / "run", {"--fit-nodes"});
  expect_plain_error(run_cli(no_nodes), {"--fit-nodes", "--nodes"});
  EXPECT_FALSE(exists(dir / "run"));
}

TEST(Plan, TokenIdsTheModelCannotHoldFailTheDataCheck) {
  TempDir dir;
  // The fixture corpus has ids up to 499 (a 500-piece tokenizer); a model of 300 ids cannot train on it.
  const std::string small = hf_folder(dir, "small", 64, 176, 2, 4, 2, 300, 1e-6, 256);
  const CliResult r =
      run_cli(plan_args(dir / "run", {"model.init_from=" + small, "model.tokenizer.model=null", "--json"}));
  EXPECT_EQ(r.code, 1) << describe(r);
  const json p = plan_json(r);
  EXPECT_EQ(check(p, "data").value("status", ""), "FAIL");
  EXPECT_NE(check(p, "data").value("detail", "").find("token id 499"), std::string::npos) << check(p, "data");
  EXPECT_NE(check(p, "data").value("detail", "").find(fixture_prefix()), std::string::npos) << check(p, "data");
  EXPECT_EQ(check(p, "memory").value("status", ""), "PASS") << "one failure must not hide the other checks";
  // A vocabulary beyond uint16: the corpus was tokenized with another tokenizer.
  const std::string wide = hf_folder(dir, "wide", 64, 176, 2, 4, 2, 70000, 1e-6, 256);
  const CliResult w =
      run_cli(plan_args(dir / "run", {"model.init_from=" + wide, "model.tokenizer.model=null", "--json"}));
  EXPECT_EQ(w.code, 1) << describe(w);
  EXPECT_NE(check(plan_json(w), "data").value("detail", "").find("uint16"), std::string::npos) << describe(w);
}

TEST(Plan, AResumeChecksTheCheckpointItWouldLoad) {
  TempDir dir;
  const std::string run = dir / "run";
  const RunResult trained = run_in(run, train_args(run, {"trainer.max_steps=3"}));
  ASSERT_EQ(trained.status, 0) << trained.log;
  const CliResult same =
      run_cli(plan_args(run, {"trainer.precision=32", "exp_manager.resume_if_exists=true", "--json"}));
  ASSERT_EQ(same.code, 0) << describe(same);
  const std::string detail = check(plan_json(same), "resume").value("detail", "");
  EXPECT_NE(detail.find("resumes from"), std::string::npos) << detail;
  EXPECT_NE(detail.find("step 3 of"), std::string::npos) << detail;
  const CliResult other =
      run_cli(plan_args(run, {"exp_manager.resume_if_exists=true", "model.hidden_size=128", "--json"}));
  EXPECT_EQ(other.code, 1) << describe(other);
  const json c = check(plan_json(other), "resume");
  EXPECT_EQ(c.value("status", ""), "FAIL");
  EXPECT_NE(c.value("detail", "").find("hidden_size is 64"), std::string::npos) << c;
}

TEST(Plan, OutputsThatCannotBeCreatedFail) {
  TempDir dir;
  write_file(dir / "file", "x");
  const CliResult r = run_cli(plan_args(dir / "file/run", {"--json"}));
  EXPECT_EQ(r.code, 1) << describe(r);
  const json c = check(plan_json(r), "outputs");
  EXPECT_EQ(c.value("status", ""), "FAIL");
  EXPECT_NE(c.value("detail", "").find("not a writable folder"), std::string::npos) << c;
}

TEST(Plan, CheckpointsNoDiskHoldsAndMemoryNoMachineHasFail) {
  TempDir dir;
  // About a trillion parameters: 12 TB per checkpoint.
  const CliResult r =
      run_cli(plan_args(dir / "run", {"model.hidden_size=32768", "model.ffn_hidden_size=131072", "model.num_layers=80",
                                      "model.num_attention_heads=256", "model.num_query_groups=8",
                                      "model.micro_batch_size=1", "model.global_batch_size=8", "--json"}));
  EXPECT_EQ(r.code, 1) << describe(r);
  const json p = plan_json(r);
  EXPECT_EQ(check(p, "disk").value("status", ""), "FAIL") << check(p, "disk");
  EXPECT_NE(check(p, "disk").value("detail", "").find("save_top_k"), std::string::npos);
  EXPECT_EQ(check(p, "memory").value("status", ""), "FAIL") << check(p, "memory");
  EXPECT_NE(r.out.find("\"ok\": false"), std::string::npos);
}

TEST(Plan, MemoryThatDoesNotFitSuggestsAnOverrideThatDoes) {
  TempDir dir;
  // Llama-2-7B's shape on one H100 node without recompute at micro batch 4 x 4096 does not fit 80 GB.
  const std::string seven = hf_folder(dir, "7b", 4096, 11008, 32, 32, 32, 32000);
  std::vector<std::string> a = {"plan",
                                source_path("configs/llama2_7b.yaml"),
                                "model.init_from=" + seven,
                                "model.data.data_prefix=[1.0," + fixture_prefix() + "]",
                                "exp_manager.explicit_log_dir=" + (dir / "run"),
                                "--hardware",
                                "H100",
                                "model.activations_checkpoint_granularity=null",
                                "model.micro_batch_size=4",
                                "model.global_batch_size=128",
                                "model.tensor_model_parallel_size=1",
                                "model.sequence_parallel=false",
                                "trainer.precision=bf16-mixed",
                                "--json"};
  const CliResult r = run_cli(a);
  EXPECT_EQ(r.code, 1) << describe(r);
  const json p = plan_json(r);
  EXPECT_EQ(p["ranks_per_node"], 8) << "an H100 node has 8 GPUs";
  EXPECT_EQ(check(p, "memory").value("status", ""), "FAIL") << check(p, "memory");
  ASSERT_FALSE(p["suggestions"].empty()) << p.dump(1);
  // The first suggestion's overrides, applied, fit.
  const std::string s = p["suggestions"][0];
  const std::string overrides = s.substr(0, s.find(" (a rank"));
  size_t at = 0;
  while (at < overrides.size()) {
    const size_t end = std::min(overrides.find(' ', at), overrides.size());
    a.push_back(overrides.substr(at, end - at));
    at = end + 1;
  }
  const CliResult fixed = run_cli(a);
  EXPECT_EQ(check(plan_json(fixed), "memory").value("status", ""), "PASS") << s << "\n" << describe(fixed);
}

TEST(Plan, TheTrainiumPredictionReproducesItsCalibration) {
  TempDir dir;
  // The seeds' Llama-2-7B on one trn1.32xlarge: TP 8, DP 4, seq 4096, global batch 256: 3.7 seq/s.
  const std::string seven = hf_folder(dir, "7b", 4096, 11008, 32, 32, 32, 32000);
  const CliResult r =
      run_cli({"plan", source_path("configs/llama2_7b.yaml"), "model.init_from=" + seven,
               "model.data.data_prefix=[1.0," + fixture_prefix() + "]", "exp_manager.explicit_log_dir=" + (dir / "run"),
               "--hardware", "trn1.32xlarge", "--nodes", "1", "--json"});
  const json p = plan_json(r);
  EXPECT_EQ(p["ranks_per_node"], 32);
  EXPECT_EQ(p["layout"]["tp"], 8);
  EXPECT_EQ(p["layout"]["dp"], 4);
  EXPECT_NEAR(p["prediction"]["seq_per_s"].get<double>(), 3.7, 0.2) << p["prediction"].dump(1);
  EXPECT_EQ(check(p, "memory").value("status", ""), "PASS") << check(p, "memory");
}

// The arguments of a plan of Llama-2-7B (seq 4096, micro batch 1, full recompute, bf16-mixed, DP only)
// on one node of the named hardware.
std::vector<std::string> seven_b_on(const TempDir& dir, const std::string& hardware,
                                    const std::vector<std::string>& extra = {}) {
  const std::string seven = hf_folder(dir, "7b", 4096, 11008, 32, 32, 32, 32000);
  std::vector<std::string> a = {"plan",
                                source_path("configs/llama2_7b.yaml"),
                                "model.init_from=" + seven,
                                "model.data.data_prefix=[1.0," + fixture_prefix() + "]",
                                "exp_manager.explicit_log_dir=" + (dir / "run"),
                                "--hardware",
                                hardware,
                                "--nodes",
                                "1",
                                "trainer.precision=bf16-mixed",
                                "model.tensor_model_parallel_size=1",
                                "model.sequence_parallel=false",
                                "--json"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(Plan, AGpuJobIsSizedByTheGpuBackendWithItsRuntime) {
  // Llama-2-7B on an H200: the CUDA backend's figures, planned on a machine without a GPU. Analytic:
  // 18 bytes per parameter of state (fp32 weights, their bf16 copy, fp32 gradients, two fp32 moments),
  // the 32 layers' outputs (fp32, kept by full recompute) and one recomputed layer's activations, the
  // lm head's chunk of logits, and the CUDA context: the plan within 10% of that.
  TempDir dir;
  model::LlamaConfig c;
  c.dim = 4096, c.ffn_dim = 11008, c.n_layers = 32, c.n_heads = 32, c.n_kv_heads = 32, c.vocab_size = 32000;
  const double P = double(c.num_params()), N = 4096, C = 4096, F = 11008, L = 32;
  const double layer = N * (3 * C + C + 2 * F + C) * 4 + N * (2 * C + F) * 2;  // qkv, att, h13, resid; bf16 inputs
  const double analytic = P * 18 + L * N * C * 4 + layer + (256 << 20) + (640 << 20);
  json figures[2];
  int i = 0;
  for (const char* cpu_form : {"fp32", "auto"}) {
    // The CPU's operand form (forced to bf16 values in floats, or its own choice) changes no GPU figure.
    ::setenv("LLAMATRAIN_BF16_MATMUL", cpu_form, 1);
    const CliResult r = run_cli(seven_b_on(dir, "H200", {"trainer.accelerator=gpu"}));
    ::unsetenv("LLAMATRAIN_BF16_MATMUL");
    const json p = plan_json(r);
    ASSERT_TRUE(p.contains("memory_per_rank")) << describe(r);
    const json& m = p["memory_per_rank"][0];
    EXPECT_EQ(m["operand_form"], "bf16") << m.dump();
    EXPECT_EQ(m["weights"].get<int64_t>(), int64_t(P) * 6) << "fp32 weights and their bf16 copy";
    EXPECT_GT(m["runtime"].get<int64_t>(), int64_t(600) << 20) << "the CUDA context and workspace";
    EXPECT_NEAR(m["total"].get<double>(), analytic, 0.1 * analytic) << m.dump(1);
    EXPECT_EQ(check(p, "memory").value("status", ""), "PASS") << check(p, "memory");
    EXPECT_EQ(p["memory_available_per_rank"].get<int64_t>(), int64_t(143771) << 20) << "an H200's 143771 MiB";
    figures[i++] = m;
  }
  EXPECT_EQ(figures[0], figures[1]);
}

TEST(Plan, LayoutsAndDevicesAGpuJobCannotHaveFail) {
  TempDir dir;
  // Tensor parallelism on GPUs: refused, as train refuses it.
  json p =
      plan_json(run_cli(seven_b_on(dir, "H200", {"trainer.accelerator=gpu", "model.tensor_model_parallel_size=8"})));
  EXPECT_EQ(check(p, "layout").value("status", ""), "FAIL");
  EXPECT_NE(check(p, "layout").value("detail", "").find("on GPUs llamatrain trains with data parallelism"),
            std::string::npos)
      << check(p, "layout");
  // A config that trains on the cpu, planned for a GPU: a warning that says how.
  p = plan_json(run_cli(seven_b_on(dir, "H200", {"trainer.accelerator=cpu"})));
  EXPECT_EQ(check(p, "device").value("status", ""), "WARN");
  EXPECT_NE(check(p, "device").value("detail", "").find("hint: add trainer.accelerator=gpu"), std::string::npos);
  // A GPU config with no --hardware, on a machine without a GPU: the plan names the option.
  std::string why;
  if (!model::device_usable(model::Device::cuda, &why)) {
    const CliResult r = run_cli(plan_args(dir / "run", {"trainer.accelerator=gpu", "--json"}));
    EXPECT_EQ(r.code, 1) << describe(r);
    p = plan_json(r);
    EXPECT_EQ(check(p, "device").value("status", ""), "FAIL");
    EXPECT_NE(check(p, "device").value("detail", "").find("no usable GPU on this machine (" + why + ")"),
              std::string::npos)
        << check(p, "device");
    EXPECT_NE(check(p, "device").value("detail", "").find("hint: name the GPU the job runs on: --hardware H100"),
              std::string::npos);
  }
}

// The first line of train's error (stderr: "error: ..."), or "" when it ran.
std::string train_refusal(const std::vector<std::string>& cfg) {
  std::vector<std::string> a = {"train"};
  a.insert(a.end(), cfg.begin(), cfg.end());
  const CliResult r = run_cli(a);
  const size_t at = r.err.find("error: ");
  if (at == std::string::npos) return "";
  const size_t end = r.err.find('\n', at);
  return r.err.substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
}

TEST(Plan, WhatTrainRefusesBeforeItsFirstStepFailsThePlanInTrainsWords) {
  TempDir dir;
  write_file(dir / "bad.jsonl", "{\"input\": \"no completion field\"}\nnot json\n");
  std::string rows;
  for (int i = 0; i < 30; i++) rows += "{\"input\": \"Is " + std::to_string(i) + " even?\", \"output\": \"yes\"}\n";
  write_file(dir / "good.jsonl", rows);
  std::string tool_rows;
  for (int i = 0; i < 4; i++)
    tool_rows += R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "",)"
                 R"( "tool_calls": [{"name": "f", "arguments": {}}]}, {"role": "tool", "content": "ok"},)"
                 R"( {"role": "assistant", "content": "done"}]})"
                 "\n";
  write_file(dir / "tools.jsonl", tool_rows);
  // A tokenizer whose tokenizer_config.json holds a template none of the built-in ones renders.
  std::filesystem::create_directories(dir / "gemma");
  std::filesystem::copy_file(fixture("tokenizer.model"), dir / "gemma/tokenizer.model");
  write_file(dir / "gemma/tokenizer_config.json", R"({"chat_template": "{{ bos_token }}<start_of_turn>user"})");
  const std::string bin_only = hf_folder(dir, "bin_only", 64, 176, 2, 4, 2, 500, 1e-6, 256);
  std::filesystem::remove(bin_only + "/model.safetensors");
  write_file(bin_only + "/pytorch_model.bin", "not a zip");
  // Weights of a 2-layer model under a config.json of 3 layers, and of another MLP width.
  const std::string missing = hf_folder(dir, "missing", 64, 176, 2, 4, 2, 500, 1e-6, 256);
  const std::string narrow = hf_folder(dir, "narrow", 64, 176, 2, 4, 2, 500, 1e-6, 256);
  for (const auto& [folder, key, value] :
       {std::tuple{missing, "num_hidden_layers", 3}, {narrow, "intermediate_size", 192}}) {
    json c = json::parse(read_file(folder + "/config.json"));
    c[key] = value;
    write_file(folder + "/config.json", c.dump(1));
  }
  // The fixture corpus with its .bin cut short.
  const std::string cut = dir / "cut_text_document";
  std::filesystem::copy_file(fixture_prefix() + ".idx", cut + ".idx");
  std::filesystem::copy_file(fixture_prefix() + ".bin", cut + ".bin");
  std::filesystem::resize_file(cut + ".bin", std::filesystem::file_size(cut + ".bin") / 2);
  auto sft = [&](const std::string& file, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {source_path("configs/tiny.yaml"), "model.data.fine_tuning=true",
                                  "model.data.train_ds.file_names=[" + file + "]",
                                  "model.tokenizer.model=" + fixture("tokenizer.model"),
                                  "exp_manager.explicit_log_dir=" + (dir / "run")};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto pretrain = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> a = plan_args(dir / "run", extra);
    a.erase(a.begin());  // "plan"
    return a;
  };
  write_file(dir / "a_file", "");
  // what: the plan check that fails; "" for a config error, which stops plan as it stops train.
  // words: what the plan's detail holds, when it is not train's first line (memory and outputs are
  // planned per rank and per folder, and say so in their own figures).
  struct Case {
    Case(std::string n, std::string w, std::vector<std::string> c, std::string p = "")
        : name(std::move(n)), what(std::move(w)), cfg(std::move(c)), words(std::move(p)) {}
    std::string name, what;
    std::vector<std::string> cfg;
    std::string words;
  };
  const std::vector<Case> cases = {
      {"no usable row", "data", sft(dir / "bad.jsonl")},
      {"chat rows without a template to render them", "data", sft(dir / "good.jsonl", {"model.data.chat=true"})},
      {"tool calls the chat template cannot render", "data",
       sft(dir / "tools.jsonl", {"model.data.chat=true", "model.data.chat_template=llama2"})},
      {"a chat template none of the built-in ones renders", "data",
       sft(dir / "tools.jsonl", {"model.data.chat=true", "model.tokenizer.model=" + (dir / "gemma/tokenizer.model")})},
      {"fine-tuning data that does not exist", "layout", sft(dir / "none.jsonl")},
      {"a pytorch_model.bin that is not a torch.save archive", "weights", pretrain({"model.init_from=" + bin_only})},
      {"weights that miss a layer's tensors", "weights",
       pretrain({"model.init_from=" + missing, "model.num_layers=3"})},
      {"weights of another shape", "weights", pretrain({"model.init_from=" + narrow, "model.ffn_hidden_size=192"})},
      {"a .bin shorter than its .idx", "data", pretrain({"model.data.data_prefix=[1.0," + cut + "]"})},
      {"a tokenizer that does not exist", "layout", pretrain({"model.tokenizer.model=" + (dir / "none.model")})},
      {"a blend weight below zero", "", pretrain({"model.data.data_prefix=[-1.0," + fixture_prefix() + "]"})},
      {"an unknown key", "", pretrain({"model.frobnicate=1"})},
      {"an export folder under a file", "layout",
       pretrain({"model.convert_to_hf=true", "model.output_dir=" + (dir / "a_file/hf")})},
      {"a log folder under a file", "outputs", pretrain({"exp_manager.explicit_log_dir=" + (dir / "a_file/run")}),
       "is not a writable folder"},
      {"a model no memory here holds", "memory",
       pretrain({"model.hidden_size=8192", "model.ffn_hidden_size=22016", "model.num_layers=16",
                 "model.num_attention_heads=64", "model.num_query_groups=64"}),
       "a rank needs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string refusal = train_refusal(c.cfg);
    ASSERT_FALSE(refusal.empty()) << "train must refuse this";
    std::vector<std::string> a = {"plan"};
    a.insert(a.end(), c.cfg.begin(), c.cfg.end());
    if (c.what.empty()) {
      const CliResult r = run_cli(a);
      EXPECT_NE(r.code, 0) << describe(r);
      EXPECT_NE(r.err.find("error: " + refusal), std::string::npos) << "train said: " << refusal << "\n" << describe(r);
      continue;
    }
    a.push_back("--json");
    const CliResult r = run_cli(a);
    EXPECT_EQ(r.code, 1) << describe(r);
    const json got = check(plan_json(r), c.what);
    EXPECT_EQ(got.value("status", ""), "FAIL") << got;
    EXPECT_NE(got.value("detail", "").find(c.words.empty() ? refusal : c.words), std::string::npos)
        << "train said: " << refusal << "\n"
        << got;
  }
  // Packed fine-tuning data passes, and the plan says how the examples fill the samples.
  auto packed = sft(dir / "good.jsonl");
  packed.insert(packed.begin(), "plan");
  packed.insert(packed.end(), {"model.data.train_ds.pack=true", "--json"});
  const CliResult r = run_cli(packed);
  EXPECT_EQ(r.code, 0) << describe(r);
  const json data = check(plan_json(r), "data");
  EXPECT_EQ(data.value("status", ""), "PASS") << data;
  EXPECT_NE(data.value("detail", "").find("packed 30 examples into"), std::string::npos) << data;
}

// The step prediction of fine-tuning data knows its samples: tokens/s counts text, not padding, and
// packed examples' attention stops at their boundaries (rates of a named GPU: the same on any machine).
TEST(Plan, ThePredictedStepKnowsPaddingAndPacking) {
  TempDir dir;
  std::string rows;
  for (int i = 0; i < 30; i++) rows += "{\"input\": \"Is " + std::to_string(i) + " even?\", \"output\": \"yes\"}\n";
  write_file(dir / "rows.jsonl", rows);
  const std::vector<std::string> gpu = {"--hardware", "H100", "--ranks-per-node", "1", "--json"};
  auto predict = [&](std::vector<std::string> a) {
    a.insert(a.begin(), "plan");
    a.insert(a.end(), gpu.begin(), gpu.end());
    const CliResult r = run_cli(a);
    EXPECT_EQ(r.code, 0) << describe(r);
    return plan_json(r);
  };
  std::vector<std::string> corpus = plan_args(dir / "run", {});
  corpus.erase(corpus.begin());  // "plan"
  const json pretrain = predict(corpus);
  const std::vector<std::string> sft = {source_path("configs/tiny.yaml"), "model.data.fine_tuning=true",
                                        "model.data.train_ds.file_names=[" + (dir / "rows.jsonl") + "]",
                                        "model.tokenizer.model=" + fixture("tokenizer.model"),
                                        "exp_manager.explicit_log_dir=" + (dir / "run")};
  const json padded = predict(sft);
  auto with_pack = sft;
  with_pack.push_back("model.data.train_ds.pack=true");
  const json packed = predict(with_pack);
  const json &a = pretrain["prediction"], &b = padded["prediction"], &c = packed["prediction"];
  EXPECT_EQ(a["text_fraction"].get<double>(), 1.0);
  const int T = 64;  // configs/tiny.yaml
  for (const json* q : {&a, &b, &c})
    EXPECT_NEAR((*q)["tokens_per_s"].get<double>(),
                (*q)["seq_per_s"].get<double>() * T * (*q)["text_fraction"].get<double>(),
                1e-9 * (*q)["tokens_per_s"].get<double>());
  // Padded: short rows, most of each sample padding, attention as one causal sequence.
  EXPECT_LT(b["text_fraction"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(b["attention_s"].get<double>(), a["attention_s"].get<double>());
  EXPECT_DOUBLE_EQ(b["matmul_s"].get<double>(), a["matmul_s"].get<double>());
  EXPECT_LT(b["flops_per_step"].get<double>(), a["flops_per_step"].get<double>());
  // Packed: the padding the packer reports, and attention only within each example.
  const std::string detail = check(packed, "data").value("detail", "");
  const size_t at = detail.find("% padding");
  ASSERT_NE(at, std::string::npos) << detail;
  const double padding = std::stod(detail.substr(detail.rfind(' ', at) + 1)) / 100;
  EXPECT_NEAR(1 - c["text_fraction"].get<double>(), padding, 0.0006) << detail;
  EXPECT_GT(c["text_fraction"].get<double>(), 2 * b["text_fraction"].get<double>());
  EXPECT_LT(c["attention_s"].get<double>(), 0.5 * a["attention_s"].get<double>());
  EXPECT_DOUBLE_EQ(c["matmul_s"].get<double>(), a["matmul_s"].get<double>());
}

TEST(Plan, UnknownHardwareIsAPlainError) {
  TempDir dir;
  expect_plain_error(run_cli(plan_args(dir / "run", {"--hardware", "tpu9"})),
                     {"--hardware tpu9", "H100", "trn1.32xlarge"});
}

}  // namespace
}  // namespace llamatrain::testing
