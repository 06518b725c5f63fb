// `llamatrain train` on the CUDA backend end to end, with the binary $LLAMATRAIN_CUDA_BIN: the CUDA
// emulation's (llamatrain-cuda-emu, in the default suite) or, on a machine with a GPU, the program
// itself (scripts/device_check.sh). The tiny config trains as the CPU backend does (fp32 within 1e-5
// relative per step, bf16-mixed within 2%); a run killed with SIGKILL and resumed gives bitwise the
// same losses and checkpoint; a checkpoint written on the GPU resumes on the CPU and the other way
// round; the export is read by `generate` and `eval` on both backends alike; two data-parallel ranks
// (with and without ZeRO-1) give one rank's curve; tensor and pipeline parallelism on the GPU are a
// plain error before anything loads. Skips where there is no CUDA binary to run.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/kernels.h"
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

#define SKIP_WITHOUT_CUDA_BIN()                                                                         \
  if (cuda_bin().empty())                                                                               \
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
    expect_curves_close(cpu, gpu, 6, rel, "cuda against cpu");
  }
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
  const std::vector<std::string> extra = {"trainer.max_steps=4", "exp_manager.checkpoint_callback_params.every_n_train_steps=2",
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
  const auto r = run_in(run, gpu_args(run, {"trainer.max_steps=3", "convert_to_hf=true", "model.output_dir=" + hf}),
                        kSmallPieces);
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
  SKIP_WITHOUT_CUDA_BIN();
  TempDir dir;
  const std::string one = dir / "one";
  auto argv = testing::mpi_train_argv(MPIEXEC, 0, one,
                                      {"trainer.accelerator=gpu", "trainer.max_steps=4", "model.encoder_seq_length=32"});
  argv[0] = cuda_bin();
  const auto a = run_in(one, argv, kSmallPieces);
  ASSERT_EQ(a.status, 0) << a.log;
  for (const bool zero1 : {false, true}) {
    SCOPED_TRACE(zero1 ? "ZeRO-1" : "all-reduce");
    const std::string two = dir / (zero1 ? "zero1" : "dp2");
    auto argv2 = testing::mpi_train_argv(
        MPIEXEC, 2, two,
        {"trainer.accelerator=gpu", "trainer.max_steps=4", "model.encoder_seq_length=32",
         std::string("model.distributed_optimizer=") + (zero1 ? "true" : "false")});
    for (auto& s : argv2)
      if (s == testing::llamatrain_bin()) s = cuda_bin();
    const auto b = run_in(two, argv2, kSmallPieces);
    ASSERT_EQ(b.status, 0) << b.log;
    EXPECT_NE(b.log.find("data 2 x tensor 1 x pipeline 1"), std::string::npos) << b.log;
    expect_curves_close(one, two, 4, 1e-5, "2 ranks against 1");
  }
}

// Whether LLAMATRAIN_CUDA_BIN runs on the emulation (whose memory size and faults a test can set).
bool emulated() {
  std::string out;
  testing::run_capture(cuda_bin() + " doctor 2>&1", &out);
  return out.find("CUDA emulator") != std::string::npos;
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
  for (const Case& c : {Case{"oom", "LLAMATRAIN_EMU_OOM_AT_ALLOCATION=20", "gpu_oom", "out of GPU memory",
                             "less GPU memory"},
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
  // Two ranks of a GPU job: the sum through the GPUs' memory, exact; two ranks on one GPU, a warning.
  const auto r = run_in(dir / "mpi", {MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-np", "2", cuda_bin(),
                                      "doctor", "--all-ranks", "--run-dir", dir / "r2"});
  EXPECT_NE(r.log.find("PASS  gpu allreduce  host-staged through MPI: sum of 2 ranks' GPU memory exact"),
            std::string::npos)
      << r.log;
  if (emulated()) EXPECT_NE(r.log.find("2 ranks share 1 GPU"), std::string::npos) << r.log;
  // A GPU job on a machine without a GPU (the CPU build's binary): the row fails and says why.
  std::string why;
  if (!model::device_usable(model::Device::cuda, &why)) {
    std::string cpu;
    testing::run_capture(testing::llamatrain_bin() + " doctor --run-dir " + (dir / "r3") + " " +
                             testing::source_path("configs/tiny.yaml") + " trainer.accelerator=gpu model.data.data_prefix=[1.0," +
                             testing::fixture_prefix() + "] model.tokenizer.model=" + testing::fixture("tokenizer.model") +
                             " 2>&1",
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
