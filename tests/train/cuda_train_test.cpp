// `llamatrain train` on the CUDA backend end to end, with the binary $LLAMATRAIN_CUDA_BIN: the CUDA
// emulation's (llamatrain-cuda-emu, in the default suite) or, on a machine with a GPU, the program
// itself (scripts/device_check.sh). The tiny config trains as the CPU backend does (fp32 within 1e-5
// relative per step, bf16-mixed within 2%) and validates alike; non-finite steps roll back; a run
// killed with SIGKILL and resumed gives bitwise the same losses and checkpoint; a checkpoint written
// on the GPU resumes on the CPU and the other way round; the export is read by `generate` and `eval`
// on both backends alike; two data-parallel ranks (with and without ZeRO-1) give one rank's curve;
// doctor reports the GPU and sums through it; a GPU out of memory and a kernel's fault are named by
// diagnose; tensor and pipeline parallelism on the GPU are a plain error before anything loads.
// Skips where there is no CUDA binary to run.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/backend.h"
#include "obs/metrics.h"
#include "test_util.h"
#include "train/train_runs.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using testing::losses;
using testing::run_in;
using testing::step_range;
using testing::steps_of;
using testing::TempDir;

std::string cuda_bin() {
  const char* b = std::getenv("LLAMATRAIN_CUDA_BIN");
  return b ? b : "";
}

// Whether LLAMATRAIN_CUDA_BIN runs on the emulation (whose memory size and faults a test can set).
bool emulated() {
  std::string out;
  testing::run_capture(cuda_bin() + " doctor 2>&1", &out);
  return out.find("CUDA emulator") != std::string::npos;
}

#define SKIP_WITHOUT_CUDA_BIN()                                                                            \
  if (cuda_bin().empty())                                                                                  \
  GTEST_SKIP() << "needs a CUDA build of llamatrain: LLAMATRAIN_CUDA_BIN (the CUDA emulation, built with " \
                  "libboost-context-dev)"

// The tiny config at sequences of 32 and 4 samples per step (2 micro-batches of 2): the emulation
// runs each thread of each block, and a step of this shape takes it about a second.
const std::vector<std::string> kShape = {"model.encoder_seq_length=32", "model.global_batch_size=4",
                                         "model.micro_batch_size=2"};

// train_args of that shape with the CUDA binary and trainer.accelerator=gpu.
std::vector<std::string> gpu_args(const std::string& dir, std::vector<std::string> extra) {
  extra.insert(extra.begin(), kShape.begin(), kShape.end());
  extra.insert(extra.begin(), "trainer.accelerator=gpu");
  auto a = testing::train_args(dir, extra);
  a[0] = cuda_bin();
  return a;
}

std::vector<std::string> cpu_args(const std::string& dir, std::vector<std::string> extra) {
  extra.insert(extra.begin(), kShape.begin(), kShape.end());
  extra.insert(extra.begin(), "trainer.accelerator=cpu");
  return testing::train_args(dir, extra);
}

// Device-to-host copies in pieces of 1 KiB, so the tiny model's tensors cross many of them.
const std::vector<std::string> kSmallPieces = {"LLAMATRAIN_HOST_PIECE_BYTES=1024"};

void expect_curves_close(const std::string& a, const std::string& b, int steps, double rel, const std::string& what) {
  const auto la = losses(a), lb = losses(b);
  ASSERT_EQ(steps_of(la), step_range(1, steps)) << what;
  ASSERT_EQ(steps_of(lb), step_range(1, steps)) << what;
  for (const auto& [step, loss] : la)
    EXPECT_NEAR(lb.at(step), loss, rel * std::fabs(loss)) << what << ", step " << step;
}

TEST(CudaTrain, FollowsTheCpuCurve) {
  SKIP_WITHOUT_CUDA_BIN();
  TempDir dir;
  for (const auto& [precision, rel] : {std::pair<std::string, double>{"32", 1e-5}, {"bf16-mixed", 0.02}}) {
    SCOPED_TRACE(precision);
    const std::string cpu = dir / ("cpu" + precision), gpu = dir / ("gpu" + precision);
    const std::vector<std::string> extra = {"trainer.max_steps=6", "trainer.precision=" + precision};
    const auto a = run_in(cpu, cpu_args(cpu, extra));
    ASSERT_EQ(a.status, 0) << a.log;
    const auto b = run_in(gpu, gpu_args(gpu, extra), kSmallPieces);
    ASSERT_EQ(b.status, 0) << b.log;
    EXPECT_NE(b.log.find("; device cuda:0 ("), std::string::npos) << b.log;
    EXPECT_NE(testing::read_file(gpu + "/train_log.txt").find("\"device\":\"cuda\""), std::string::npos);
    // The step line and metrics give the GPU's memory in use beside the host's; a CPU run's only the host's.
    EXPECT_NE(b.log.find(" GPU, "), std::string::npos) << b.log;
    EXPECT_EQ(a.log.find(" GPU, "), std::string::npos) << a.log;
    for (const auto& rec : obs::read_metrics(gpu + "/metrics.jsonl"))
      if (rec.contains("loss")) {
        EXPECT_GT(obs::metric_value(rec, "device_memory_bytes"), 0) << rec.dump();
      }
    for (const auto& rec : obs::read_metrics(cpu + "/metrics.jsonl")) EXPECT_FALSE(rec.contains("device_memory_bytes"));
    expect_curves_close(cpu, gpu, 6, rel, "cuda against cpu");
  }
}

// step -> val_loss of metrics.jsonl's validation records.
std::map<int64_t, double> val_losses(const std::string& log_dir) {
  std::map<int64_t, double> out;
  for (const auto& r : obs::read_metrics(log_dir + "/metrics.jsonl"))
    if (r.contains("val_loss")) out[r["step"].get<int64_t>()] = obs::metric_value(r, "val_loss");
  return out;
}

TEST(CudaTrain, ValidatesAndRollsBackAsTheCpuDoes) {
  // Validation every 2 steps on both backends: the same losses (fp32). Three non-finite steps in a
  // row (an injected NaN gradient on the GPU) roll back to the last checkpoint and the run finishes.
  SKIP_WITHOUT_CUDA_BIN();
  TempDir dir;
  const std::vector<std::string> val = {"trainer.max_steps=4", "trainer.val_check_interval=2",
                                        "trainer.limit_val_batches=1"};
  const std::string cpu = dir / "vcpu", gpu = dir / "vgpu";
  ASSERT_EQ(run_in(cpu, cpu_args(cpu, val)).status, 0);
  const auto g = run_in(gpu, gpu_args(gpu, val), kSmallPieces);
  ASSERT_EQ(g.status, 0) << g.log;
  const auto vc = val_losses(cpu), vg = val_losses(gpu);
  ASSERT_EQ(vc.size(), 2u);
  ASSERT_EQ(vg.size(), 2u);
  for (const auto& [step, loss] : vc) EXPECT_NEAR(vg.at(step), loss, 1e-5 * loss) << "validation at step " << step;

  const std::string rb = dir / "rollback";
  const auto r = run_in(rb,
                        gpu_args(rb, {"trainer.max_steps=6", "trainer.max_consecutive_nonfinite=3",
                                      "exp_manager.checkpoint_callback_params.every_n_train_steps=2"}),
                        {"LLAMATRAIN_INJECT_NONFINITE=3,4,5"});
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("rollback: 3 non-finite steps in a row; restored"), std::string::npos) << r.log;
  // (steps 3 and 4 skipped their updates; step 4 still saved its checkpoint, the one restored)
  EXPECT_NE(r.log.find("(step 4); steps 5-5 discarded and samples 16-19 skipped"), std::string::npos) << r.log;
  const auto l = losses(rb);
  ASSERT_TRUE(l.count(6)) << r.log;
  EXPECT_TRUE(std::isfinite(l.at(6)));
}

TEST(CudaTrain, ResumeAfterSigkillIsBitwiseIdentical) {
  SKIP_WITHOUT_CUDA_BIN();
  TempDir dir;
  for (const char* precision : {"32", "bf16-mixed", "bf16"}) {
    SCOPED_TRACE(precision);
    const std::vector<std::string> extra = {"trainer.max_steps=8", std::string("trainer.precision=") + precision,
                                            "exp_manager.resume_if_exists=true",
                                            "exp_manager.checkpoint_callback_params.every_n_train_steps=3",
                                            "exp_manager.checkpoint_callback_params.save_top_k=2"};
    const std::string full = dir / (std::string("full_") + precision), cut = dir / (std::string("cut_") + precision);
    const auto f = run_in(full, gpu_args(full, extra), kSmallPieces);
    ASSERT_EQ(f.status, 0) << f.log;
    fs::create_directories(cut);
    const pid_t pid = testing::spawn(gpu_args(cut, extra), cut + "/stdout.txt", kSmallPieces);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    while (!fs::exists(cut + "/checkpoints/step_3/trainer_state.json") && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ::kill(pid, SIGKILL);
    const auto killed = testing::wait_for(pid, cut + "/stdout.txt");
    ASSERT_EQ(killed.status, 128 + SIGKILL) << "the run ended before it could be killed:\n" << killed.log;
    const auto resumed = run_in(cut, gpu_args(cut, extra), kSmallPieces);
    ASSERT_EQ(resumed.status, 0) << resumed.log;
    EXPECT_NE(resumed.log.find("resumed at step"), std::string::npos) << resumed.log;
    const auto lf = losses(full), lc = losses(cut);
    ASSERT_EQ(steps_of(lf), step_range(1, 8));
    ASSERT_EQ(steps_of(lc), step_range(1, 8));
    for (const auto& [step, loss] : lf) EXPECT_EQ(loss, lc.at(step)) << "step " << step;
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      EXPECT_EQ(testing::read_file(full + "/checkpoints/step_8/" + file),
                testing::read_file(cut + "/checkpoints/step_8/" + file))
          << file << " differs after the resume";
  }
}

TEST(CudaTrain, CheckpointsMoveBetweenTheCpuAndTheGpu) {
  // 4 steps on one backend with a checkpoint at 2, then steps 3-4 again from that checkpoint on the
  // other: the resumed steps follow the uninterrupted run's (fp32, within the backends' difference).
  SKIP_WITHOUT_CUDA_BIN();
  TempDir dir;
  const std::vector<std::string> extra = {"trainer.max_steps=4",
                                          "exp_manager.checkpoint_callback_params.every_n_train_steps=2",
                                          "exp_manager.checkpoint_callback_params.save_top_k=3"};
  for (const bool from_gpu : {true, false}) {
    SCOPED_TRACE(from_gpu ? "gpu -> cpu" : "cpu -> gpu");
    const std::string first = dir / (from_gpu ? "g" : "c"), second = dir / (from_gpu ? "g2c" : "c2g");
    const auto a = run_in(first, from_gpu ? gpu_args(first, extra) : cpu_args(first, extra), kSmallPieces);
    ASSERT_EQ(a.status, 0) << a.log;
    std::vector<std::string> resume = extra;
    resume.push_back("model.resume_from_checkpoint=" + first + "/checkpoints/step_2");
    const auto b = run_in(second, from_gpu ? cpu_args(second, resume) : gpu_args(second, resume), kSmallPieces);
    ASSERT_EQ(b.status, 0) << b.log;
    EXPECT_NE(b.log.find("resumed at step 2"), std::string::npos) << b.log;
    const auto la = losses(first), lb = losses(second);
    ASSERT_EQ(steps_of(lb), step_range(3, 4));
    for (int64_t step : {3, 4}) EXPECT_NEAR(lb.at(step), la.at(step), 1e-5 * la.at(step)) << "step " << step;
  }
}

TEST(CudaTrain, ExportReadsAlikeOnBothBackends) {
  SKIP_WITHOUT_CUDA_BIN();
  TempDir dir;
  const std::string run = dir / "run", hf = dir / "hf";
  const auto r =
      run_in(run, gpu_args(run, {"trainer.max_steps=3", "convert_to_hf=true", "model.output_dir=" + hf}), kSmallPieces);
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("reloaded and checked"), std::string::npos) << r.log;
  // The export's weights are the last checkpoint's (fp32 both).
  EXPECT_EQ(testing::weight_difference(hf, run + "/checkpoints/step_3"), 0.0);
  // Greedy generation from the export: the same ids on the CPU and on the GPU.
  std::string out_cpu, out_gpu;
  const std::string gen = " generate " + hf + " --prompt 'Once upon' --temperature 0 --max-new-tokens 8 --print-ids";
  ASSERT_EQ(testing::run_capture(testing::llamatrain_bin() + gen + " --device cpu", &out_cpu), 0) << out_cpu;
  ASSERT_EQ(testing::run_capture(cuda_bin() + gen + " --device cuda", &out_gpu), 0) << out_gpu;
  EXPECT_EQ(out_cpu, out_gpu);
  EXPECT_FALSE(out_cpu.empty());
  // eval of the same data: the same loss within fp32's difference.
  std::string eval_cpu, eval_gpu;
  const std::string ev = " eval " + hf + " --data " + testing::fixture_prefix() + " --seq-length 32 --json";
  ASSERT_EQ(testing::run_capture(testing::llamatrain_bin() + ev + " --device cpu", &eval_cpu), 0) << eval_cpu;
  ASSERT_EQ(testing::run_capture(cuda_bin() + ev + " --device cuda", &eval_gpu), 0) << eval_gpu;
  const auto jc = nlohmann::json::parse(eval_cpu.substr(eval_cpu.find('{')));
  const auto jg = nlohmann::json::parse(eval_gpu.substr(eval_gpu.find('{')));
  EXPECT_NEAR(jg["loss"].get<double>(), jc["loss"].get<double>(), 1e-5 * jc["loss"].get<double>());
}

TEST(CudaTrain, TwoDataParallelRanksFollowOne) {
  // Two ranks against one, with and without ZeRO-1, through NCCL (the emulation's: over MPI) and
  // through the host: each follows one rank's curve, and the two ways of summing agree bit for bit.
  SKIP_WITHOUT_CUDA_BIN();
  TempDir dir;
  const std::string one = dir / "one";
  auto argv = testing::mpi_train_argv(
      MPIEXEC, 0, one, {"trainer.accelerator=gpu", "trainer.max_steps=4", "model.encoder_seq_length=32"});
  argv[0] = cuda_bin();
  const auto a = run_in(one, argv, kSmallPieces);
  ASSERT_EQ(a.status, 0) << a.log;
  for (const bool zero1 : {false, true}) {
    std::map<std::string, std::map<int64_t, double>> curves;
    for (const char* path : {"nccl", "host"}) {
      SCOPED_TRACE(std::string(zero1 ? "ZeRO-1, " : "all-reduce, ") + path);
      const std::string two = dir / (std::string(zero1 ? "zero1_" : "dp2_") + path);
      auto argv2 =
          testing::mpi_train_argv(MPIEXEC, 2, two,
                                  {"trainer.accelerator=gpu", "trainer.max_steps=4", "model.encoder_seq_length=32",
                                   std::string("model.distributed_optimizer=") + (zero1 ? "true" : "false")});
      for (auto& s : argv2)
        if (s == testing::llamatrain_bin()) s = cuda_bin();
      std::vector<std::string> env = kSmallPieces;
      if (std::string(path) == "host") env.push_back("LLAMATRAIN_GPU_COLLECTIVES=host");
      const auto b = run_in(two, argv2, env);
      ASSERT_EQ(b.status, 0) << b.log;
      EXPECT_NE(b.log.find("data 2 x tensor 1 x pipeline 1"), std::string::npos) << b.log;
      // (a build without NCCL, or one GPU for both ranks, as on a machine with one: the host's sums)
      const bool without_nccl = b.log.find("(this build has no NCCL)") != std::string::npos ||
                                b.log.find("(ranks share a GPU") != std::string::npos;
      EXPECT_NE(
          b.log.find(std::string(path) == "host" || without_nccl ? "gradients are summed through host memory over MPI"
                                                                 : "gradients are summed by NCCL"),
          std::string::npos)
          << b.log;
      expect_curves_close(one, two, 4, 1e-5, "2 ranks against 1");
      if (!without_nccl) curves[path] = losses(two);
    }
    if (curves.size() == 2) {
      EXPECT_EQ(curves["nccl"], curves["host"]) << "NCCL's sums and the host's, two ranks: the same additions";
    }
  }
  // Two ranks on one GPU (NCCL refuses that): the host's sums, and the log says why.
  if (emulated()) {
    const std::string shared = dir / "shared";
    auto argv3 = testing::mpi_train_argv(
        MPIEXEC, 2, shared, {"trainer.accelerator=gpu", "trainer.max_steps=3", "model.encoder_seq_length=32"});
    for (auto& s : argv3)
      if (s == testing::llamatrain_bin()) s = cuda_bin();
    const auto c = run_in(shared, argv3, {"LLAMATRAIN_EMU_DEVICES=1"});
    ASSERT_EQ(c.status, 0) << c.log;
    EXPECT_NE(c.log.find("gradients are summed through host memory over MPI"), std::string::npos) << c.log;
    EXPECT_NE(c.log.find("at a time (ranks share a GPU, which NCCL refuses)"), std::string::npos) << c.log;
  }
}

TEST(CudaTrain, GpuFailuresAreNamedByDiagnose) {
  // Failures of the emulated GPU: its memory too small for the job (preflight's plain error, before
  // anything loads), an allocation that fails while the job runs, and a kernel that faults.
  SKIP_WITHOUT_CUDA_BIN();
  if (!emulated()) GTEST_SKIP() << "the failures are made through the CUDA emulation's settings";
  TempDir dir;
  const std::string small = dir / "small";
  const auto p = run_in(small, gpu_args(small, {"trainer.max_steps=3"}), {"LLAMATRAIN_EMU_DEVICE_MEMORY=2M"});
  ASSERT_NE(p.status, 0) << p.log;
  EXPECT_NE(p.log.find("but the GPU cuda:0 (CUDA emulator"), std::string::npos) << p.log;
  EXPECT_NE(p.log.find(", runtime 0."), std::string::npos) << "the CUDA context and workspace counted:\n" << p.log;
  EXPECT_EQ(p.log.find("loading"), std::string::npos) << p.log;
  struct Case {
    const char* name;
    std::string env, cause, summary, fix;
  };
  for (const Case& c :
       {Case{"oom", "LLAMATRAIN_EMU_OOM_AT_ALLOCATION=20", "gpu_oom", "out of GPU memory", "less GPU memory"},
        Case{"fault", "LLAMATRAIN_EMU_FAULT_AT_LAUNCH=60", "gpu_fault",
             "a kernel faulted on the GPU on rank 0: CUDA call", "LLAMATRAIN_CUDA_SYNC=1"}}) {
    SCOPED_TRACE(c.name);
    const std::string run = dir / c.name;
    const auto r = run_in(run, gpu_args(run, {"trainer.max_steps=3"}), {c.env});
    ASSERT_NE(r.status, 0) << r.log;
    EXPECT_NE(r.log.find("\"code\":\"" + c.cause + "\""), std::string::npos) << r.log;
    std::string out;
    testing::run_capture(testing::llamatrain_bin() + " diagnose --json " + run, &out);
    const auto j = nlohmann::json::parse(out, nullptr, false);
    EXPECT_EQ(j.value("cause", ""), c.cause) << out;
    EXPECT_NE(j.value("summary", "").find(c.summary), std::string::npos) << out;
    EXPECT_NE(j.value("fix", "").find(c.fix), std::string::npos) << out;
  }
}

TEST(CudaTrain, DoctorReportsTheGpuAndItsAllReduce) {
  SKIP_WITHOUT_CUDA_BIN();
  TempDir dir;
  std::string out;
  ASSERT_EQ(testing::run_capture(cuda_bin() + " doctor --run-dir " + (dir / "r1") + " 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("PASS  gpu         cuda:0 "), std::string::npos) << out;
  // Two ranks, each with its GPU: the mean through NCCL of their GPU memory, exact.
  const auto r = run_in(dir / "mpi", {MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-np", "2", cuda_bin(),
                                      "doctor", "--all-ranks", "--run-dir", dir / "r2"});
  EXPECT_NE(r.log.find("mean of 2 ranks' GPU memory exact"), std::string::npos) << r.log;
  if (emulated()) {
    EXPECT_NE(r.log.find("PASS  gpu allreduce  NCCL "), std::string::npos) << r.log;
  }
  // A GPU job on a machine without a GPU (the CPU build's binary): the row fails and says why.
  std::string why;
  if (!model::device_usable(model::Device::cuda, &why)) {
    std::string cpu;
    testing::run_capture(testing::llamatrain_bin() + " doctor --run-dir " + (dir / "r3") + " " +
                             testing::source_path("configs/tiny.yaml") +
                             " trainer.accelerator=gpu model.data.data_prefix=[1.0," + testing::fixture_prefix() +
                             "] model.tokenizer.model=" + testing::fixture("tokenizer.model") + " 2>&1",
                         &cpu);
    EXPECT_NE(cpu.find("FAIL  gpu "), std::string::npos) << cpu;
    EXPECT_NE(cpu.find(" trainer.accelerator=gpu but no usable GPU: " + why), std::string::npos) << cpu;
  }
}

TEST(CudaTrain, ModelParallelLayoutsArePlainErrors) {
  SKIP_WITHOUT_CUDA_BIN();
  TempDir dir;
  for (const char* key : {"model.tensor_model_parallel_size=2", "model.pipeline_model_parallel_size=2"}) {
    const std::string run = dir / "mp";
    auto argv = testing::mpi_train_argv(MPIEXEC, 2, run, {"trainer.accelerator=gpu", key});
    for (auto& s : argv)
      if (s == testing::llamatrain_bin()) s = cuda_bin();
    const auto r = run_in(run, argv);
    EXPECT_NE(r.status, 0) << r.log;
    EXPECT_NE(r.log.find("on GPUs llamatrain trains with data parallelism"), std::string::npos) << r.log;
    EXPECT_NE(r.log.find("hint: set model.tensor_model_parallel_size=1 model.pipeline_model_parallel_size=1"),
              std::string::npos)
        << r.log;
    EXPECT_EQ(r.log.find("loading"), std::string::npos) << "refused before anything loads:\n" << r.log;
  }
}

}  // namespace
}  // namespace llamatrain
