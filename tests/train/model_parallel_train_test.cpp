// Tensor-, sequence- and pipeline-parallel training under mpirun against one process, through the
// llamatrain binary on the tiny config (4 layers here, so that 4 stages have a layer each) and the
// fixture corpus: every layout reproduces the single-rank fp32 loss curve over 20 steps within 1e-5
// and its final weights within 1e-5; a DP2 x TP2 checkpoint resumes on PP2 and on one rank and
// continues the curve. The vocabulary is padded to a multiple of 16 in every run (Megatron pads to
// make_vocab_size_divisible_by x TP), so all layouts train the same model.
//
// Weights are compared by each tensor's relative L2 difference ||a - b|| / ||a||, in runs with AdamW's
// eps at 1e-5. Pipeline stages do the single rank's arithmetic exactly (difference 0); tensor
// parallelism sums the row-parallel products in another order, and with NeMo's eps of 1e-8 AdamW
// turns the resulting ~1e-7 differences of gradients that are nearly 0 into steps of about lr, which
// no summation order survives: the same single-rank run with micro-batches of 1 instead of 2 (the
// same math) ends 3e-5 apart in L2 (5e-4 in its largest element) after 20 steps, TP 2 2.6e-6 (6e-5).
// With eps 1e-5 the steps of such gradients stay small and the comparison measures the layouts:
// TP 2 5e-7 in L2 (3e-6 in the largest element), micro-batches of 1 4e-7 (3e-6), TP 4 8e-7 (5e-6).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

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

const std::vector<std::string> kModel = {"model.num_layers=4", "model.make_vocab_size_divisible_by=16",
                                         "model.optim.eps=1e-5"};

RunResult train(int ranks, const std::string& log_dir, std::vector<std::string> extra) {
  extra.insert(extra.begin(), kModel.begin(), kModel.end());
  return testing::run_in(log_dir, testing::mpi_train_argv(MPIEXEC, ranks, log_dir, extra));
}

struct Layout {
  int tp, pp, dp;
  bool sp;
  std::string name() const {
    return fmt::format("DP{} x TP{} x PP{}{}", dp, tp, pp, sp ? " +SP" : "");
  }
  std::vector<std::string> overrides() const {
    return {"model.tensor_model_parallel_size=" + std::to_string(tp),
            "model.pipeline_model_parallel_size=" + std::to_string(pp),
            std::string("model.sequence_parallel=") + (sp ? "true" : "false")};
  }
};

// The worst relative loss difference of curve b from the reference curve a, over the steps of b, each
// of which a must have (an empty b is a failure too: it would compare nothing).
double curve_difference(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b) {
  EXPECT_FALSE(b.empty()) << "no steps to compare";
  double worst = 0;
  for (const auto& [step, loss] : b) {
    const auto it = a.find(step);
    if (it == a.end()) {
      ADD_FAILURE() << "step " << step << " is not in the reference curve";
      continue;
    }
    const double rel = std::fabs(loss - it->second) / it->second;  // a NaN loss is infinitely far
    worst = std::max(worst, std::isnan(rel) ? std::numeric_limits<double>::infinity() : rel);
  }
  return worst;
}

TEST(ModelParallelTrain, EveryLayoutReproducesTheSingleRankCurveAndWeights) {
  TempDir dir;
  const auto one = train(0, dir / "one", {"trainer.max_steps=20", "convert_to_hf=true"});
  ASSERT_EQ(one.status, 0) << one.log;
  const auto ref = losses(dir / "one");
  ASSERT_EQ(ref.size(), 20u);
  for (const Layout& l : {Layout{2, 1, 1, false}, Layout{2, 1, 1, true}, Layout{1, 2, 1, false},
                          Layout{1, 4, 1, false}, Layout{2, 1, 2, true}, Layout{2, 2, 1, true},
                          Layout{2, 2, 2, true}, Layout{4, 1, 1, true}}) {  // TP 4: 2 kv heads, each on 2 ranks
    SCOPED_TRACE(l.name());
    const std::string run = dir / fmt::format("tp{}_pp{}_dp{}{}", l.tp, l.pp, l.dp, l.sp ? "_sp" : "");
    auto extra = l.overrides();
    extra.push_back("trainer.max_steps=20");
    extra.push_back("convert_to_hf=true");
    const auto r = train(l.tp * l.pp * l.dp, run, extra);
    ASSERT_EQ(r.status, 0) << r.log;
    EXPECT_NE(r.log.find(fmt::format("data {} x tensor {} x pipeline {}", l.dp, l.tp, l.pp)), std::string::npos)
        << r.log;
    const auto got = losses(run);
    ASSERT_EQ(got.size(), 20u) << r.log;
    const double worst = curve_difference(ref, got);
    EXPECT_LE(worst, 1e-5);
    const auto w = testing::weight_differences(dir / "one/checkpoints/step_20", run + "/checkpoints/step_20");
    EXPECT_LE(w.l2, 1e-5);
    // The Hugging Face export, gathered from the ranks: the single process's bytes where the weights are
    // (pipeline stages do the single rank's arithmetic exactly), as close as the checkpoint elsewhere.
    if (l.tp == 1) {
      EXPECT_EQ(w.max_abs, 0.0);
      EXPECT_EQ(testing::read_file(run + "/hf/model.safetensors"), testing::read_file(dir / "one/hf/model.safetensors"));
    } else {
      EXPECT_LE(testing::weight_differences(dir / "one/hf", run + "/hf").l2, 1e-5);
    }
    std::printf("%s against one process, 20 steps: worst relative loss difference %.2g, weights %.2g (L2), "
                "%.2g (largest element)\n",
                l.name().c_str(), worst, w.l2, w.max_abs);
    EXPECT_NE(r.log.find("| comm "), std::string::npos) << r.log;
  }
}

TEST(ModelParallelTrain, Dp2Tp2CheckpointResumesOnPp2AndOnOneRank) {
  // 12 steps on one rank, and on DP2 x TP2 (ZeRO-1, SP) saving at step 6 too; then steps 7-12 from
  // that step-6 checkpoint on PP2, and on one rank: both continue the same curve. (Every run has 12
  // steps: the sample order depends on the samples the run asks for, as Megatron's does.)
  TempDir dir;
  const auto one = train(0, dir / "one", {"trainer.max_steps=12"});
  ASSERT_EQ(one.status, 0) << one.log;
  ASSERT_EQ(steps_of(losses(dir / "one")), step_range(1, 12)) << one.log;
  const std::vector<std::string> first = {"trainer.max_steps=12", "model.tensor_model_parallel_size=2",
                                          "model.sequence_parallel=true", "model.distributed_optimizer=true",
                                          "exp_manager.checkpoint_callback_params.every_n_train_steps=6",
                                          "exp_manager.checkpoint_callback_params.save_top_k=-1"};
  const auto a = train(4, dir / "dp2tp2", first);
  ASSERT_EQ(a.status, 0) << a.log;
  ASSERT_EQ(steps_of(losses(dir / "dp2tp2")), step_range(1, 12)) << a.log;
  EXPECT_LE(curve_difference(losses(dir / "one"), losses(dir / "dp2tp2")), 1e-5);
  const std::string ckpt = dir / "dp2tp2/checkpoints/step_6";
  ASSERT_TRUE(fs::exists(ckpt + "/trainer_state.json")) << a.log;
  for (const auto& [ranks, extra] :
       std::vector<std::pair<int, std::vector<std::string>>>{{2, {"model.pipeline_model_parallel_size=2"}}, {0, {}}}) {
    const std::string run = dir / fmt::format("resumed{}", ranks);
    auto e = extra;
    e.push_back("trainer.max_steps=12");
    e.push_back("model.resume_from_checkpoint=" + ckpt);
    const auto r = train(ranks, run, e);
    ASSERT_EQ(r.status, 0) << r.log;
    EXPECT_NE(r.log.find("resumed at step 6"), std::string::npos) << r.log;
    const auto got = losses(run);
    EXPECT_EQ(steps_of(got), step_range(7, 12)) << r.log;
    const double worst = curve_difference(losses(dir / "one"), got);
    EXPECT_LE(worst, 1e-5);
    const auto w = testing::weight_differences(dir / "one/checkpoints/step_12", run + "/checkpoints/step_12");
    EXPECT_LE(w.l2, 1e-5);
    std::printf("DP2 x TP2 checkpoint resumed on %d rank(s): worst relative loss difference %.2g, weights %.2g (L2), "
                "%.2g (largest element)\n",
                std::max(ranks, 1), worst, w.l2, w.max_abs);
  }
}

}  // namespace
}  // namespace llamatrain
