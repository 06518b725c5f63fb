// Runs of the llamatrain binary's `train` on the tiny config and the fixture corpus, for the trainer's
// end-to-end tests: the corpus preprocessed once per test binary, the command line of a run, starting
// it with its output in a log file, waiting for it, reading its loss curve back (and the steps it
// logged: comparing two curves proves nothing unless each has the steps it should), and how far two
// checkpoints' weights are apart.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "obs/metrics.h"
#include "test_util.h"

extern "C" char** environ;

namespace llamatrain::testing {

// The fixture corpus preprocessed once per test binary; the prefix `train` takes.
inline const std::string& fixture_prefix() {
  static TempDir dir;
  static std::string prefix = [] {
    std::string out;
    const std::string cmd = llamatrain_bin() + " preprocess --quiet --input " + fixture("corpus.jsonl") +
                            " --tokenizer-model " + fixture("tokenizer.model") + " --output-prefix " + (dir / "fx") +
                            " --append-eod";
    EXPECT_EQ(run_capture(cmd, &out), 0) << out;
    return dir / "fx_text_document";
  }();
  return prefix;
}

// Arguments of `llamatrain train configs/tiny.yaml` for a run in log_dir (fp32, a log line per step,
// no validation), plus extra overrides, which win.
inline std::vector<std::string> train_args(const std::string& log_dir, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {llamatrain_bin(),
                                "train",
                                source_path("configs/tiny.yaml"),
                                "model.data.data_prefix=[1.0," + fixture_prefix() + "]",
                                "model.tokenizer.model=" + fixture("tokenizer.model"),
                                "exp_manager.explicit_log_dir=" + log_dir,
                                "trainer.log_every_n_steps=1",
                                "trainer.limit_val_batches=0",
                                "trainer.precision=32",
                                "model.optim.sched.warmup_steps=2"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Starts argv with stdout and stderr appended to log and `env` (NAME=VALUE) added to the
// environment; returns the pid.
inline pid_t spawn(const std::vector<std::string>& argv, const std::string& log,
                   const std::vector<std::string>& env = {}) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (const auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; e++) env_strings.push_back(*e);
  env_strings.insert(env_strings.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << "cannot start " << args[0];
  return pid;
}

struct RunResult {
  int status = -1;  // exit code, or 128 + signal
  std::string log;
};

inline RunResult wait_for(pid_t pid, const std::string& log) {
  int st = 0;
  ::waitpid(pid, &st, 0);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), read_file(log)};
}

// Runs argv to its end, its stdout and stderr in log_dir/stdout.txt (log_dir is created first).
inline RunResult run_in(const std::string& log_dir, const std::vector<std::string>& argv,
                        const std::vector<std::string>& env = {}) {
  std::filesystem::create_directories(log_dir);
  const std::string log = log_dir + "/stdout.txt";
  return wait_for(spawn(argv, log, env), log);
}

// step -> loss of the training records of metrics.jsonl (the last record of a step wins: a resumed
// run repeats the steps after its checkpoint).
inline std::map<int64_t, double> losses(const std::string& log_dir) {
  std::map<int64_t, double> out;
  for (const auto& r : obs::read_metrics(log_dir + "/metrics.jsonl"))
    if (r.contains("loss")) out[r["step"].get<int64_t>()] = obs::metric_value(r, "loss");
  return out;
}

// The steps of a curve, and the steps first..last: a run that logged each of its steps 1..n has
//   ASSERT_EQ(steps_of(losses(dir)), step_range(1, n));
inline std::vector<int64_t> steps_of(const std::map<int64_t, double>& curve) {
  std::vector<int64_t> steps;
  for (const auto& [step, loss] : curve) steps.push_back(step);
  return steps;
}
inline std::vector<int64_t> step_range(int64_t first, int64_t last) {
  std::vector<int64_t> steps;
  for (int64_t s = first; s <= last; s++) steps.push_back(s);
  return steps;
}

// argv of one run on the tiny config with 8 samples per step in micro-batches of 2: `mpiexec -np
// ranks llamatrain train ...` (ranks > 0, trainer.devices = ranks) or the plain binary (ranks 0).
inline std::vector<std::string> mpi_train_argv(const std::string& mpiexec, int ranks, const std::string& log_dir,
                                               std::vector<std::string> extra) {
  std::vector<std::string> a;
  if (ranks > 0) a = {mpiexec, "--oversubscribe", "--allow-run-as-root", "-np", std::to_string(ranks)};
  extra.insert(extra.begin(), {"trainer.devices=" + std::to_string(std::max(ranks, 1)), "model.micro_batch_size=2",
                               "model.global_batch_size=8"});
  const auto run = train_args(log_dir, extra);
  a.insert(a.end(), run.begin(), run.end());
  return a;
}

// How far two checkpoints' weights (model.safetensors) are apart, the worst tensor of each measure:
// max_abs = largest |a - b| relative to the tensor's largest |a|; l2 = ||a - b|| / ||a||.
struct WeightDifference {
  double max_abs = 0, l2 = 0;
};
inline WeightDifference weight_differences(const std::string& a, const std::string& b) {
  io::SafetensorsCheckpoint ca(a + "/model.safetensors"), cb(b + "/model.safetensors");
  WeightDifference w;
  for (const auto& name : ca.names()) {
    const auto& t = ca.get(name);
    std::vector<float> x(size_t(t.numel())), y(x.size());
    ca.read_f32(name, t.shape, x.data());
    cb.read_f32(name, t.shape, y.data());
    double sq = 0, dsq = 0;
    for (size_t i = 0; i < x.size(); i++) {
      sq += double(x[i]) * x[i];
      dsq += double(x[i] - y[i]) * (x[i] - y[i]);
    }
    w.max_abs = std::max(w.max_abs, max_difference(y, x).relative());
    w.l2 = std::max(w.l2, std::sqrt(dsq / sq));
  }
  return w;
}
inline double weight_difference(const std::string& a, const std::string& b) { return weight_differences(a, b).max_abs; }

}  // namespace llamatrain::testing
