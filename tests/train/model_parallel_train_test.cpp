// Tensor-, sequence- and pipeline-parallel training under mpirun against one process, through the
// llamatrain binary on the tiny config (4 layers here, so that 4 stages have a layer each) and the
// fixture corpus: every layout reproduces the single-rank fp32 loss curve over 20 steps within 1e-5
// and its final weights within 1e-5; a DP2 x TP2 checkpoint resumes on PP2 and on one rank and
// continues the curve. Vocabularies that no padding multiple divides (1000 and 49953 pieces: the
// embedding holds 1000, 1008 or 1024 rows on one, two or four TP ranks) train the same model under
// every layout too, since the padding rows are inert, and their TP2 checkpoint resumes on one rank
// and on TP4.
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

#include "data/tokenizer.h"
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

const std::vector<std::string> kModel = {"model.num_layers=4", "model.optim.eps=1e-5"};

RunResult train(int ranks, const std::string& log_dir, std::vector<std::string> extra) {
  extra.insert(extra.begin(), kModel.begin(), kModel.end());
  return testing::run_in(log_dir, testing::mpi_train_argv(MPIEXEC, ranks, log_dir, extra));
}

struct Layout {
  int tp, pp, dp;
  bool sp;
  std::string name() const { return fmt::format("DP{} x TP{} x PP{}{}", dp, tp, pp, sp ? " +SP" : ""); }
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
  for (const Layout& l : {Layout{2, 1, 1, false}, Layout{2, 1, 1, true}, Layout{1, 2, 1, false}, Layout{1, 4, 1, false},
                          Layout{2, 1, 2, true}, Layout{2, 2, 1, true}, Layout{2, 2, 2, true},
                          Layout{4, 1, 1, true}}) {  // TP 4: 2 kv heads, each on 2 ranks
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
      EXPECT_EQ(testing::read_file(run + "/hf/model.safetensors"),
                testing::read_file(dir / "one/hf/model.safetensors"));
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
  const std::vector<std::string> first = {"trainer.max_steps=12",
                                          "model.tensor_model_parallel_size=2",
                                          "model.sequence_parallel=true",
                                          "model.distributed_optimizer=true",
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

// The fixture tokenizer (500 pieces) grown to `pieces` with unused pieces "<unused_N>" (type UNUSED:
// never produced by an encoding), so the fixture corpus keeps its ids. A SentencePiece model is a
// protobuf ModelProto whose field 1 repeats the pieces: a record appended to the file adds a piece.
std::string tokenizer_with_pieces(const std::string& dir, int pieces) {
  std::string bytes = testing::read_file(testing::fixture("tokenizer.model"));
  auto varint = [](std::string& out, uint64_t v) {
    for (; v >= 0x80; v >>= 7) out.push_back(char(0x80 | (v & 0x7f)));
    out.push_back(char(v));
  };
  const int base = data::Tokenizer(testing::fixture("tokenizer.model")).vocab_size();
  for (int id = base; id < pieces; id++) {
    const std::string text = "<unused_" + std::to_string(id) + ">";
    std::string piece;
    piece.push_back(0x0a);  // field 1 (piece), length-delimited
    varint(piece, text.size());
    piece += text;
    piece.push_back(0x15);  // field 2 (score), fixed32
    const float score = 0.0f;
    piece.append(reinterpret_cast<const char*>(&score), 4);
    piece.push_back(0x18);  // field 3 (type), varint: UNUSED
    varint(piece, 5);
    bytes.push_back(0x0a);  // ModelProto field 1 (pieces), length-delimited
    varint(bytes, piece.size());
    bytes += piece;
  }
  const std::string path = dir + "/tokenizer_" + std::to_string(pieces) + ".model";
  testing::write_file(path, bytes);
  EXPECT_EQ(data::Tokenizer(path).vocab_size(), pieces);
  return path;
}

TEST(ModelParallelTrain, VocabulariesNoPaddingDividesTrainTheSameModelUnderEveryLayout) {
  // 1000 pieces pad to 1000 rows on one rank, 1008 on TP2, 1024 on TP4 (make_vocab_size_divisible_by
  // 8 x TP); 49953 to 49960, 49968 and 49984. Width 32 keeps the 49953-row lm head fast. Each
  // layout's 6 steps equal one rank's within 1e-5, and so do the final weights; TP2's step-3
  // checkpoint continues the same curve on one rank and on TP4.
  TempDir dir;
  for (int vocab : {1000, 49953}) {
    SCOPED_TRACE(fmt::format("vocabulary {}", vocab));
    const std::string tok = tokenizer_with_pieces(dir.path(), vocab);
    const std::string base = dir / fmt::format("v{}", vocab);
    auto run = [&](int tp, int pp, const std::string& name, std::vector<std::string> extra) {
      extra.insert(extra.begin(), {"model.tokenizer.model=" + tok, "model.hidden_size=32", "model.num_layers=2",
                                   "model.make_vocab_size_divisible_by=8", "trainer.max_steps=6",
                                   "model.tensor_model_parallel_size=" + std::to_string(tp),
                                   "model.pipeline_model_parallel_size=" + std::to_string(pp)});
      const auto r = train(tp * pp == 1 ? 0 : tp * pp, base + "/" + name, extra);
      EXPECT_EQ(r.status, 0) << r.log;
      return r;
    };
    const auto one = run(1, 1, "one", {});
    ASSERT_EQ(one.status, 0);
    const auto ref = losses(base + "/one");
    ASSERT_EQ(steps_of(ref), step_range(1, 6)) << one.log;
    for (const auto& [tp, pp] : std::vector<std::pair<int, int>>{{2, 1}, {4, 1}, {2, 2}}) {
      const std::string name = fmt::format("tp{}_pp{}", tp, pp);
      SCOPED_TRACE(name);
      std::vector<std::string> extra;
      if (tp == 2 && pp == 1)
        extra = {"exp_manager.checkpoint_callback_params.every_n_train_steps=3",
                 "exp_manager.checkpoint_callback_params.save_top_k=-1"};
      const auto r = run(tp, pp, name, extra);
      if (r.status != 0) continue;
      const auto got = losses(base + "/" + name);
      EXPECT_EQ(steps_of(got), step_range(1, 6)) << r.log;
      const double worst = curve_difference(ref, got);
      EXPECT_LE(worst, 1e-5);
      const auto w =
          testing::weight_differences(base + "/one/checkpoints/step_6", base + "/" + name + "/checkpoints/step_6");
      EXPECT_LE(w.l2, 1e-5);
      std::printf("vocabulary %d, TP%d x PP%d against one process: worst relative loss difference %.2g, weights %.2g "
                  "(L2)\n",
                  vocab, tp, pp, worst, w.l2);
    }
    const std::string ckpt = base + "/tp2_pp1/checkpoints/step_3";
    ASSERT_TRUE(fs::exists(ckpt + "/trainer_state.json"));
    for (int tp : {1, 4}) {
      const std::string name = fmt::format("resumed_tp{}", tp);
      SCOPED_TRACE(name);
      const auto r = run(tp, 1, name, {"model.resume_from_checkpoint=" + ckpt});
      if (r.status != 0) continue;
      EXPECT_NE(r.log.find("resumed at step 3"), std::string::npos) << r.log;
      const auto got = losses(base + "/" + name);
      EXPECT_EQ(steps_of(got), step_range(4, 6)) << r.log;
      const double worst = curve_difference(ref, got);
      EXPECT_LE(worst, 1e-5);
      std::printf("vocabulary %d, TP2 checkpoint resumed on TP%d: worst relative loss difference %.2g\n", vocab, tp,
                  worst);
    }
  }
}

}  // namespace
}  // namespace llamatrain
