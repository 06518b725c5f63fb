// Data-parallel training under mpirun against one process, through the llamatrain binary on the
// tiny config and the fixture corpus: DP2 reproduces the single-rank fp32 loss curve and weights;
// ZeRO-1 equals plain DP bit for bit (fp32 and bf16 with stochastic rounding); a DP2 ZeRO-1
// checkpoint resumes on one rank and continues the same curve; SIGTERM to mpirun still saves a
// checkpoint; a rank killed with SIGKILL ends the job within seconds; a process count the config does
// not describe is a plain error.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "io/safetensors.h"
#include "obs/metrics.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/train_runs.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using testing::losses;
using testing::RunResult;
using testing::spawn;
using testing::step_range;
using testing::steps_of;
using testing::TempDir;
using testing::train_args;
using testing::wait_for;
using testing::weight_difference;

std::vector<std::string> train_argv(int ranks, const std::string& log_dir, std::vector<std::string> extra) {
  return testing::mpi_train_argv(MPIEXEC, ranks, log_dir, std::move(extra));
}

RunResult train(int ranks, const std::string& log_dir, const std::vector<std::string>& extra) {
  return testing::run_in(log_dir, train_argv(ranks, log_dir, extra));
}

TEST(DataParallelTrain, Dp2ReproducesTheSingleRankCurveAndWeights) {
  // The same 8 samples per step, split 2 x 2 per rank instead of 4 x 2; the gradients differ only in
  // the order of the summation.
  TempDir dir;
  const auto one = train(0, dir / "one", {"trainer.max_steps=20"});
  const auto two = train(2, dir / "two", {"trainer.max_steps=20"});
  ASSERT_EQ(one.status, 0) << one.log;
  ASSERT_EQ(two.status, 0) << two.log;
  EXPECT_NE(two.log.find("data 2 x tensor 1 x pipeline 1; 2 micro-batches of 2 per data-parallel rank"),
            std::string::npos)
      << two.log;
  const auto a = losses(dir / "one"), b = losses(dir / "two");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  double worst = 0;
  for (const auto& [step, loss] : a) {
    EXPECT_NEAR(b.at(step), loss, 1e-5 * loss) << "step " << step;
    worst = std::max(worst, std::fabs(b.at(step) - loss) / loss);
  }
  // As in the model-parallel runs: the tensors as a whole (L2) within 1e-5. A single element may move
  // further (Adam divides by sqrt(v): where an element's gradient is near zero, its order-of-summation
  // difference is amplified, more on CPUs whose kernels block the sums differently).
  const auto w = testing::weight_differences(dir / "one/checkpoints/step_20", dir / "two/checkpoints/step_20");
  EXPECT_LE(w.l2, 1e-5);
  EXPECT_LE(w.max_abs, 1e-4);
  std::printf("DP 2 against one process, 20 steps: worst relative loss difference %.2g, weights %.2g (L2), %.2g "
              "(largest element)\n",
              worst, w.l2, w.max_abs);
  // Each step line and metrics row reports the time in collectives, a part of the step.
  EXPECT_NE(two.log.find("| comm "), std::string::npos) << two.log;
  EXPECT_EQ(one.log.find("| comm "), std::string::npos) << one.log;
  int timed = 0;
  for (const auto& r : obs::read_metrics(dir / "two/metrics.jsonl"))
    if (r.contains("loss")) {
      const double comm = obs::metric_value(r, "comm_time_s"), step = obs::metric_value(r, "step_time_s");
      EXPECT_GT(comm, 0.0) << r.dump();
      EXPECT_LT(comm, step) << r.dump();
      timed++;
    }
  EXPECT_EQ(timed, 20) << "training records in two/metrics.jsonl";
}

TEST(DataParallelTrain, Zero1EqualsPlainDataParallelBitForBit) {
  // ZeRO-1 sums each gradient over the same two ranks (reduce-scatter instead of all-reduce) and
  // updates each element on one rank; bf16-sr keys its rounding by the element's place in its tensor.
  TempDir dir;
  for (const char* precision : {"32", "bf16"}) {
    SCOPED_TRACE(precision);
    const std::string p = std::string("trainer.precision=") + precision;
    const auto plain = train(2, dir / (std::string("plain") + precision), {"trainer.max_steps=12", p});
    // the NeMo-style spelling for one of them
    const auto zero = train(2, dir / (std::string("zero") + precision),
                            {"trainer.max_steps=12", p,
                             std::string(precision) == "32" ? "model.distributed_optimizer=true"
                                                            : "model.optim.distributed_optimizer=true"});
    ASSERT_EQ(plain.status, 0) << plain.log;
    ASSERT_EQ(zero.status, 0) << zero.log;
    EXPECT_NE(zero.log.find("optimizer state sharded (ZeRO-1)"), std::string::npos) << zero.log;
    const auto plain_curve = losses(dir / (std::string("plain") + precision));
    ASSERT_EQ(steps_of(plain_curve), step_range(1, 12)) << plain.log;
    EXPECT_EQ(losses(dir / (std::string("zero") + precision)), plain_curve);
    const std::string a = dir / (std::string("plain") + precision + "/checkpoints/step_12");
    const std::string b = dir / (std::string("zero") + precision + "/checkpoints/step_12");
    EXPECT_EQ(testing::read_file(a + "/model.safetensors"), testing::read_file(b + "/model.safetensors"));
    // ZeRO-1 saves one moment file per rank; plain DP one file
    EXPECT_TRUE(fs::exists(b + "/optimizer-00001-of-00002.safetensors"));
    EXPECT_TRUE(fs::exists(b + "/optimizer-00002-of-00002.safetensors"));
    EXPECT_TRUE(fs::exists(a + "/optimizer.safetensors"));
  }
}

// async_save on two ranks (ZeRO-1's moment file per rank; tensor parallelism's gathered weights)
// writes the same files as saves in place, and the runs' curves are the same.
TEST(DataParallelTrain, AsyncSavesOnTwoRanksWriteTheSameFiles) {
  TempDir dir;
  for (const char* layout : {"model.distributed_optimizer=true", "model.tensor_model_parallel_size=2"}) {
    SCOPED_TRACE(layout);
    const std::vector<std::string> common = {"trainer.max_steps=8", layout,
                                             "exp_manager.checkpoint_callback_params.every_n_train_steps=2",
                                             "exp_manager.checkpoint_callback_params.save_top_k=-1"};
    const std::string name = std::string(layout).substr(6, 5);
    const std::string sync = dir / (name + "_sync"), async = dir / (name + "_async");
    auto in_place = common;
    in_place.push_back("exp_manager.checkpoint_callback_params.async_save=false");
    const auto a = train(2, sync, in_place);
    ASSERT_EQ(a.status, 0) << a.log;
    EXPECT_EQ(a.log.find("written behind training"), std::string::npos) << a.log;
    auto more = common;
    more.push_back("exp_manager.checkpoint_callback_params.async_save=true");
    const auto b = train(2, async, more);
    ASSERT_EQ(b.status, 0) << b.log;
    EXPECT_NE(b.log.find("written behind training: paused "), std::string::npos) << b.log;
    EXPECT_EQ(losses(async), losses(sync));
    for (int step = 2; step <= 8; step += 2) {
      const std::string at = "/checkpoints/step_" + std::to_string(step) + "/";
      int files = 0;
      for (const auto& e : fs::directory_iterator(sync + at)) {
        const std::string f = e.path().filename().string();
        if (!f.ends_with(".safetensors")) continue;
        files++;
        EXPECT_EQ(testing::read_file(sync + at + f), testing::read_file(async + at + f)) << at << f;
      }
      EXPECT_EQ(files, 3) << at;  // the weights and a moment file per rank
      EXPECT_EQ(train::verify_checkpoint(async + at), "") << at;
    }
  }
}

// The llamatrain ranks running under mpirun `launcher`.
std::vector<pid_t> ranks_of(pid_t launcher) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string comm, state;
    int self = 0, ppid = 0;
    stat >> self >> comm >> state >> ppid;
    if (ppid == launcher && comm == "(llamatrain)") out.push_back(self);
  }
  return out;
}

// Starts a run of `ranks` processes and waits until it has logged `steps` losses.
pid_t start_and_wait_for_steps(const std::string& log_dir, const std::vector<std::string>& extra, size_t steps,
                               int ranks = 2) {
  fs::create_directories(log_dir);
  const pid_t mpirun = spawn(train_argv(ranks, log_dir, extra), log_dir + "/stdout.txt");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         !(fs::exists(log_dir + "/metrics.jsonl") && losses(log_dir).size() >= steps))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return mpirun;
}

TEST(DataParallelTrain, Dp2Zero1CheckpointResumesOnOneRankOnTheSameCurve) {
  // A 2-rank ZeRO-1 run whose ranks get SIGTERM (as SLURM's scancel delivers it, to every task, at
  // slightly different moments) stops after one common step and saves one checkpoint with a moment
  // file per rank; a single process resumes it: its curve and final weights are the uninterrupted
  // 2-rank run's.
  TempDir dir;
  const std::vector<std::string> extra = {"trainer.max_steps=300", "exp_manager.resume_if_exists=true",
                                          "exp_manager.checkpoint_callback_params.every_n_train_steps=1000",
                                          "model.distributed_optimizer=true"};
  const auto full = train(2, dir / "full", extra);
  ASSERT_EQ(full.status, 0) << full.log;

  const std::string moved = dir / "moved";
  const pid_t mpirun = start_and_wait_for_steps(moved, extra, 3);
  const auto ranks = ranks_of(mpirun);
  ASSERT_EQ(ranks.size(), 2u) << "llamatrain ranks under mpirun " << mpirun;
  ::kill(ranks[0], SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  ::kill(ranks[1], SIGTERM);
  const auto stopped = wait_for(mpirun, moved + "/stdout.txt");
  EXPECT_NE(stopped.status, 0) << stopped.log;
  EXPECT_NE(stopped.log.find("checkpoint (stop signal)"), std::string::npos) << stopped.log;
  ASSERT_FALSE(losses(moved).empty()) << stopped.log;
  const auto saved = losses(moved).rbegin()->first;
  ASSERT_LT(saved, 300) << "the run finished before the signal";
  std::printf("the ranks stopped after step %lld of 300\n", static_cast<long long>(saved));
  EXPECT_TRUE(
      fs::exists(moved + "/checkpoints/step_" + std::to_string(saved) + "/optimizer-00002-of-00002.safetensors"));

  auto one_rank = extra;
  one_rank.pop_back();  // no ZeRO-1 on one rank: the moments come from both shard files
  const auto second = train(0, moved, one_rank);
  ASSERT_EQ(second.status, 0) << second.log;
  EXPECT_NE(second.log.find("resumed at step " + std::to_string(saved)), std::string::npos) << second.log;
  // The layout changed and the global batch did not: said, and the curve below is the same.
  EXPECT_NE(second.log.find("layout changed since the checkpoint: data 2 x tensor 1 x pipeline 1 -> data 1 x "
                            "tensor 1 x pipeline 1"),
            std::string::npos)
      << second.log;
  EXPECT_NE(second.log.find("gradient accumulation changed since the checkpoint: 2 -> 4 micro-batches of 2 per "
                            "data-parallel rank; the global batch stays 8 samples"),
            std::string::npos)
      << second.log;
  const auto a = losses(dir / "full"), b = losses(moved);
  ASSERT_EQ(steps_of(a), step_range(1, 300)) << full.log;
  ASSERT_EQ(b.size(), 300u);
  for (const auto& [step, loss] : a) EXPECT_NEAR(b.at(step), loss, 1e-5 * loss) << "step " << step;
  EXPECT_LE(weight_difference(dir / "full/checkpoints/step_300", moved + "/checkpoints/step_300"), 1e-5);
  // train_log.txt holds both runs' lines, the stop and the resume
  const auto log = testing::read_file(moved + "/train_log.txt");
  EXPECT_NE(log.find("stopped by signal 15 after step " + std::to_string(saved)), std::string::npos) << log;
  EXPECT_NE(log.find("resumed at step " + std::to_string(saved)), std::string::npos) << log;
}

TEST(DataParallelTrain, SigtermToMpirunSavesACheckpoint) {
  // mpirun stops forwarding output on SIGTERM, then signals the ranks after odls_base_sigkill_timeout
  // and kills them one timeout later. Rank 0, blocked writing to a pty nobody reads, must still save.
  TempDir dir;
  const std::string run = dir / "run";
  ::setenv("OMPI_MCA_odls_base_sigkill_timeout", "5", 1);
  const pid_t mpirun = start_and_wait_for_steps(run, {"trainer.max_steps=200000"}, 5);
  ::unsetenv("OMPI_MCA_odls_base_sigkill_timeout");
  ::kill(mpirun, SIGTERM);
  const auto r = wait_for(mpirun, run + "/stdout.txt");
  EXPECT_NE(r.status, 0) << r.log;
  const auto log = testing::read_file(run + "/train_log.txt");
  ASSERT_FALSE(losses(run).empty()) << r.log;
  const auto saved = losses(run).rbegin()->first;
  EXPECT_NE(log.find("checkpoint (stop signal): " + run + "/checkpoints/step_" + std::to_string(saved)),
            std::string::npos)
      << log.substr(log.size() > 2000 ? log.size() - 2000 : 0);
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step_" + std::to_string(saved) + "/model.safetensors"));
}

TEST(DataParallelTrain, ASigkilledRankEndsTheJob) {
  // DP 2, and TP 2 x PP 2 (the victim is then in the middle of tensor collectives and pipeline sends).
  TempDir dir;
  for (const auto& [n, layout] : std::vector<std::pair<int, std::vector<std::string>>>{
           {2, {}}, {4, {"model.tensor_model_parallel_size=2", "model.pipeline_model_parallel_size=2"}}}) {
    const std::string run = dir / ("run" + std::to_string(n));
    auto extra = layout;
    extra.push_back("trainer.max_steps=1000000");
    const pid_t mpirun = start_and_wait_for_steps(run, extra, 2, n);
    const auto ranks = ranks_of(mpirun);
    ASSERT_EQ(ranks.size(), size_t(n)) << "llamatrain ranks under mpirun " << mpirun;
    const pid_t victim = ranks.back();
    const auto t0 = std::chrono::steady_clock::now();
    ::kill(victim, SIGKILL);
    const auto r = wait_for(mpirun, run + "/stdout.txt");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(r.status, 0) << r.log;
    EXPECT_LT(seconds, 60.0) << r.log;
    std::printf("%d ranks: a killed rank ended the job in %.1f s\n", n, seconds);
  }
}

TEST(DataParallelTrain, AProcessCountTheConfigDoesNotDescribeIsAPlainError) {
  TempDir dir;
  auto argv = train_argv(2, dir / "run", {"trainer.max_steps=5"});
  argv.push_back("trainer.devices=1");  // the last value of a key wins
  fs::create_directories(dir / "run");
  const auto r = wait_for(spawn(argv, dir / "out.txt"), dir / "out.txt");
  EXPECT_NE(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("trainer.devices x trainer.num_nodes = 1 x 1 = 1, but the job has 2 processes"),
            std::string::npos)
      << r.log;
}

}  // namespace
}  // namespace llamatrain
