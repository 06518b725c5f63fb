// `llamatrain doctor`: the check table of one process and of an mpirun job of 2 ranks, and the
// failures it must report with a non-zero status (a data prefix that does not exist, a run folder
// that cannot be made, a config whose ranks do not match the job's). Runs the real binary.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/memory.h"
#include "model/backend.h"
#include "test_util.h"
#include "train/train_runs.h"

namespace llamatrain {
namespace {

using testing::run_cli;
using testing::TempDir;

namespace fs = std::filesystem;

std::vector<std::string> tiny_config(const std::string& run_dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {
      testing::source_path("configs/tiny.yaml"), "model.data.data_prefix=[1.0," + testing::fixture_prefix() + "]",
      "model.tokenizer.model=" + testing::fixture("tokenizer.model"), "exp_manager.explicit_log_dir=" + run_dir};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

bool has_line(const std::string& text, const std::string& start) {
  return text.rfind(start, 0) == 0 || text.find("\n" + start) != std::string::npos;
}

// The table row that starts with `start` ("PASS  config files"), or "".
std::string row(const std::string& text, const std::string& start) {
  size_t at = text.rfind(start, 0) == 0 ? 0 : text.find("\n" + start);
  if (at == std::string::npos) return "";
  if (text[at] == '\n') at++;
  return text.substr(at, text.find('\n', at) - at);
}

TEST(Doctor, OneProcessPassesWithEveryCheck) {
  TempDir dir;
  const auto r = run_cli({"doctor", "--run-dir", dir / "run"});
  ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  for (const char* row : {"cpu", "matmul", "threads", "memory", "disk", "ranks", "allreduce", "gpu", "run folder"})
    EXPECT_TRUE(has_line(r.out, "PASS  " + std::string(row)) || has_line(r.out, "WARN  " + std::string(row)))
        << row << "\n"
        << r.out;
  EXPECT_NE(r.out.find("GFLOP/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("doctor: 9 checks, 0 failed"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "run")) << "the run folder made for the check was left behind";
}

// The memory doctor reports is what train and plan count (a cgroup limit included), in their GB.
TEST(Doctor, MemoryIsWhatTrainCountsInItsUnit) {
  TempDir dir;
  const auto r = run_cli({"doctor", "--run-dir", dir / "run"});
  ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  const std::string line = row(r.out, "PASS  memory");
  const size_t at = line.find(" GB available of ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double shown = std::stod(line.substr(line.rfind(' ', at - 1) + 1)) * 1e9;
  const double avail = double(available_memory_bytes());
  EXPECT_NEAR(shown, avail, 0.1 * avail + 0.2e9) << line;
  EXPECT_EQ(r.out.find("GiB"), std::string::npos) << r.out;
}

// Under a memory cgroup's limit (as `sbatch --mem` sets one) doctor reports the limit's room, not the
// node's MemAvailable, so it cannot pass a node that train refuses.
TEST(Doctor, MemoryIsTheCgroupLimitsWhereOneIsSet) {
  const testing::MemoryCgroup cg("llamatrain_doctor");
  if (!cg.ok()) GTEST_SKIP() << "no writable memory cgroup (needs root and cgroup v1 memory or v2 memory.max)";
  cg.limit(1'500'000'000);
  TempDir dir;
  std::string out;
  ASSERT_EQ(testing::run_capture(cg.command({testing::llamatrain_bin(), "doctor", "--run-dir", dir / "run"}), &out), 0)
      << out;
  const std::string line = row(out, "PASS  memory").empty() ? row(out, "WARN  memory") : row(out, "PASS  memory");
  const size_t at = line.find(" GB available of ");
  ASSERT_NE(at, std::string::npos) << out;
  const double shown = std::stod(line.substr(line.rfind(' ', at - 1) + 1));
  EXPECT_LE(shown, 1.5) << line;
  EXPECT_GT(shown, 0.5) << line;
}

TEST(Doctor, ConfigFilesReadable) {
  TempDir dir;
  std::vector<std::string> args = {"doctor"};
  for (const auto& a : tiny_config(dir / "run")) args.push_back(a);
  const auto r = run_cli(args);
  ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  // .bin and .idx of the prefix, and the tokenizer.
  EXPECT_NE(row(r.out, "PASS  config files").find("3 files readable"), std::string::npos) << r.out;
  EXPECT_NE(row(r.out, "PASS  run folder").find(dir / "run"), std::string::npos) << r.out;
}

TEST(Doctor, MissingDataPrefixFails) {
  TempDir dir;
  std::vector<std::string> args = {"doctor"};
  for (const auto& a : tiny_config(dir / "run", {"model.data.data_prefix=[1.0," + (dir / "nothing") + "]"}))
    args.push_back(a);
  const auto r = run_cli(args);
  testing::expect_plain_error(r, {"doctor: 1 check failed (config files)"});
  EXPECT_TRUE(has_line(r.out, "FAIL  config files")) << r.out;
  EXPECT_NE(r.out.find("model.data.data_prefix: cannot read " + (dir / "nothing.bin")), std::string::npos) << r.out;
}

TEST(Doctor, RunFolderThatCannotBeMadeFails) {
  TempDir dir;
  testing::write_file(dir / "a_file", "x");
  const auto r = run_cli({"doctor", "--run-dir", dir / "a_file/run"});
  testing::expect_plain_error(r, {"doctor: 1 check failed (run folder)"});
  EXPECT_TRUE(has_line(r.out, "FAIL  run folder")) << r.out;
  EXPECT_NE(r.out.find("cannot make " + (dir / "a_file/run")), std::string::npos) << r.out;
}

TEST(Doctor, ConfigThatDoesNotLoadFails) {
  TempDir dir;
  std::vector<std::string> args = {"doctor"};
  for (const auto& a : tiny_config(dir / "run", {"model.tensor_model_parallel_size=3"})) args.push_back(a);
  const auto r = run_cli(args);
  testing::expect_plain_error(r, {"doctor: 1 check failed (config)"});
  EXPECT_NE(row(r.out, "FAIL  config ").find("tensor_model_parallel_size"), std::string::npos) << r.out;
}

// Runs `mpiexec -np 2 llamatrain doctor --all-ranks ARGS` with its output in dir/out.txt.
testing::RunResult mpi_doctor(const TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {
      MPIEXEC,  "--oversubscribe", "--allow-run-as-root", "-np", "2", testing::llamatrain_bin(),
      "doctor", "--all-ranks"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::run_in(dir.path(), argv, {"OMPI_MCA_btl_tcp_if_include=lo", "OMPI_MCA_oob_tcp_if_include=lo"});
}

TEST(Doctor, TwoRanksUnderMpirun) {
  TempDir dir;
  std::vector<std::string> args = tiny_config(dir / "run", {"trainer.devices=2"});
  const auto r = mpi_doctor(dir, args);
  ASSERT_EQ(r.status, 0) << r.log;
  EXPECT_NE(r.log.find("2 ranks answered on 1 node"), std::string::npos) << r.log;
  EXPECT_NE(row(r.log, "PASS  allreduce").find("sum of 2 ranks exact"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find("written by all 2 ranks and seen by rank 0"), std::string::npos) << r.log;
  EXPECT_TRUE(has_line(r.log, "PASS  config files")) << r.log;
  // One table (rank 0's), not one per rank.
  // (a GPU on each rank adds the row of its all-reduce)
  const std::string summary = fmt::format("doctor: {} checks", model::device_usable(model::Device::cuda) ? 11 : 10);
  size_t tables = 0;
  for (size_t at = r.log.find(summary); at != std::string::npos; at = r.log.find(summary, at + 1)) tables++;
  EXPECT_EQ(tables, 1u) << r.log;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

TEST(Doctor, RanksThatDoNotMatchTheConfigFailUnderMpirun) {
  TempDir dir;
  const auto r = mpi_doctor(dir, tiny_config(dir / "run", {"trainer.devices=1"}));
  EXPECT_NE(r.status, 0) << r.log;
  EXPECT_TRUE(has_line(r.log, "FAIL  ranks")) << r.log;
  EXPECT_NE(r.log.find("trainer.devices x trainer.num_nodes = 1 x 1 = 1, expected the job's 2 ranks"),
            std::string::npos)
      << r.log;
  EXPECT_NE(r.log.find("error: doctor: 1 check failed (ranks)"), std::string::npos) << r.log;
}

// Rank 1 sees its own private folder at the run folder's path (a tmpfs mounted in a mount namespace
// of its own), as a rank on a node without the shared filesystem would: rank 0 misses its file.
TEST(Doctor, RunFolderNotSharedFailsUnderMpirun) {
  if (auto why = testing::program_missing("unshare", "util-linux"); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string run = dir / "run";
  fs::create_directories(run);
  std::string probe;
  if (testing::run_capture("unshare --mount sh -c 'mount -t tmpfs tmpfs " + run + "'", &probe) != 0)
    GTEST_SKIP() << "needs root to mount a tmpfs in a mount namespace of its own: " << probe;
  const std::string doctor = testing::llamatrain_bin() + " doctor --all-ranks --run-dir " + run;
  const std::string per_rank = "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exec unshare --mount sh -c 'mount -t tmpfs "
                               "tmpfs " +
                               run + " && exec " + doctor + "'; else exec " + doctor + "; fi";
  const auto r = testing::run_in(
      dir.path(), {MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-np", "2", "/bin/sh", "-c", per_rank},
      {"OMPI_MCA_btl_tcp_if_include=lo", "OMPI_MCA_oob_tcp_if_include=lo"});
  EXPECT_NE(r.status, 0) << r.log;
  EXPECT_NE(row(r.log, "FAIL  run folder").find("rank 0 does not see the files of ranks 1"), std::string::npos)
      << r.log;
  EXPECT_NE(r.log.find("error: doctor: 1 check failed (run folder)"), std::string::npos) << r.log;
  EXPECT_TRUE(fs::is_empty(run)) << "probe files left in " << run;
}

}  // namespace
}  // namespace llamatrain
