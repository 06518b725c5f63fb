// Choosing where the model runs: bench, eval and generate's --device and train's trainer.accelerator
// reach the model (a run on the reference backend trains as the CPU's does), and a device that is not
// usable here, or a name that is not a device, is a plain error naming the option and the fix.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "model/backend.h"
#include "test_util.h"
#include "train/train_runs.h"

namespace llamatrain {
namespace {

using testing::run_cli;

TEST(Device, BenchRunsOnTheReferenceBackend) {
  const auto r = run_cli({"bench", "--model", "tiny", "--seq", "16", "--batch", "2", "--steps", "1", "--precision",
                          "fp32", "--device", "ref", "--json"});
  ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  const auto j = nlohmann::json::parse(r.out.substr(r.out.rfind("{\"model\"")));
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0) << r.out;
}

TEST(Device, AnUnusableOrUnknownDeviceIsAPlainError) {
  std::string why;
  if (!model::device_usable(model::Device::cuda, &why)) {
    for (const char* cmd : {"bench", "eval", "generate"}) {
      std::vector<std::string> args = {cmd};
      if (std::string(cmd) != "bench") args.push_back(testing::source_path("tests/golden/tiny_hf"));
      if (std::string(cmd) == "eval") args.insert(args.end(), {"--data", "unused"});
      if (std::string(cmd) == "generate") args.insert(args.end(), {"--prompt", "Once"});
      args.insert(args.end(), {"--device", "cuda"});
      testing::expect_plain_error(run_cli(args), {"--device cuda: " + why, "hint: use --device cpu"});
    }
  }
  testing::expect_plain_error(run_cli({"bench", "--device", "tpu"}),
                              {"--device: got 'tpu', expected cpu, cuda (or gpu), auto or ref"});
}

TEST(Device, TrainerAcceleratorChoosesTheBackend) {
  // Three fp32 steps on the reference backend follow the CPU's curve (the two differ in summation
  // order only).
  testing::TempDir dir;
  const std::string cpu = dir / "cpu", ref = dir / "ref";
  auto a = testing::run_in(cpu, testing::train_args(cpu, {"trainer.max_steps=3", "trainer.accelerator=cpu"}));
  ASSERT_EQ(a.status, 0) << a.log;
  auto b = testing::run_in(ref, testing::train_args(ref, {"trainer.max_steps=3", "trainer.accelerator=ref"}));
  ASSERT_EQ(b.status, 0) << b.log;
  const auto la = testing::losses(cpu), lb = testing::losses(ref);
  ASSERT_EQ(testing::steps_of(la), testing::step_range(1, 3));
  ASSERT_EQ(testing::steps_of(lb), testing::step_range(1, 3));
  for (const auto& [step, loss] : la) EXPECT_NEAR(lb.at(step), loss, 1e-4 * loss) << "step " << step;

  std::string why;
  if (!model::device_usable(model::Device::cuda, &why)) {
    const std::string gpu = dir / "gpu";
    auto c = testing::run_in(gpu, testing::train_args(gpu, {"trainer.accelerator=gpu"}));
    EXPECT_NE(c.status, 0) << c.log;
    EXPECT_NE(c.log.find("trainer.accelerator gpu: " + why), std::string::npos) << c.log;
    EXPECT_NE(c.log.find("hint: use trainer.accelerator=cpu"), std::string::npos) << c.log;
  }
}

}  // namespace
}  // namespace llamatrain
