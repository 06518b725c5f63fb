// Validation under data, tensor and pipeline parallelism against one process, through the llamatrain
// binary under mpirun on the tiny config: val_loss, val_bits_per_byte and val_bits_per_char agree to
// 1e-5 and the counts of scored targets, bytes and characters are the same, so the byte counts are
// reduced over ranks as the loss is (summed over data-parallel ranks, taken from the pipeline's last
// stage, counted once per tensor-parallel group). The vocabulary is padded to a multiple of 16 in
// every run, so all layouts hold the same model.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "obs/metrics.h"
#include "test_util.h"
#include "train/train_runs.h"

namespace llamatrain {
namespace {

using testing::TempDir;

// The validation record of step 2 in a run's metrics.jsonl.
std::map<std::string, double> validation_at_2(const std::string& log_dir) {
  std::map<std::string, double> out;
  for (const auto& r : obs::read_metrics(log_dir + "/metrics.jsonl"))
    if (r.contains("val_loss") && r["step"].get<int64_t>() == 2)
      for (const auto& [key, v] : r.items())
        if (v.is_number()) out[key] = v.get<double>();
  return out;
}

TEST(ValidationLayout, BitsPerByteOfEveryLayoutEqualOneProcess) {
  TempDir dir;
  const std::vector<std::string> common = {"model.make_vocab_size_divisible_by=16", "trainer.max_steps=2",
                                           "model.optim.sched.warmup_steps=1", "trainer.val_check_interval=2",
                                           "trainer.limit_val_batches=2"};
  auto run = [&](int ranks, const std::string& name, std::vector<std::string> layout) {
    layout.insert(layout.end(), common.begin(), common.end());
    const auto r = testing::run_in(dir / name, testing::mpi_train_argv(MPIEXEC, ranks, dir / name, layout));
    EXPECT_EQ(r.status, 0) << r.log;
    return validation_at_2(dir / name);
  };
  const auto one = run(0, "one", {});
  ASSERT_TRUE(one.contains("val_bits_per_byte")) << "no validation record with bits per byte";
  EXPECT_EQ(one.at("val_tokens"), 2.0 * 8 * 64);
  struct Layout {
    int dp, tp, pp;
  };
  for (const Layout l : {Layout{2, 1, 2}, Layout{1, 2, 1}}) {
    const std::string name = fmt::format("dp{}_tp{}_pp{}", l.dp, l.tp, l.pp);
    SCOPED_TRACE(name);
    std::vector<std::string> layout = {"model.tensor_model_parallel_size=" + std::to_string(l.tp),
                                       "model.pipeline_model_parallel_size=" + std::to_string(l.pp)};
    if (l.tp > 1) layout.push_back("model.sequence_parallel=true");
    const auto got = run(l.dp * l.tp * l.pp, name, layout);
    ASSERT_TRUE(got.contains("val_bits_per_byte")) << name;
    for (const char* key : {"val_tokens", "val_bytes", "val_chars"}) EXPECT_EQ(got.at(key), one.at(key)) << key;
    for (const char* key : {"val_loss", "val_bits_per_byte", "val_bits_per_char"})
      EXPECT_NEAR(got.at(key), one.at(key), 1e-5 * one.at(key)) << key;
  }
}

}  // namespace
}  // namespace llamatrain
