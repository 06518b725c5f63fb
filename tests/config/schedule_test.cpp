// Learning-rate schedules: values at warmup start and end, mid-decay, the end and beyond max_steps,
// first as constants computed by hand (the arithmetic is in the comments), then for every step of
// many configurations against tests/config/schedule_reference.py (the formulas as NeMo and
// Megatron-core write them, run by Debian's python3); and the configurations NeMo refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "config/schedule.h"

using llamatrain::Error;
using namespace llamatrain::train;

namespace {

SchedConfig sched(const std::string& name) {
  SchedConfig c;
  c.name = name;
  c.wsd_decay_style = "exponential";
  return c;
}

void expect_lr(const LrSchedule& s, int64_t step, double expected) {
  EXPECT_NEAR(s.lr(step), expected, 1e-15 + 1e-12 * std::abs(expected)) << "step " << step;
}

std::string error_of(const SchedConfig& c, double lr, int64_t max_steps) {
  try {
    make_schedule(c, lr, max_steps);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Schedule, CosineAnnealingWithoutConstantSteps) {
  // lr 3e-4, min_lr 3e-5, warmup 10, max_steps 110 (trainer.max_steps).
  SchedConfig c = sched("CosineAnnealing");
  c.warmup_steps = 10;
  c.min_lr = 3e-5;
  const LrSchedule s = make_schedule(c, 3e-4, 110);
  expect_lr(s, 0, 3e-4 * 1.0 / 11.0);  // warmup start: lr * (0 + 1) / (10 + 1)
  expect_lr(s, 5, 3e-4 * 6.0 / 11.0);
  expect_lr(s, 10, 3e-4);     // warmup end: lr * 11 / 11
  expect_lr(s, 60, 1.65e-4);  // mid-decay: cos(pi * 50/100) = 0 -> (3e-4 - 3e-5) * 0.5 + 3e-5
  expect_lr(s, 110, 3e-5);    // end: cos(pi) = -1 -> min_lr
  expect_lr(s, 111, 3e-5);    // beyond max_steps: min_lr
  expect_lr(s, 100000, 3e-5);
}

TEST(Schedule, CosineAnnealingWithConstantSteps) {
  // lr 1e-3, min_lr 1e-4, warmup 4, constant 10, max 34 -> decay_steps = 34 - (10 + 4) = 20.
  SchedConfig c = sched("CosineAnnealing");
  c.warmup_steps = 4;
  c.constant_steps = 10;
  c.min_lr = 1e-4;
  const LrSchedule s = make_schedule(c, 1e-3, 34);
  EXPECT_EQ(s.decay_steps, 20);
  expect_lr(s, 0, 1e-3 * 1 / 5);  // the Neuron fork warms up as lr * (step + 1) / (warmup + 1)
  expect_lr(s, 4, 1e-3);
  expect_lr(s, 14, 5.5e-4);  // ratio (14 - 4) / 20 = 0.5 -> 1e-4 + 0.5 * 9e-4
  expect_lr(s, 24, 1e-4);    // end of the decay: ratio 1
  expect_lr(s, 25, 1e-4);    // constant phase at min_lr
  expect_lr(s, 34, 1e-4);
  expect_lr(s, 35, 1e-4);  // beyond max_steps
}

TEST(Schedule, WarmupAnnealingIsLinearToMinLr) {
  // lr 1e-3, min_lr 1e-4, warmup 10, max 100: mult = (step - 10) / 90.
  SchedConfig c = sched("WarmupAnnealing");
  c.warmup_steps = 10;
  c.min_lr = 1e-4;
  const LrSchedule s = make_schedule(c, 1e-3, 100);
  expect_lr(s, 0, 1e-3 / 11);
  expect_lr(s, 10, 1e-3);
  expect_lr(s, 55, 5.5e-4);  // mult 0.5 -> 1e-4 + 0.5 * 9e-4
  expect_lr(s, 100, 1e-4);   // mult 1 -> min_lr
  expect_lr(s, 101, 1e-4);
  // No warmup: step 0 is the peak.
  SchedConfig n = sched("WarmupAnnealing");
  expect_lr(make_schedule(n, 1e-3, 100), 0, 1e-3);
  expect_lr(make_schedule(n, 1e-3, 100), 50, 5e-4);
}

TEST(Schedule, WarmupPolicyHoldPolicyAndNone) {
  // lr 1e-3, warmup 3, max 10, min_lr 1e-5: warmup 1/4, 2/4, 3/4, 4/4, then the peak, min_lr after.
  for (const char* name : {"WarmupPolicy", "WarmupHoldPolicy"}) {
    SchedConfig c = sched(name);
    c.warmup_steps = 3;
    c.min_lr = 1e-5;
    if (std::string(name) == "WarmupHoldPolicy") c.hold_steps = 4;
    const LrSchedule s = make_schedule(c, 1e-3, 10);
    expect_lr(s, 0, 2.5e-4);
    expect_lr(s, 3, 1e-3);
    expect_lr(s, 7, 1e-3);
    expect_lr(s, 10, 1e-3);
    expect_lr(s, 11, 1e-5);
  }
  const LrSchedule none = make_schedule(sched("none"), 1e-3, 10);
  for (int64_t step : {0, 5, 10, 11, 1000}) expect_lr(none, step, 1e-3);
}

TEST(Schedule, WarmupRatioTruncatesLikePythonInt) {
  // int(0.1 * 33) = int(3.3000000000000003) = 3 warmup steps.
  SchedConfig c = sched("CosineAnnealing");
  c.warmup_ratio = 0.1;
  const LrSchedule s = make_schedule(c, 1.0, 33);
  EXPECT_EQ(s.warmup_steps, 3);
  expect_lr(s, 3, 1.0);
  expect_lr(s, 2, 0.75);
}

TEST(Schedule, ScheduleLengthDefaultsToTrainerMaxSteps) {
  SchedConfig c = sched("CosineAnnealing");
  EXPECT_EQ(make_schedule(c, 1.0, 500).max_steps, 500);
  c.max_steps = 200;
  const LrSchedule s = make_schedule(c, 1.0, 500);
  EXPECT_EQ(s.max_steps, 200);
  expect_lr(s, 100, 0.5);  // cos(pi/2) = 0 -> 0.5 * (1 - 0) + 0
  expect_lr(s, 201, 0.0);
}

TEST(Schedule, WsdFollowsMegatronCore) {
  // lr 1e-3, min_lr 1e-4, warmup 10, max 100, final decay 20 steps from step 80.
  SchedConfig c = sched("WSD");
  c.warmup_steps = 10;
  c.min_lr = 1e-4;
  c.wsd_decay_steps = 20;
  c.wsd_decay_style = "linear";
  LrSchedule s = make_schedule(c, 1e-3, 100);
  expect_lr(s, 0, 0.0);  // Megatron warms up from init_lr 0: lr * step / warmup
  expect_lr(s, 5, 5e-4);
  expect_lr(s, 10, 1e-3);
  expect_lr(s, 50, 1e-3);    // stable
  expect_lr(s, 80, 1e-3);    // anneal start = 100 - 20
  expect_lr(s, 90, 5.5e-4);  // r = 10/20: 1 - 0.5 -> 1e-4 + 0.5 * 9e-4
  expect_lr(s, 100, 1e-4);
  expect_lr(s, 101, 1e-4);
  c.wsd_decay_style = "exponential";
  s = make_schedule(c, 1e-3, 100);
  expect_lr(s, 90, 1e-4 + (2.0 * std::sqrt(0.5) - 1.0) * 9e-4);  // 2 * 0.5^0.5 - 1 = 0.41421...
  expect_lr(s, 100, 1e-4);                                       // 2 * 0.5 - 1 = 0
  c.wsd_decay_style = "minus_sqrt";
  s = make_schedule(c, 1e-3, 100);
  expect_lr(s, 85, 5.5e-4);  // r = 0.25: 1 - sqrt(0.25) = 0.5
  c.wsd_decay_style = "cosine";
  s = make_schedule(c, 1e-3, 100);
  expect_lr(s, 90, 5.5e-4);  // 0.5 * (cos(pi/2) + 1) = 0.5
}

TEST(Schedule, RefusesWhatNeMoOrMegatronRefuse) {
  SchedConfig both = sched("CosineAnnealing");
  both.warmup_steps = 10;
  both.warmup_ratio = 0.1;
  EXPECT_NE(error_of(both, 1e-3, 100).find("model.optim.sched.warmup_ratio: got 0.1 while warmup_steps is 10 too"),
            std::string::npos);

  SchedConfig too_long = sched("CosineAnnealing");
  too_long.warmup_steps = 2000;
  too_long.constant_steps = 50000;
  const std::string e = error_of(too_long, 1e-3, 10000);
  EXPECT_NE(e.find("warmup_steps: 2000 + constant_steps 50000 leave -42000 decay steps of max_steps 10000"),
            std::string::npos)
      << e;

  SchedConfig low = sched("CosineAnnealing");
  low.min_lr = 1e-2;
  EXPECT_NE(error_of(low, 1e-3, 100).find("model.optim.sched.min_lr: got 0.01"), std::string::npos);

  SchedConfig equal = sched("CosineAnnealing");
  equal.min_lr = 1e-3;
  equal.constant_steps = 5;
  EXPECT_NE(error_of(equal, 1e-3, 100).find("expected less than model.optim.lr"), std::string::npos);

  SchedConfig wsd = sched("WSD");
  EXPECT_NE(error_of(wsd, 1e-3, 100).find("wsd_decay_steps is not set"), std::string::npos);
  wsd.wsd_decay_steps = 95;
  wsd.warmup_steps = 10;
  EXPECT_NE(error_of(wsd, 1e-3, 100).find("expected a value in [1, max_steps - warmup_steps = 90]"), std::string::npos);

  SchedConfig unused = sched("WarmupPolicy");
  unused.constant_steps = 5;
  EXPECT_NE(error_of(unused, 1e-3, 100).find("scheduler WarmupPolicy has no such parameter"), std::string::npos);
  SchedConfig none = sched("none");
  none.warmup_steps = 5;
  EXPECT_NE(error_of(none, 1e-3, 100).find("warmup_steps is set, but scheduler none"), std::string::npos);

  EXPECT_NE(error_of(sched("Cosine"), 1e-3, 100).find("got 'Cosine', expected one of CosineAnnealing"),
            std::string::npos);
  SchedConfig zero = sched("CosineAnnealing");
  zero.max_steps = 0;
  EXPECT_NE(error_of(zero, 1e-3, 100).find("max_steps: got 0"), std::string::npos);
  EXPECT_NE(error_of(sched("CosineAnnealing"), 0.0, 100).find("model.optim.lr: got 0"), std::string::npos);
}

// Every step of many configurations, against the Python transcription of NeMo's and Megatron's code.
TEST(Schedule, MatchesPythonReferenceAtEveryStep) {
  const std::string py = SYSTEM_PYTHON;
  if (py.empty() || !std::filesystem::exists(py)) GTEST_SKIP() << "Debian python3 not found";
  using nlohmann::json;
  json cases = json::array();
  std::vector<LrSchedule> schedules;
  auto add = [&](SchedConfig c, double lr, int64_t max_steps) {
    const LrSchedule s = make_schedule(c, lr, max_steps);
    json j;
    j["name"] = c.name;
    j["lr"] = lr;
    j["min_lr"] = c.min_lr;
    j["max_steps"] = s.max_steps;
    j["warmup_steps"] = s.warmup_steps;
    j["constant_steps"] = s.constant_steps;
    j["hold_steps"] = c.hold_steps ? json(*c.hold_steps) : json(nullptr);
    j["wsd_decay_steps"] = s.wsd_decay_steps;
    j["wsd_decay_style"] = c.wsd_decay_style;
    json steps = json::array();
    for (int64_t k = 0; k <= s.max_steps + 3; k++) steps.push_back(k);
    j["steps"] = steps;
    cases.push_back(j);
    schedules.push_back(s);
  };
  for (int64_t warmup : {0, 1, 7, 30}) {
    for (int64_t constant : {0, 1, 13}) {
      for (double min_lr : {0.0, 1.7e-5}) {
        SchedConfig c = sched("CosineAnnealing");
        c.warmup_steps = warmup;
        c.constant_steps = constant;
        c.min_lr = min_lr;
        add(c, 3e-4, 97);
      }
    }
    for (const char* name : {"WarmupAnnealing", "WarmupPolicy", "WarmupHoldPolicy"}) {
      SchedConfig c = sched(name);
      c.warmup_steps = warmup;
      c.min_lr = 2e-6;
      if (std::string(name) == "WarmupHoldPolicy") c.hold_steps = 11;
      add(c, 1e-3, 61);
    }
    for (const char* style : {"linear", "cosine", "exponential", "minus_sqrt"}) {
      SchedConfig c = sched("WSD");
      c.warmup_steps = warmup;
      c.min_lr = 3e-5;
      c.wsd_decay_steps = 17;
      c.wsd_decay_style = style;
      add(c, 6e-4, 83);
    }
  }
  SchedConfig ratio = sched("CosineAnnealing");
  ratio.warmup_ratio = 0.07;
  ratio.constant_ratio = 0.15;
  ratio.min_lr = 1e-5;
  add(ratio, 2e-4, 129);

  const std::string dir = std::string(LLAMATRAIN_BINARY_DIR) + "/schedule_test_cases";
  std::filesystem::create_directories(dir);
  const std::string in = dir + "/cases.json";
  std::ofstream(in) << cases.dump();
  const std::string cmd = py + " " + LLAMATRAIN_SOURCE_DIR + "/tests/config/schedule_reference.py " + in;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << cmd << "\n" << out;
  const json ref = json::parse(out)["lrs"];
  ASSERT_EQ(ref.size(), schedules.size());
  int64_t compared = 0;
  for (size_t i = 0; i < schedules.size(); i++) {
    const json& steps = cases[i]["steps"];
    for (size_t k = 0; k < steps.size(); k++) {
      const double want = ref[i][k].get<double>();
      const double got = schedules[i].lr(steps[k].get<int64_t>());
      ASSERT_NEAR(got, want, 1e-12 * std::abs(want) + 1e-18)
          << cases[i]["name"] << " case " << i << " step " << steps[k] << " warmup " << cases[i]["warmup_steps"]
          << " constant " << cases[i]["constant_steps"];
      compared++;
    }
  }
  EXPECT_GT(compared, 4000);
}
