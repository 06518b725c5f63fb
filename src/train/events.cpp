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

std::string utc_time_ms() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", stamp, int(ms));
}

std::string event_line(const char* kind, nlohmann::ordered_json fields) {
  nlohmann::ordered_json e{{"event", kind}, {"time", utc_time_ms()}};
  for (auto& [k, v] : fields.items()) e[k] = std::move(v);
  // dump() writes NaN and infinities as null; invalid UTF-8 in a message is replaced, never thrown
  return std::string(kEventMarker) + e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<nlohmann::json> parse_event_line(std::string_view line) {
  // Every marker from the last: a launcher forwards each rank's output in chunks, so where ranks
  // print at once one rank's event can be cut by another's whole line ("@event {...cut[rank 1]
  // @event {...}"); the complete one is found.
  for (size_t at = line.rfind(kEventMarker); at != std::string_view::npos;
       at = at == 0 ? std::string_view::npos : line.rfind(kEventMarker, at - 1)) {
    const std::string_view body = line.substr(at + kEventMarker.size());
    if (body.empty() || body.front() != '{') continue;
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("event") || !j["event"].is_string()) continue;
    return j;
  }
  return std::nullopt;
}

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

int rank_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const std::string v = env(name); !v.empty()) return std::atoi(v.c_str());
  return 0;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
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
          {"launcher", job_from_environment().launcher}};
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
