// parallel/mpi failures: how an MPI job ends when one rank fails, run through mpirun with
// tests/parallel/mpi_failure_worker.cpp. A rank killed with SIGKILL inside a loop of all-reduces
// (OpenMPI's own handling: mpirun ends the job), a rank that never joins an all-reduce (our
// watchdog, 2 s), and an MPI error (a receive too small for its message, posted before or after the
// message arrived) must each end every rank, with a non-zero status, in bounded time, and name the
// rank and the operation where we print.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Job {
  bool timed_out = false;
  int status = 0;  // waitpid status of mpirun
  double seconds = 0;
  std::string output;  // stdout and stderr of every rank and of mpirun
  std::vector<pid_t> ranks;
  fs::path dir;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Runs `mpirun -np NP mpi_failure_worker SCENARIO DIR`; kills its process group after deadline_s.
Job run_job(const std::string& scenario, int np, double deadline_s) {
  Job job;
  job.dir = fs::path(LLAMATRAIN_BINARY_DIR) / ("mpi_failure_" + scenario + "_" + std::to_string(getpid()));
  fs::remove_all(job.dir);
  fs::create_directories(job.dir);
  const std::string out = (job.dir / "output").string(), np_text = std::to_string(np), dir = job.dir.string();
  std::vector<std::string> args = {
      MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-np", np_text, MPI_FAILURE_WORKER, scenario, dir};
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (!std::freopen("/dev/null", "r", stdin) || !std::freopen(out.c_str(), "w", stdout) ||
        ::dup2(STDOUT_FILENO, STDERR_FILENO) < 0)
      ::_exit(127);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  for (;;) {
    if (::waitpid(pid, &job.status, WNOHANG) == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > deadline_s) {
      job.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &job.status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  job.output = slurp(out);
  for (int r = 0; r < np; ++r) {
    std::ifstream f(job.dir / ("pid." + std::to_string(r)));
    pid_t p = 0;
    if (f >> p) job.ranks.push_back(p);
  }
  return job;
}

// A process that is gone or a zombie (exited, not yet reaped) has ended.
bool ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

// Every rank ended (allowing a second for orphans to go), none finished, mpirun failed.
void expect_every_rank_ended(const Job& job, int np) {
  EXPECT_FALSE(job.timed_out) << "the job was still running after " << job.seconds << " s\n" << job.output;
  EXPECT_TRUE(WIFEXITED(job.status) && WEXITSTATUS(job.status) != 0) << "mpirun status " << job.status << "\n"
                                                                     << job.output;
  ASSERT_EQ(job.ranks.size(), size_t(np)) << "not every rank started\n" << job.output;
  for (int i = 0; i < 50; ++i) {
    bool all = true;
    for (pid_t p : job.ranks) all = all && ended(p);
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    EXPECT_TRUE(ended(job.ranks[r])) << "rank " << r << " (pid " << job.ranks[r] << ") is still running";
    if (!ended(job.ranks[r])) ::kill(job.ranks[r], SIGKILL);
    EXPECT_FALSE(fs::exists(job.dir / ("finished." + std::to_string(r)))) << "rank " << r << " ran to its end";
  }
}

TEST(MpiFailure, ARankKilledInsideAllReducesEndsTheJob) {
  const Job job = run_job("kill", 4, 60);
  expect_every_rank_ended(job, 4);
  EXPECT_LT(job.seconds, 60);
  // mpirun's own report of the lost rank
  EXPECT_NE(job.output.find("signal 9"), std::string::npos) << job.output;
  std::printf("a rank killed with SIGKILL: the job of 4 ended in %.1f s\n", job.seconds);
  fs::remove_all(job.dir);
}

TEST(MpiFailure, TheWatchdogEndsAJobWhoseRankNeverJoins) {
  const Job job = run_job("hang", 4, 30);
  expect_every_rank_ended(job, 4);
  // Ranks 0, 1 and 3 wait in the 6th all-reduce, the world's 7th collective after a barrier; at least
  // one reports it, rank 2 (asleep) cannot.
  EXPECT_NE(job.output.find("watchdog: all_reduce #7 on 'world' (world ranks 0,1,2,3), 1024 x f32 has not completed "
                            "after"),
            std::string::npos)
      << job.output;
  EXPECT_TRUE(job.output.find("[rank 0] watchdog") != std::string::npos ||
              job.output.find("[rank 1] watchdog") != std::string::npos ||
              job.output.find("[rank 3] watchdog") != std::string::npos)
      << job.output;
  EXPECT_EQ(job.output.find("[rank 2] watchdog"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("hint: a rank of that communicator has not joined"), std::string::npos) << job.output;
  EXPECT_GE(job.seconds, 2.0);  // not before the timeout
  EXPECT_LT(job.seconds, 15.0);
  std::printf("a rank that never joins: the 2 s watchdog ended the job of 4 in %.1f s\n", job.seconds);
  fs::remove_all(job.dir);
}

TEST(MpiFailure, AnMpiErrorNamesTheRankTheCallAndTheOperation) {
  const Job job = run_job("recv", 2, 30);
  expect_every_rank_ended(job, 2);
  EXPECT_NE(job.output.find("[rank 1] MPI_Wait failed in irecv #1 on 'world' (world ranks 0,1), 32 bytes from "
                            "rank 0 tag 5: MPI_ERR_TRUNCATE"),
            std::string::npos)
      << job.output;
  fs::remove_all(job.dir);
}

// The truncated message is in before its receive is posted, so the request has failed before the
// wait: the order in which a wait over several requests (MPI_Waitall, OpenMPI 4.1, thread-multiple)
// spins forever instead of returning the error.
TEST(MpiFailure, AnMpiErrorOnAReceiveThatFailedBeforeItsWaitIsReported) {
  const Job job = run_job("recv_late", 2, 30);
  expect_every_rank_ended(job, 2);
  EXPECT_NE(job.output.find("[rank 1] MPI_Wait failed in irecv #2 on 'world' (world ranks 0,1), 32 bytes from "
                            "rank 0 tag 5: MPI_ERR_TRUNCATE"),
            std::string::npos)
      << job.output;
  fs::remove_all(job.dir);
}

}  // namespace
