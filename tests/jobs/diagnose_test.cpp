// `llamatrain diagnose` on real failures: each test makes a 2-rank job (mpirun, the tiny config)
// fail the way jobs fail (a rank SIGKILLed or SIGSTOPped, a memory limit, the kernel's OOM killer, a
// NaN, a damaged checkpoint, a full disk, a missing data path, a config mistake), keeps its output as
// a job log would (<run>/job.out beside train_log.txt) and checks the cause, the failing rank and the
// resume command diagnose names. The logs are the program's own; none is written by hand.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_util.h"
#include "train/train_runs.h"

namespace fs = std::filesystem;
using llamatrain::testing::llamatrain_bin;
using llamatrain::testing::losses;
using llamatrain::testing::RunResult;
using llamatrain::testing::spawn;
using llamatrain::testing::TempDir;
using llamatrain::testing::wait_for;

namespace {

// argv of a 2-rank job of the tiny config writing into run (its log folder), `prefix` before the
// program (prlimit ...).
std::vector<std::string> job_argv(const std::string& run, std::vector<std::string> extra,
                                  const std::vector<std::string>& prefix = {}) {
  auto a = llamatrain::testing::mpi_train_argv(MPIEXEC, 2, run, std::move(extra));
  const auto program = std::find(a.begin(), a.end(), llamatrain_bin());
  a.insert(program, prefix.begin(), prefix.end());
  return a;
}

// Runs the job to its end, its output in run/job.out.
RunResult run_job(const std::string& run, std::vector<std::string> extra, const std::vector<std::string>& env = {},
                  const std::vector<std::string>& prefix = {}) {
  fs::create_directories(run);
  return wait_for(spawn(job_argv(run, std::move(extra), prefix), run + "/job.out", env), run + "/job.out");
}

// The llamatrain ranks under mpirun `launcher`, by rank (the command line's order of start is not
// the rank order: OMPI_COMM_WORLD_RANK in each one's environment says it).
std::vector<pid_t> ranks_of(pid_t launcher) {
  std::vector<std::pair<int, pid_t>> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string comm, state;
    int self = 0, ppid = 0;
    stat >> self >> comm >> state >> ppid;
    if (ppid != launcher || comm != "(llamatrain)") continue;
    const std::string environ = llamatrain::testing::read_file((e.path() / "environ").string());
    const size_t at = environ.find("OMPI_COMM_WORLD_RANK=");
    found.push_back({at == std::string::npos ? 0 : std::atoi(environ.c_str() + at + 21), self});
  }
  std::sort(found.begin(), found.end());
  std::vector<pid_t> out;
  for (const auto& [rank, pid] : found) out.push_back(pid);
  return out;
}

// Starts a long job and waits until it has logged `steps` losses; the caller ends it.
pid_t start_job(const std::string& run, std::vector<std::string> extra, size_t steps,
                const std::vector<std::string>& env = {}) {
  fs::create_directories(run);
  extra.push_back("trainer.max_steps=1000000");
  const pid_t mpirun = spawn(job_argv(run, std::move(extra)), run + "/job.out", env);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         !(fs::exists(run + "/metrics.jsonl") && losses(run).size() >= steps))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return mpirun;
}

// Every process of a job still alive at the end of a test, continued and killed (a failed check must
// not leave a stopped rank behind).
struct Reaper {
  std::vector<pid_t> pids;
  ~Reaper() {
    for (pid_t p : pids) {
      ::kill(p, SIGCONT);
      ::kill(p, SIGKILL);
    }
  }
};

// `llamatrain diagnose --json paths...`: its exit status and the object.
struct Diagnosed {
  int status = -1;
  nlohmann::json j;
  std::string out;
};
Diagnosed diagnose(const std::vector<std::string>& paths) {
  std::vector<std::string> args = {"diagnose", "--json"};
  args.insert(args.end(), paths.begin(), paths.end());
  const auto r = llamatrain::testing::run_cli(args);
  Diagnosed d{r.exited ? r.code : -1, nlohmann::json::parse(r.out, nullptr, false), r.out + r.err};
  return d;
}

std::string resume_of(const Diagnosed& d) { return d.j.value("resume", ""); }
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// How job_argv started the job: mpirun with its own options as typed, any wrapper before the program
// (`prefix`: what job_argv put there), then the program as named.
std::string launched_as(const std::vector<std::string>& prefix = {}) {
  std::string cmd = std::string(MPIEXEC) + " --oversubscribe --allow-run-as-root -np 2 ";
  for (const auto& w : prefix) cmd += w + " ";
  return cmd + llamatrain_bin() + " train ";
}

// The resume command of a run in `run` started by job_argv: its launcher (options kept), program,
// config and overrides, the folder, and resume_if_exists.
void expect_resumes(const Diagnosed& d, const std::string& run, const std::vector<std::string>& prefix = {}) {
  const std::string cmd = resume_of(d);
  EXPECT_TRUE(has(cmd, launched_as(prefix))) << d.out;
  EXPECT_TRUE(has(cmd, llamatrain::testing::source_path("configs/tiny.yaml"))) << d.out;
  EXPECT_TRUE(has(cmd, "exp_manager.explicit_log_dir=" + run)) << d.out;
  EXPECT_TRUE(has(cmd, "'model.data.data_prefix=[1.0,")) << d.out;  // quoted for the shell
  const std::string last = " exp_manager.resume_if_exists=true";
  EXPECT_TRUE(cmd.size() > last.size() && cmd.substr(cmd.size() - last.size()) == last) << d.out;
  EXPECT_FALSE(has(cmd, "model.resume_from_checkpoint")) << d.out;
}

}  // namespace

TEST(Diagnose, AFinishedRunAndItsEventLines) {
  TempDir dir;
  const std::string run = dir / "ok";
  const auto r = run_job(run, {"trainer.max_steps=4"});
  ASSERT_EQ(r.status, 0) << r.log;
  // the first line names the nodes, ranks and layout; the start event comes next
  const std::string log = llamatrain::testing::read_file(run + "/train_log.txt");
  const std::string first = log.substr(0, log.find('\n'));
  EXPECT_TRUE(has(first, "llamatrain train: on ")) << first;
  EXPECT_TRUE(has(first, ": 2 ranks = data 2 x tensor 1 x pipeline 1; log dir " + run)) << first;
  EXPECT_TRUE(has(log.substr(first.size() + 1, 60), "@event {\"event\":\"start\"")) << log;
  for (const char* kind : {"start", "step", "checkpoint_saved", "end"})
    EXPECT_TRUE(has(r.log, std::string("@event {\"event\":\"") + kind + "\"")) << kind << "\n" << r.log;
  const auto d = diagnose({run});
  EXPECT_EQ(d.status, 0) << d.out;
  EXPECT_EQ(d.j.value("cause", ""), "success") << d.out;
  EXPECT_EQ(d.j.value("retry", true), false) << d.out;
  EXPECT_EQ(d.j.value("last_step", -1), 4) << d.out;
  EXPECT_EQ(d.j.value("last_checkpoint", ""), run + "/checkpoints/step_4") << d.out;
}

TEST(Diagnose, ARankKilledBySigkill) {
  TempDir dir;
  const std::string run = dir / "kill";
  Reaper reaper;
  const pid_t mpirun = start_job(run, {}, 3);
  const auto ranks = ranks_of(mpirun);
  ASSERT_EQ(ranks.size(), 2u) << llamatrain::testing::read_file(run + "/job.out");
  reaper.pids = ranks;
  ::kill(ranks[1], SIGKILL);
  const auto r = wait_for(mpirun, run + "/job.out");
  EXPECT_NE(r.status, 0);
  const auto d = diagnose({run});
  EXPECT_EQ(d.status, 0) << d.out;
  EXPECT_EQ(d.j.value("cause", ""), "killed_by_signal") << d.out;
  EXPECT_EQ(d.j.value("retry", false), true) << d.out;
  EXPECT_EQ(d.j["rank"], 1) << d.out;
  EXPECT_EQ(d.j["signal"], 9) << d.out;
  EXPECT_GE(d.j.value("last_step", -1), 3) << d.out;
  expect_resumes(d, run);
}

TEST(Diagnose, SigtermStopsAndSaves) {
  // What scancel and a preemption deliver, without SLURM's own line: the run's signal event.
  TempDir dir;
  const std::string run = dir / "term";
  Reaper reaper;
  const pid_t mpirun = start_job(run, {}, 3);
  const auto ranks = ranks_of(mpirun);
  ASSERT_EQ(ranks.size(), 2u) << llamatrain::testing::read_file(run + "/job.out");
  reaper.pids = ranks;
  for (pid_t p : ranks) ::kill(p, SIGTERM);
  const auto r = wait_for(mpirun, run + "/job.out");
  EXPECT_NE(r.status, 0);
  const auto d = diagnose({run});
  EXPECT_EQ(d.j.value("cause", ""), "stopped_by_signal") << d.out;
  EXPECT_EQ(d.j["signal"], 15) << d.out;
  EXPECT_TRUE(has(d.j.value("last_checkpoint", ""), run + "/checkpoints/step_")) << d.out;
  expect_resumes(d, run);

  // The resume command itself, run by the shell as printed (two steps more than were done), with
  // nothing of the test's environment that would let mpirun run as root or oversubscribe: it resumes
  // from the checkpoint, and the diagnosis of the folder is now that attempt's.
  const int64_t saved = d.j.value("last_step", int64_t(-1));
  ASSERT_GT(saved, 0) << d.out;
  const auto again = wait_for(spawn({"/usr/bin/env", "-u", "OMPI_ALLOW_RUN_AS_ROOT", "-u",
                                     "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "-u", "OMPI_MCA_rmaps_base_oversubscribe",
                                     "/bin/sh", "-c", resume_of(d) + " trainer.max_steps=" + std::to_string(saved + 2)},
                                    run + "/job2.out"),
                              run + "/job2.out");
  ASSERT_EQ(again.status, 0) << again.log;
  EXPECT_TRUE(has(again.log, "resumed at step " + std::to_string(saved))) << again.log;
  const auto after = diagnose({run});
  EXPECT_EQ(after.j.value("cause", ""), "success") << after.out;
  EXPECT_EQ(after.j.value("last_step", -1), saved + 2) << after.out;
}

TEST(Diagnose, AStoppedRankIsNamedByTheWatchdog) {
  // SIGSTOP freezes rank 1 inside its step; rank 0's watchdog (2 s here) ends the job and the
  // diagnosis names the rank that never joined.
  TempDir dir;
  const std::string run = dir / "hang";
  Reaper reaper;
  const pid_t mpirun = start_job(run, {}, 3, {"LLAMATRAIN_WATCHDOG_TIMEOUT=2"});
  const auto ranks = ranks_of(mpirun);
  ASSERT_EQ(ranks.size(), 2u) << llamatrain::testing::read_file(run + "/job.out");
  reaper.pids = ranks;
  ::kill(ranks[1], SIGSTOP);
  const auto r = wait_for(mpirun, run + "/job.out");
  EXPECT_NE(r.status, 0);
  const auto d = diagnose({run});
  EXPECT_EQ(d.j.value("cause", ""), "watchdog") << d.out;
  EXPECT_EQ(d.j.value("retry", false), true) << d.out;
  EXPECT_EQ(d.j["rank"], 1) << d.out;
  EXPECT_TRUE(has(d.j.value("summary", ""), "rank 1 never joined")) << d.out;
  expect_resumes(d, run);
}

TEST(Diagnose, AMemoryLimitMakesAnOutOfMemoryError) {
  // prlimit's address-space limit below the weights: the allocation fails, the failing ranks print
  // an error event with code oom.
  TempDir dir;
  const std::string run = dir / "oom";
  const auto r = run_job(run,
                         {"trainer.max_steps=4", "model.hidden_size=4096", "model.ffn_hidden_size=11008",
                          "model.num_attention_heads=32", "model.num_query_groups=32"},
                         {}, {"prlimit", "--as=1000000000"});
  EXPECT_NE(r.status, 0);
  ASSERT_TRUE(has(r.log, "\"code\":\"oom\"")) << r.log;
  const auto d = diagnose({run});
  EXPECT_EQ(d.j.value("cause", ""), "oom") << d.out;
  EXPECT_EQ(d.j.value("retry", true), false) << d.out;
  EXPECT_EQ(d.j["rank"], 0) << d.out;
  expect_resumes(d, run, {"prlimit", "--as=1000000000"});  // the wrapper kept, as it was started
}

TEST(Diagnose, TheKernelsOomKillerFromDmesg) {
  // A memory cgroup (v1 or v2) of 2.4 GB around the job of 2 ranks, each planning 1.7 GB (fp32
  // state of 100M parameters): each rank's memory check at its start sees the cgroup's room and
  // passes (the ranks check before either allocates: a barrier comes between), then the two together
  // outgrow it in the first step and the kernel kills one. mpirun sees a rank killed by signal 9; the
  // dmesg lines say why.
  const llamatrain::testing::MemoryCgroup cg("llamatrain_diagnose");
  if (!cg.ok()) GTEST_SKIP() << "no writable memory cgroup (needs root and cgroup v1 memory or v2 memory.max)";
  cg.limit(2400000000);
  // The kernel's lines from now on: those stamped later than its last one now (the ring buffer
  // drops old lines, so counting them would not do).
  auto stamp = [](const std::string& line) {
    const size_t open = line.find('[');
    return open == std::string::npos ? -1.0 : std::atof(line.c_str() + open + 1);
  };
  std::string kmsg_before;
  llamatrain::testing::run_capture("dmesg", &kmsg_before);
  double last_stamp = -1;
  {
    std::istringstream in(kmsg_before);
    for (std::string line; std::getline(in, line);) last_stamp = std::max(last_stamp, stamp(line));
  }

  TempDir dir;
  const std::string run = dir / "kernel_oom";
  fs::create_directories(run);
  // the job joins the cgroup before it starts (the shell writes its own pid, then becomes mpirun)
  auto argv = job_argv(run, {"trainer.max_steps=4", "model.hidden_size=2048", "model.ffn_hidden_size=5504",
                             "model.num_attention_heads=16", "model.num_query_groups=16"});
  const std::string cmd = cg.command(argv);
  const auto r = wait_for(spawn({"/bin/sh", "-c", cmd}, run + "/job.out"), run + "/job.out");
  EXPECT_NE(r.status, 0) << r.log;
  std::string kmsg;
  ASSERT_EQ(llamatrain::testing::run_capture("dmesg", &kmsg), 0) << kmsg;
  // the lines since the job started: the kernel's record of what it killed
  std::string since;
  {
    std::istringstream in(kmsg);
    for (std::string line; std::getline(in, line);)
      if (stamp(line) > last_stamp) since += line + "\n";
  }
  llamatrain::testing::write_file(run + "/dmesg.log", since);
  if (!has(since, "Killed process"))
    GTEST_SKIP() << "the kernel killed nothing (the allocation failed first, or dmesg is not readable):\n" << r.log;
  const auto d = diagnose({run});
  EXPECT_EQ(d.j.value("cause", ""), "host_oom") << d.out;
  EXPECT_TRUE(has(d.j.value("summary", ""), "the kernel's OOM killer")) << d.out;
  expect_resumes(d, run);
}

TEST(Diagnose, NonFiniteStepsRolledBackThenFinished) {
  // NaN gradients at steps 4-6 after a checkpoint at step 4: skipped, then a rollback to it; the
  // run finishes and the diagnosis says so with the first non-finite step and the rollback.
  TempDir dir;
  const std::string run = dir / "rollback";
  const auto r = run_job(run,
                         {"trainer.max_steps=8", "exp_manager.checkpoint_callback_params.every_n_train_steps=2",
                          "exp_manager.checkpoint_callback_params.save_top_k=3"},
                         {"LLAMATRAIN_INJECT_NONFINITE=5,6,7"});
  ASSERT_EQ(r.status, 0) << r.log;
  ASSERT_TRUE(has(r.log, "@event {\"event\":\"rollback\"")) << r.log;
  const auto d = diagnose({run});
  EXPECT_EQ(d.j.value("cause", ""), "success") << d.out;
  EXPECT_EQ(d.j.value("nonfinite_first_step", -1), 5) << d.out;
  EXPECT_EQ(d.j.value("rollbacks", -1), 1) << d.out;
}

TEST(Diagnose, NonFiniteStepsWithNoCheckpointGiveUp) {
  TempDir dir;
  const std::string run = dir / "diverged";
  const auto r = run_job(run, {"trainer.max_steps=8"}, {"LLAMATRAIN_INJECT_NONFINITE=2,3,4"});
  EXPECT_NE(r.status, 0);
  const auto d = diagnose({run});
  EXPECT_EQ(d.j.value("cause", ""), "nonfinite") << d.out;
  EXPECT_EQ(d.j.value("nonfinite_first_step", -1), 2) << d.out;
  EXPECT_EQ(d.j.value("rollbacks", -1), 0) << d.out;
  EXPECT_TRUE(has(d.j.value("summary", ""), "no rollback ran")) << d.out;
  expect_resumes(d, run);
}

TEST(Diagnose, ADamagedCheckpointOnResume) {
  TempDir dir;
  const std::string run = dir / "damaged";
  const auto first = run_job(run, {"trainer.max_steps=4"});
  ASSERT_EQ(first.status, 0) << first.log;
  {  // one flipped byte in the middle of the weights
    const std::string weights = run + "/checkpoints/step_4/model.safetensors";
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f) << weights;
    f.seekg(std::streamoff(fs::file_size(weights) / 2));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x40);
    f.seekp(std::streamoff(fs::file_size(weights) / 2));
    f.write(&c, 1);
  }
  const auto second =
      run_job(run, {"trainer.max_steps=8", "model.resume_from_checkpoint=" + run + "/checkpoints/step_4"});
  EXPECT_NE(second.status, 0);
  const auto d = diagnose({run});
  EXPECT_EQ(d.j.value("cause", ""), "checkpoint") << d.out;
  EXPECT_TRUE(has(d.j.value("summary", ""), "step_4/model.safetensors: checksum mismatch")) << d.out;
  EXPECT_EQ(d.j["rank"], 0) << d.out;
  expect_resumes(d, run);  // from the newest checkpoint that verifies, or from the start when none does
}

TEST(Diagnose, AFullDiskForTheCheckpoints) {
  // A 256 KB tmpfs as the checkpoint folder: the first save (about 2 MB) fills it.
  TempDir dir;
  const std::string mnt = dir / "small_disk";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs (needs root): " << std::strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const std::string run = dir / "full";
  const auto r = run_job(run, {"trainer.max_steps=4", "exp_manager.checkpoint_callback_params.dirpath=" + mnt});
  EXPECT_NE(r.status, 0);
  const auto d = diagnose({run});
  EXPECT_EQ(d.j.value("cause", ""), "disk_full") << d.out;
  EXPECT_EQ(d.j["rank"], 0) << d.out;
  expect_resumes(d, run);
}

TEST(Diagnose, AMissingDataPath) {
  TempDir dir;
  std::string run, log;
  Diagnosed d;
  // Both ranks fail at once, and under load mpirun sometimes ends the job before it forwarded either
  // rank's whole output (the log then holds no complete error line, and no tool could tell more): a
  // fresh job, up to three times, until the diagnosis names the cause. A diagnosis that is wrong on
  // a complete log fails all three.
  for (int attempt = 0; attempt < 3; attempt++) {
    run = dir / ("nodata" + std::to_string(attempt));
    const auto r =
        run_job(run, {"trainer.max_steps=4", "model.data.data_prefix=[1.0," + (dir / "missing_text_document") + "]"});
    EXPECT_NE(r.status, 0);
    log = r.log;
    d = diagnose({run});
    if (d.j.is_object() && d.j.value("cause", "") == "data") break;
  }
  EXPECT_EQ(d.j.value("cause", ""), "data") << d.out << "\njob.out:\n" << log;
  // Every rank fails on the path; mpirun stops the others when the first one exits, so the log may
  // hold rank 1's error alone: either rank is right.
  ASSERT_TRUE(d.j.contains("rank") && d.j["rank"].is_number()) << d.out;
  EXPECT_TRUE(d.j["rank"] == 0 || d.j["rank"] == 1) << d.out;
  EXPECT_TRUE(has(d.j.value("summary", ""), "missing_text_document.idx does not exist")) << d.out;
  // it never started: the command to run again once the path is right, as it was
  EXPECT_TRUE(has(resume_of(d), launched_as())) << d.out;
  EXPECT_TRUE(has(resume_of(d), "missing_text_document")) << d.out;
  EXPECT_FALSE(has(resume_of(d), "resume_if_exists")) << d.out;
}

TEST(Diagnose, TruncatedData) {
  // The .bin cut short after preprocessing: the data reader's error, named data by the step it
  // happened in.
  TempDir dir;
  const std::string prefix = dir / "cut_text_document";
  fs::copy_file(llamatrain::testing::fixture_prefix() + ".idx", prefix + ".idx");
  fs::copy_file(llamatrain::testing::fixture_prefix() + ".bin", prefix + ".bin");
  fs::resize_file(prefix + ".bin", fs::file_size(prefix + ".bin") / 2);
  const std::string run = dir / "cut";
  const auto r = run_job(run, {"trainer.max_steps=4", "model.data.data_prefix=[1.0," + prefix + "]"});
  EXPECT_NE(r.status, 0);
  const auto d = diagnose({run});
  EXPECT_EQ(d.j.value("cause", ""), "data") << d.out;
  EXPECT_TRUE(has(d.j.value("summary", ""), "cut_text_document")) << d.out;
  expect_resumes(d, run);
}

TEST(Diagnose, AConfigError) {
  TempDir dir;
  const std::string run = dir / "badconfig";
  const auto r = run_job(run, {"trainer.max_steps=4", "model.tensor_model_parallel_size=0"});
  EXPECT_NE(r.status, 0);
  const auto d = diagnose({run});
  EXPECT_EQ(d.j.value("cause", ""), "config") << d.out;
  EXPECT_EQ(d.j.value("retry", true), false) << d.out;
  EXPECT_TRUE(has(d.j.value("summary", ""), "model.tensor_model_parallel_size (override")) << d.out;
  EXPECT_TRUE(has(resume_of(d), "model.tensor_model_parallel_size=0")) << d.out;
  // The fields a batch script reads (run.slurm: `read -r cause retry`), without a JSON parser.
  auto fields =
      llamatrain::testing::run_cli({"diagnose", "--field", "cause", "--field", "retry", "--field", "rank", run});
  EXPECT_EQ(fields.code, 0) << fields.err;
  EXPECT_EQ(fields.out, "config 0 " + (d.j["rank"].is_null() ? std::string("-") : d.j["rank"].dump()) + "\n");
  fields = llamatrain::testing::run_cli({"diagnose", "--field", "reason", run});
  llamatrain::testing::expect_plain_error(fields, {"diagnose --field reason: no such field", "cause, retry"});
}

// A plain srun (no --kill-on-bad-exit): rank 1 is killed at step 3, rank 0 waits for it, and the job
// is cancelled minutes later. The kill is the first failure and the cause; the cancellation followed.
// A job cancelled first, whose ranks srun then reports killed, stays a cancellation.
TEST(Diagnose, TheFirstFailureIsTheCauseNotTheCancellationAfterIt) {
  TempDir dir;
  const std::string start =
      R"(@event {"event":"start","time":"2026-12-02T14:00:00.000Z","job_id":"12","nodes":"n[1-2]","ranks":2,)"
      R"("launcher":"srun","config":"configs/tiny.yaml","overrides":[],"cwd":"/w","run_dir":"/w/run"})";
  const std::string step =
      R"(@event {"event":"step","time":"2026-12-02T14:00:03.000Z","step":3,"max_steps":100,"loss":5.1})";
  std::ofstream(dir / "killed.out") << start << "\n"
                                    << step << "\n"
                                    << "srun: error: n2: task 1: Killed\n"
                                    << "slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2026-12-02T14:09:00 ***\n";
  auto d = diagnose({dir / "killed.out"});
  EXPECT_EQ(d.j.value("cause", ""), "killed_by_signal") << d.out;
  EXPECT_EQ(d.j["rank"], 1) << d.out;
  EXPECT_EQ(d.j.value("retry", false), true) << d.out;
  EXPECT_TRUE(has(d.out, "cancelled afterwards")) << d.out;
  std::ofstream(dir / "cancelled.out") << start << "\n"
                                       << step << "\n"
                                       << "slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2026-12-02T14:09:00 ***\n"
                                       << "srun: error: n2: task 1: Killed\n";
  d = diagnose({dir / "cancelled.out"});
  EXPECT_EQ(d.j.value("cause", ""), "cancelled") << d.out;
  EXPECT_EQ(d.j.value("retry", true), false) << d.out;
}

// Two ranks failing at once under mpirun: the launcher forwarded rank 0's event line in two chunks
// with rank 1's whole line between them (a job log seen under load). The complete event is found.
TEST(Diagnose, AnEventLineCutByAnotherRanksLine) {
  TempDir dir;
  const std::string tail = R"(,"config":"configs/tiny.yaml","overrides":[],"cwd":"/w","ranks":2,"launcher":"mpirun"})";
  auto error = [&](int rank) {
    return R"(@event {"event":"error","time":"2026-12-02T14:28:28.540Z","code":"data","rank":)" + std::to_string(rank) +
           R"(,"message":"model.data.data_prefix: /d/missing_text_document.idx does not exist")";
  };
  const std::string full1 = error(1) + tail, cut0 = error(0) + tail.substr(0, tail.size() - 10);
  std::ofstream(dir / "job.out") << cut0 << "[rank 1] " << full1 << "\n"
                                 << "[rank 1] abort: error: model.data.data_prefix: /d/missing_text_document.idx "
                                    "does not exist\n"
                                 << tail.substr(tail.size() - 10) << "\n"
                                 << "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\n";
  const auto d = diagnose({dir / "job.out"});
  EXPECT_EQ(d.j.value("cause", ""), "data") << d.out;
  EXPECT_EQ(d.j["rank"], 1) << d.out;
  EXPECT_TRUE(has(d.j.value("summary", ""), "missing_text_document.idx does not exist")) << d.out;
}

TEST(Diagnose, TheGpuDriversRecordsAndNcclTimeouts) {
  // A GPU has no failure to cause here: the lines the NVIDIA driver (dmesg) and NCCL write, replayed.
  TempDir dir;
  const std::string start =
      R"(@event {"event":"start","time":"2026-12-02T10:00:00.000Z","job_id":"77","ranks":8,"dp":8,"tp":1,"pp":1,)"
      R"("launcher":"srun","config":"c.yaml","overrides":[],"cwd":"/w","run_dir":"/w/run","max_steps":100})";
  std::ofstream(dir / "lost.out") << start << "\n"
                                  << "step 12/100 | loss 3.1\n";
  std::ofstream(dir / "gpu07.dmesg.log")
      << "[1234.5] NVRM: Xid (PCI:0000:9d:00): 79, pid=4711, GPU has fallen off the bus.\n";
  auto d = diagnose({dir / "lost.out", dir / "gpu07.dmesg.log"});
  EXPECT_EQ(d.j.value("cause", ""), "gpu_lost") << d.out;
  EXPECT_TRUE(has(d.j.value("summary", ""), "Xid 79 on the GPU at PCI 0000:9d:00")) << d.out;
  EXPECT_TRUE(has(d.j.value("fix", ""), "drain the node")) << d.out;

  std::ofstream(dir / "nccl.out") << start << "\n"
                                  << "gpu03:1234:1290 [3] NCCL WARN Timeout waiting for the peers (ring 0)\n";
  d = diagnose({dir / "nccl.out"});
  EXPECT_EQ(d.j.value("cause", ""), "nccl_timeout") << d.out;
  EXPECT_TRUE(has(d.j.value("fix", ""), "NCCL_DEBUG=INFO")) << d.out;
}

TEST(Diagnose, NeverStartedAndUnreadable) {
  TempDir dir;
  fs::create_directories(dir / "empty");
  const auto d = diagnose({dir / "empty"});
  EXPECT_EQ(d.status, 0) << d.out;
  EXPECT_EQ(d.j.value("cause", ""), "never_started") << d.out;
  EXPECT_TRUE(has(d.j.value("fix", ""), "llamatrain doctor")) << d.out;
  const auto missing = llamatrain::testing::run_cli({"diagnose", dir / "no_such_log.out"});
  EXPECT_EQ(missing.code, 1) << missing.out << missing.err;
  EXPECT_TRUE(has(missing.err, "no_such_log.out does not exist")) << missing.err;
}
