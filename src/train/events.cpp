// Event lines, the job's names and error codes (train/events.h).
#include "train/events.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>

#include <fmt/format.h>

#include "core/error.h"

namespace llamatrain::train {

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
}  // namespace

JobInfo job_from_environment() {
  JobInfo j;
  j.job_id = env("SLURM_JOB_ID");
  j.job_name = env("SLURM_JOB_NAME");
  j.node_list = env("SLURM_JOB_NODELIST");
  if (!env("SLURM_STEP_ID").empty() && !env("SLURM_PROCID").empty())
    j.launcher = "srun";
  else if (!env("OMPI_COMM_WORLD_SIZE").empty() || !env("PMIX_RANK").empty())
    j.launcher = "mpirun";
  return j;
}

namespace {
// Process pid's arguments as it was started (/proc/PID/cmdline); empty when unreadable.
std::vector<std::string> process_args(pid_t pid) {
  std::string text;
  if (FILE* f = std::fopen(fmt::format("/proc/{}/cmdline", pid).c_str(), "rb")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    std::fclose(f);
  }
  std::vector<std::string> args;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\0', at);
    args.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return args;
}
}  // namespace

std::vector<std::string> launcher_command() {
  const std::string launcher = job_from_environment().launcher;
  if (launcher == "srun") {
    std::vector<std::string> c = {"srun"};
    for (const auto& [var, option] :
         {std::pair{"SLURM_STEP_NUM_NODES", "--nodes="}, std::pair{"SLURM_STEP_NUM_TASKS", "--ntasks="},
          std::pair{"SLURM_CPUS_PER_TASK", "--cpus-per-task="}})
      if (const std::string v = env(var); !v.empty()) c.push_back(option + v);
    return c;
  }
  if (launcher != "mpirun") return {};
  const std::vector<std::string> parent = process_args(::getppid()), self = process_args(::getpid());
  if (parent.empty() || self.empty()) return {};
  const std::string name = std::filesystem::path(parent[0]).filename().string();
  if (!(name.starts_with("mpirun") || name.starts_with("mpiexec") || name == "orterun" || name == "prterun")) return {};
  for (size_t i = 1; i < parent.size(); i++)
    if (parent[i] == self[0]) return std::vector<std::string>(parent.begin(), parent.begin() + long(i));
  return {};
}

std::string program_as_started() {
  const std::vector<std::string> self = process_args(::getpid());
  return self.empty() ? std::string() : self[0];
}

int rank_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const std::string v = env(name); !v.empty()) return std::atoi(v.c_str());
  return 0;
}

std::string error_code(const std::exception& e, const char* context) {
  if (const auto* err = dynamic_cast<const Error*>(&e); err && *err->code()) return err->code();
  if (dynamic_cast<const std::bad_alloc*>(&e)) return "oom";
  if (const auto* fe = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
    const int v = fe->code().value();
    return v == ENOSPC || v == EDQUOT ? "disk_full" : "io";
  }
  return context;
}

nlohmann::ordered_json command_fields(const RunCommand& command, int ranks) {
  std::error_code ec;
  return {{"config", command.config},
          {"overrides", command.overrides},
          {"cwd", std::filesystem::current_path(ec).string()},
          {"ranks", ranks},
          {"launcher", job_from_environment().launcher},
          {"launcher_command", launcher_command()},
          {"program", program_as_started()}};
}

int ranks_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const std::string v = env(name); !v.empty()) return std::max(1, std::atoi(v.c_str()));
  return 1;
}

std::string error_event(const std::string& code, const std::string& message, int rank,
                        const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json fields{{"code", code}, {"rank", rank}, {"message", message}};
  for (const auto& [k, v] : extra.items()) fields[k] = v;
  return event_line("error", fields);
}

bool events_on_stdout() {
  // mpirun gives its ranks a pseudo-terminal: a rank's stdout is the job's log whatever it looks like.
  static const bool yes = !job_from_environment().launcher.empty() || ::isatty(STDOUT_FILENO) == 0;
  return yes;
}

void print_error_event(const std::string& code, const std::string& message, int rank,
                       const nlohmann::ordered_json& extra) {
  const std::string line = error_event(code, message, rank, extra);
  if (rank == 0) {
    if (!events_on_stdout()) return;
    std::fprintf(stdout, "%s\n", line.c_str());
    std::fflush(stdout);
  } else {
    std::fprintf(stderr, "[rank %d] %s\n", rank, line.c_str());
    std::fflush(stderr);
  }
}

}  // namespace llamatrain::train
