// The job-log classifier (jobs/diagnose.h). One pass over every line of every log collects what
// each rule needs (the first line that shows it); then the rules are asked in order of how directly
// they name a cause: the scheduler's and the kernel's records, the failing rank's error event, the
// watchdog, a cancellation, a clean stop on a signal, a rank the launcher saw die, the communication
// layer, and last the run's own start and end.
#include "jobs/diagnose.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"
#include "train/events.h"

namespace llamatrain::train {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("diagnose: cannot read {}\nhint: check the path and its permissions", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("diagnose: reading {} failed\nhint: check the file", p.string());
  return ss.str();
}

bool is_job_log(const fs::path& p) {
  const std::string name = p.filename().string(), ext = p.extension().string();
  return name == "train_log.txt" || ext == ".out" || ext == ".err" || ext == ".log";
}

// A shell word: quoted unless it is plain.
std::string shell_word(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=:,@%+-") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// What the pass over the lines found: the first line of each kind, and the events.
struct Findings {
  std::optional<nlohmann::json> start, end;
  std::optional<nlohmann::json> error;  // the first error event
  Evidence start_ev, end_ev, error_ev;
  std::optional<nlohmann::json> stop_signal;
  Evidence stop_signal_ev;
  std::optional<nlohmann::json> batch;  // the batch script's event (launch/slurm/run.slurm): how to resubmit
  std::vector<std::pair<nlohmann::json, Evidence>> outcomes;  // start, end, error and signal events, as read
  std::vector<Evidence> host_oom, time_limit, cancelled, killed, watchdog, comm, internal, plain_error, mpi_abort,
      skips, rollbacks, damaged_checkpoint;
  // The NVIDIA driver's records (dmesg's NVRM Xid lines): a GPU lost to the bus or to uncorrectable
  // memory errors, and faults a kernel made; NCCL's own reports of a collective that timed out.
  std::vector<Evidence> gpu_lost, gpu_fault_xid, nccl_timeout;
  std::string xid_detail;
  // SLURM lost a node of the job (its slurmd stopped answering, or it was set DOWN): srun's "Node
  // failure on NODE" and slurmstepd's "CANCELLED ... DUE TO NODE FAILURE"; the node, when named.
  std::vector<Evidence> node_failure;
  std::string failed_node;
  std::optional<int> killed_rank, killed_signal, comm_rank, internal_rank, abort_rank;
  std::string killed_ranks_text;  // srun's task list ("0-2,5") when it names several
  std::set<int> watchdog_ranks;
  std::string watchdog_what;
  std::set<int64_t> skip_steps;
  std::set<std::string> skip_events, rollback_events;  // step (from_step) and time of each
  int64_t skip_count = 0;
  int64_t first_skip = -1;
  int64_t rollback_count = 0;
  int64_t last_step = -1;
  std::string last_checkpoint;
  std::string oom_detail;  // which mechanism killed for memory
  std::string cancel_detail;
  bool job_cancelled = false;      // the whole job, not only a step (srun cancels a step whose task died)
  std::vector<Evidence> bad_exit;  // srun's "task N: Exited with exit code C" (C != 0)
  // The first kill srun saw came after, in the same log, a task's failure or the step's cancellation:
  // srun or SLURM ending the step (--kill-on-bad-exit after an error, MPI_Abort after the watchdog,
  // scancel) killed it, a consequence and not the cause.
  bool kill_while_step_ending = false;
  bool kill_before_cancel = false;  // a rank killed before any cancellation in its log: the first failure
};

int signal_number(const std::string& name) {
  static const std::map<std::string, int> names = {{"Killed", 9},
                                                   {"Terminated", 15},
                                                   {"Aborted", 6},
                                                   {"Segmentation fault", 11},
                                                   {"Bus error", 7},
                                                   {"Interrupt", 2},
                                                   {"Floating point exception", 8},
                                                   {"Hangup", 1}};
  const auto it = names.find(name);
  return it == names.end() ? 0 : it->second;
}

// The time of the latest batch event (launch/slurm/run.slurm's, one per start of a job) in the logs,
// "" when there is none.
std::string latest_batch_time(const std::vector<LogText>& logs) {
  std::string latest;
  for (const auto& log : logs) {
    for (size_t at = log.text.find("\"event\":\"batch\""); at != std::string::npos;
         at = log.text.find("\"event\":\"batch\"", at + 1)) {
      const size_t begin = log.text.rfind('\n', at), end = log.text.find('\n', at);
      const size_t from = begin == std::string::npos ? 0 : begin + 1;
      const std::string_view line =
          std::string_view(log.text).substr(from, end == std::string::npos ? end : end - from);
      if (auto e = parse_event_line(line))
        if ((*e)["event"] == "batch") latest = std::max(latest, e->value("time", std::string()));
    }
  }
  return latest;
}

// Where scan() is in one log: which start of a requeued job its lines belong to, and whether the job
// step is already ending.
struct ScanState {
  bool step_ending_here = false;  // in this log, so far: a task failed or the step was cancelled
  bool earlier_start = false;     // the lines since an earlier start's batch event
};

// One @event line of the run's own.
void read_event(const nlohmann::json& e, const Evidence& ev, const std::string& latest_start, Findings& f,
                ScanState& st) {
  const std::string kind = e["event"].get<std::string>();
  if (kind == "batch") {
    st.earlier_start = e.value("time", std::string()) < latest_start;
    // the latest start of the job (a requeued job's log holds every start)
    if (!f.batch || e.value("time", "") >= f.batch->value("time", "")) f.batch = e;
  } else if (kind == "start" || kind == "end" || kind == "error" || kind == "signal") {
    f.outcomes.push_back({e, ev});  // sorted out by attempt once every log is read (choose_attempt)
  } else if (kind == "step" && e.contains("step") && e["step"].is_number()) {
    f.last_step = std::max(f.last_step, e["step"].get<int64_t>());
  } else if ((kind == "checkpoint_saved" || kind == "checkpoint_loaded") && e.contains("path") &&
             e["path"].is_string()) {
    f.last_checkpoint = e["path"].get<std::string>();
  } else if (kind == "skip" && e.contains("step") && e["step"].is_number()) {
    const int64_t step = e["step"].get<int64_t>();
    // (train_log.txt and the job's stdout hold the same events: each once, by step and time, so that
    // a step skipped again after a rollback counts again)
    if (f.skip_events.insert(std::to_string(step) + e.value("time", std::string())).second) {
      f.skip_count++;
      if (f.skips.size() < 3) f.skips.push_back(ev);
    }
    f.skip_steps.insert(step);
    if (f.first_skip < 0) f.first_skip = step;
  } else if (kind == "rollback") {
    // (each rollback once, as the skips)
    if (f.rollback_events.insert(std::to_string(e.value("from_step", int64_t(-1))) + e.value("time", std::string()))
            .second)
      f.rollback_count++;
    if (f.rollbacks.size() < 2) f.rollbacks.push_back(ev);
  }
}

// One line of another program's (SLURM, the kernel, mpirun, the NVIDIA driver) or a plain error.
// The other programs' lines read_text_line knows, compiled once.
struct TextPatterns {
  const std::regex slurm_oom{R"(Detected \d+ oom[-_]kill event|exceeded memory limit \(\d+ > \d+\), being killed)"};
  const std::regex srun_oom{R"(srun: error: \S+: tasks? ([0-9,\-]+): Out Of Memory)"};
  const std::regex kernel_oom{R"((Memory cgroup out of memory|Out of memory): Killed process \d+ \(([^)]*)\))"};
  const std::regex slurm_cancel{R"(\*\*\* (JOB|STEP) (\S+) ON (\S+) CANCELLED AT (\S+)(.*)\*\*\*)"};
  const std::regex srun_node_failure{R"(srun: error: Node failure on (\S+))"};
  const std::regex mpirun_signal{R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+) \(([^)]*)\))"};
  const std::regex srun_signal{
      R"(srun: error: (\S+): tasks? (\d+)[0-9,\-]*: (Killed|Segmentation fault|Aborted|Bus error|Terminated))"};
  const std::regex watchdog{R"(\[rank (\d+)\] watchdog: (.*) has not completed after)"};
  const std::regex our_mpi{R"(\[rank (\d+)\] (MPI_\w+ failed in .*))"};
  const std::regex comm_text{
      R"(ORTE has lost communication|PRTE has lost communication|lost communication with|PMIX ERROR|PMIx_\w+ failed|Connection reset by peer|btl_tcp.*(error|failed)|MPI_ERR_PROC_FAILED)"};
  const std::regex check_failed{R"(\[rank (\d+)\] CHECK failed at)"};
  const std::regex mpi_abort{R"(MPI_ABORT was invoked on rank (\d+))"};
  const std::regex damaged{R"(warning: skipping checkpoint )"};
  const std::regex srun_exit{R"(srun: error: \S+: tasks? [0-9,\-]+: Exited with exit code (\d+))"};
  const std::regex nvidia_xid{R"(NVRM: Xid \(PCI:([^)]*)\): (\d+))"};
  const std::regex nccl_timeout{
      R"(NCCL (WARN|INFO).*([Tt]imeout|[Tt]imed out)|Watchdog caught collective operation timeout|NCCL communicator was aborted)"};
};
const TextPatterns& text_patterns() {
  static const TextPatterns patterns;
  return patterns;
}

void read_text_line(const std::string& line, const Evidence& ev, Findings& f, ScanState& st) {
  const TextPatterns& p = text_patterns();
  std::smatch m;
  if (std::regex_search(line, m, p.nvidia_xid)) {
    const int xid = std::atoi(m[2].str().c_str());
    // 79: fallen off the bus; 48, 63, 64, 94, 95: uncorrectable memory errors; 74, 92, 119, 120: NVLink
    // or GSP failures. 13, 31, 43: a kernel's own fault (an illegal address, a page fault, a trap).
    if (xid == 13 || xid == 31 || xid == 43) {
      f.gpu_fault_xid.push_back(ev);
    } else if (xid == 79 || xid == 48 || xid == 63 || xid == 64 || xid == 74 || xid == 92 || xid == 94 || xid == 95 ||
               xid == 119 || xid == 120) {
      f.gpu_lost.push_back(ev);
      if (f.xid_detail.empty()) f.xid_detail = fmt::format("Xid {} on the GPU at PCI {}", xid, m[1].str());
    }
    return;
  }
  if (std::regex_search(line, m, p.nccl_timeout)) {
    f.nccl_timeout.push_back(ev);
    return;
  }
  if (std::regex_search(line, m, p.slurm_oom)) {
    f.host_oom.push_back(ev);
    f.oom_detail = "SLURM's memory limit (the job's cgroup)";
  } else if (std::regex_search(line, m, p.srun_oom)) {
    f.host_oom.push_back(ev);
    if (f.oom_detail.empty()) f.oom_detail = "SLURM's memory limit (the job's cgroup)";
    if (!f.killed_rank) f.killed_rank = std::atoi(m[1].str().c_str()), f.killed_ranks_text = m[1].str();
  } else if (std::regex_search(line, m, p.kernel_oom)) {
    f.host_oom.push_back(ev);
    if (f.oom_detail.empty())
      f.oom_detail = m[1].str() == "Memory cgroup out of memory" ? "the kernel's OOM killer (a cgroup memory limit)"
                                                                 : "the kernel's OOM killer (the machine ran out)";
  } else if (std::regex_search(line, m, p.slurm_cancel)) {
    const std::string why = m[5].str();
    // `scontrol requeue` (run.slurm's retry) ends the start it follows: not a cause of its own
    if (why.find("DUE TO JOB REQUEUE") != std::string::npos) return;
    st.step_ending_here = true;
    if (why.find("DUE TO TIME LIMIT") != std::string::npos)
      f.time_limit.push_back(ev);
    else if (why.find("DUE TO NODE FAILURE") != std::string::npos)
      f.node_failure.push_back(ev);
    else {
      f.cancelled.push_back(ev);
      f.job_cancelled |= m[1].str() == "JOB";
      if (why.find("PREEMPTION") != std::string::npos) f.cancel_detail = "preempted by a job of higher priority";
    }
  } else if (std::regex_search(line, m, p.srun_node_failure)) {
    st.step_ending_here = true;
    f.node_failure.push_back(ev);
    if (f.failed_node.empty()) f.failed_node = m[1].str();
  } else if (std::regex_search(line, m, p.mpirun_signal)) {
    if (!f.killed_rank) f.killed_rank = std::atoi(m[1].str().c_str()), f.killed_signal = std::atoi(m[3].str().c_str());
    f.killed.push_back(ev);
  } else if (std::regex_search(line, m, p.srun_signal)) {
    if (!f.killed_signal) {
      f.killed_rank = std::atoi(m[2].str().c_str()), f.killed_signal = signal_number(m[3].str());
      f.kill_while_step_ending = st.step_ending_here;
      f.kill_before_cancel = f.cancelled.empty() && !st.step_ending_here;
    }
    f.killed.push_back(ev);
  } else if (std::regex_search(line, m, p.srun_exit)) {
    if (m[1].str() != "0") {
      st.step_ending_here = true;
      f.bad_exit.push_back(ev);
    }
  } else if (std::regex_search(line, m, p.watchdog)) {
    f.watchdog_ranks.insert(std::atoi(m[1].str().c_str()));
    if (f.watchdog.empty()) f.watchdog_what = m[2].str();
    f.watchdog.push_back(ev);
  } else if (std::regex_search(line, m, p.our_mpi)) {
    if (!f.comm_rank) f.comm_rank = std::atoi(m[1].str().c_str());
    f.comm.push_back(ev);
  } else if (std::regex_search(line, m, p.comm_text)) {
    f.comm.push_back(ev);
  } else if (std::regex_search(line, m, p.check_failed)) {
    if (!f.internal_rank) f.internal_rank = std::atoi(m[1].str().c_str());
    f.internal.push_back(ev);
  } else if (std::regex_search(line, m, p.mpi_abort)) {
    if (!f.abort_rank) f.abort_rank = std::atoi(m[1].str().c_str());
    f.mpi_abort.push_back(ev);
  } else if (std::regex_search(line, m, p.damaged)) {
    f.damaged_checkpoint.push_back(ev);
  } else if (starts_with(line, "error: ")) {
    f.plain_error.push_back(ev);
  }
}

// `latest_start`: latest_batch_time(). In a job log that holds several starts of a requeued job, the
// lines of the earlier starts (after their batch events) are passed over but for the events, which
// choose_attempt sorts out by their times.
void scan(const LogText& log, Findings& f, const std::string& latest_start) {
  ScanState st;
  std::istringstream in(log.text);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    n++;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // the diagnosis launch/slurm/run.slurm printed into the job log: it quotes the lines it names
    if (starts_with(line, "run.slurm: diagnosis: ")) continue;
    const Evidence ev{log.path, n, line};
    if (auto e = parse_event_line(line)) {
      read_event(*e, ev, latest_start, f, st);
    } else if (!st.earlier_start) {
      read_text_line(line, ev, f, st);
    }
  }
}

std::string time_of(const nlohmann::json& e) {
  return e.contains("time") && e["time"].is_string() ? e["time"].get<std::string>() : "";
}
// An event's time in milliseconds since 1970 (events.h's utc_time_ms), or nullopt.
std::optional<int64_t> ms_of(const nlohmann::json& e) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(time_of(e).c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &ms) != 7)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return int64_t(timegm(&tm)) * 1000 + ms;
}

// The latest attempt of the run (a resumed run's train_log.txt holds every attempt, a job log maybe
// only one): its start event, and its outcome, the events timed at or after that start. Its error is
// the first one; the same failure on several ranks is told as the lowest rank's.
void choose_attempt(Findings& f) {
  for (const auto& [e, ev] : f.outcomes)
    if (e["event"] == "start" && (!f.start || time_of(e) >= time_of(*f.start))) f.start = e, f.start_ev = ev;
  // (another node's clock may run a little behind rank 0's: a second of slack)
  const std::optional<int64_t> since = f.start ? ms_of(*f.start) : std::nullopt;
  auto rank_of = [](const nlohmann::json& j) {
    return j.contains("rank") && j["rank"].is_number() ? j["rank"].get<int>() : 1 << 30;
  };
  for (const auto& [e, ev] : f.outcomes) {
    const std::optional<int64_t> t = ms_of(e);
    if (t && since && *t < *since - 1000) continue;
    const std::string kind = e["event"].get<std::string>();
    if (kind == "end") {
      f.end = e, f.end_ev = ev;
    } else if (kind == "error") {
      if (!f.error || (f.error->value("message", "") == e.value("message", "") && rank_of(e) < rank_of(*f.error)))
        f.error = e, f.error_ev = ev;
    } else if (kind == "signal" && !f.stop_signal) {
      f.stop_signal = e, f.stop_signal_ev = ev;
    }
  }
}

std::string json_str(const nlohmann::json& j, const char* k) {
  return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
}

// A job of a batch script (launch/slurm/run.slurm) resumes as a new job of the same script: its sbatch
// command, from the folder it was submitted from, with LLAMATRAIN_RUN_DIR naming the run folder the
// checkpoints are in (a new job has a new id; the script resumes from the newest checkpoint there).
std::string resubmit_command(const Findings& f, const std::vector<std::string>& extra) {
  const nlohmann::json& b = *f.batch;
  std::string run_dir = f.start ? json_str(*f.start, "run_dir") : "";
  if (run_dir.empty()) run_dir = json_str(b, "run_dir");
  std::string cmd;
  if (const std::string cwd = json_str(b, "cwd"); !cwd.empty()) cmd += "cd " + shell_word(cwd) + " && ";
  if (!run_dir.empty()) cmd += "LLAMATRAIN_RUN_DIR=" + shell_word(run_dir) + " ";
  cmd += "sbatch";
  if (b.contains("sbatch") && b["sbatch"].is_array())
    for (const auto& a : b["sbatch"])
      if (a.is_string()) cmd.append(" ").append(shell_word(a.get<std::string>()));
  // (append, not cmd += " " + word: GCC 12 at -O3 for x86-64-v3 warns falsely of overlapping copies there)
  for (const auto& e : extra) cmd.append(" ").append(shell_word(e));
  return cmd;
}

// The start event's command, resuming: the same config and overrides (a previous resume choice
// replaced), in the same log folder, under the same launcher. Without a start event, the command of
// an error event from before it, as it was (nothing was saved to resume from).
std::string resume_command(const Findings& f, const std::vector<std::string>& extra = {}) {
  const bool started = f.start.has_value();
  if (f.batch) return resubmit_command(f, extra);
  if (!started && !(f.error && f.error->contains("config"))) return "";
  const nlohmann::json& s = started ? *f.start : *f.error;
  auto str = [&](const char* k) { return s.contains(k) && s[k].is_string() ? s[k].get<std::string>() : std::string(); };
  const std::string config = str("config"), cwd = str("cwd"), run_dir = str("run_dir"), launcher = str("launcher");
  if (config.empty()) return "";
  const int ranks = s.contains("ranks") && s["ranks"].is_number() ? s["ranks"].get<int>() : 1;
  // The launcher and the program as the run was started (its options kept, so the command runs as
  // printed), or, from a run that did not record them, the plain launcher with the rank count.
  std::vector<std::string> launch;
  if (s.contains("launcher_command") && s["launcher_command"].is_array())
    for (const auto& w : s["launcher_command"])
      if (w.is_string()) launch.push_back(w.get<std::string>());
  std::string program = str("program");
  if (program.empty()) program = "llamatrain";
  const bool relative_program = program.find('/') != std::string::npos && !fs::path(program).is_absolute();
  std::string cmd;
  if (!cwd.empty() && (!fs::path(config).is_absolute() || relative_program)) cmd += "cd " + shell_word(cwd) + " && ";
  if (!launch.empty())
    for (const auto& w : launch) cmd += shell_word(w) + " ";
  else if (ranks > 1)
    cmd += launcher == "srun" ? "srun " : fmt::format("mpirun -np {} ", ranks);
  cmd += shell_word(program) + " train " + shell_word(config);
  std::vector<std::string> overrides;
  if (s.contains("overrides") && s["overrides"].is_array())
    for (const auto& o : s["overrides"])
      if (o.is_string()) overrides.push_back(o.get<std::string>());
  auto replaced = [&](const std::string& o) {
    for (const char* key :
         {"exp_manager.resume_if_exists=", "model.resume_from_checkpoint=", "exp_manager.resume_ignore_no_checkpoint="})
      if (starts_with(o, key)) return true;
    for (const auto& e : extra)
      if (starts_with(o, e.substr(0, e.find('=') + 1))) return true;
    return false;
  };
  bool has_dir = false;
  for (const auto& o : overrides) {
    if (started && replaced(o)) continue;
    has_dir |= starts_with(o, "exp_manager.explicit_log_dir=");
    cmd += " " + shell_word(o);
  }
  if (!started) return cmd;
  // The folder the checkpoints are in, whatever named it (a version from the time or the job id).
  if (!has_dir && !run_dir.empty()) cmd += " " + shell_word("exp_manager.explicit_log_dir=" + run_dir);
  cmd += " exp_manager.resume_if_exists=true";
  for (const auto& e : extra) cmd += " " + shell_word(e);
  return cmd;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }
// The "hint: ..." part of an error message.
std::string hint_of(const std::string& s) {
  const size_t at = s.find("hint: ");
  return at == std::string::npos ? "" : first_line(s.substr(at + 6));
}

const char* signal_name(int sig) {
  switch (sig) {
    case 1: return "SIGHUP";
    case 2: return "SIGINT";
    case 6: return "SIGABRT";
    case 7: return "SIGBUS";
    case 8: return "SIGFPE";
    case 9: return "SIGKILL";
    case 11: return "SIGSEGV";
    case 15: return "SIGTERM";
    default: return "a signal";
  }
}

constexpr const char* kMemoryFix =
    "give the job more memory (sbatch --mem / --mem-per-cpu, or fewer ranks per node) or make it need less: "
    "model.activations_checkpoint_granularity=full, a smaller model.micro_batch_size, "
    "model.distributed_optimizer=true, more tensor or pipeline parallelism";

constexpr const char* kGpuMemoryFix =
    "make the job need less GPU memory: model.activations_checkpoint_granularity=full, a smaller "
    "model.micro_batch_size, model.distributed_optimizer=true with more GPUs; `llamatrain plan CONFIG --hardware "
    "H200` sizes a job before it runs; `nvidia-smi` on the node shows other processes holding GPU memory";
constexpr const char* kGpuFaultFix =
    "a kernel read or wrote memory it does not own: a bug to report with this log; rerun with LLAMATRAIN_CUDA_SYNC=1 "
    "(the error then names the kernel that faulted, not a later call), and resume from the last checkpoint";
constexpr const char* kGpuLostFix =
    "a hardware or driver failure of that node's GPU: check `nvidia-smi` and `dmesg` there (NVRM Xid lines), drain "
    "the node (scontrol update nodename=NODE state=drain reason=gpu), and resume on the others";

void error_cause(const Findings& f, Diagnosis& d) {
  const nlohmann::json& e = *f.error;
  const std::string code = e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() : "error";
  const std::string message = e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : "";
  if (e.contains("rank") && e["rank"].is_number()) d.rank = e["rank"].get<int>();
  d.evidence.push_back(f.error_ev);
  const std::string hint = hint_of(message);
  const std::string where = d.rank ? fmt::format(" on rank {}", *d.rank) : "";
  d.cause = code;
  d.resume = resume_command(f);
  if (code == "oom") {
    d.summary = "out of memory" + where + ": an allocation failed (the process's memory limit or the machine's)";
    d.fix = kMemoryFix;
  } else if (code == "gpu_oom") {
    d.summary = "out of GPU memory" + where + ": " + first_line(message);
    d.fix = kGpuMemoryFix;
  } else if (code == "gpu_fault") {
    d.summary = "a kernel faulted on the GPU" + where + ": " + first_line(message);
    for (const auto& x : f.gpu_fault_xid) d.evidence.push_back(x);
    d.fix = kGpuFaultFix;
  } else if (code == "gpu_lost") {
    d.summary = "the GPU" + where + " stopped answering: " + first_line(message);
    d.fix = kGpuLostFix;
  } else if (code == "nonfinite") {
    d.summary = fmt::format("training diverged{}: the loss or gradient norm was not finite from step {}; {}", where,
                            f.first_skip,
                            f.rollback_count ? fmt::format("{} rollback(s) ran", f.rollback_count)
                                             : "no rollback ran (no checkpoint to roll back to)");
    for (const auto& s : f.skips) d.evidence.push_back(s);
    for (const auto& r : f.rollbacks) d.evidence.push_back(r);
    d.fix = hint.empty() ? "lower model.optim.lr or lengthen the warmup, and check the data" : hint;
  } else if (code == "divergence") {
    d.summary =
        fmt::format("training kept diverging{}: non-finite from step {}, {} rollback(s) and {} skipped step(s), "
                    "then the rollback budget ran out",
                    where, f.first_skip, f.rollback_count, f.skip_count);
    for (const auto& s : f.skips) d.evidence.push_back(s);
    for (const auto& r : f.rollbacks) d.evidence.push_back(r);
    d.fix = hint.empty() ? "resume from the last checkpoint with a lower model.optim.lr or a longer warmup, and check "
                           "the data the divergent steps read"
                         : hint;
  } else if (code == "checkpoint") {
    d.summary = "a checkpoint is missing or damaged" + where + ": " + first_line(message);
    for (const auto& w : f.damaged_checkpoint) d.evidence.push_back(w);
    d.fix =
        hint.empty() ? "point model.resume_from_checkpoint at a complete checkpoint, or remove the damaged one" : hint;
    if (message.find("no usable checkpoint") != std::string::npos)
      d.resume = resume_command(f, {"exp_manager.resume_ignore_no_checkpoint=true"});
  } else if (code == "disk_full") {
    d.summary = "the disk is full" + where + ": " + first_line(message);
    d.fix = "free space where the run writes (df -h on that folder), lower "
            "exp_manager.checkpoint_callback_params.save_top_k, or move the checkpoints with "
            "exp_manager.checkpoint_callback_params.dirpath";
  } else if (code == "data") {
    d.summary = "the training data is missing, unreadable or wrong" + where + ": " + first_line(message);
    d.fix = hint.empty() ? "check model.data.data_prefix (the output prefix of `llamatrain preprocess`)" : hint;
  } else if (code == "config") {
    d.summary = "a configuration error" + where + ": " + first_line(message);
    d.fix = hint.empty() ? "correct the key the message names (llamatrain train --help-config lists every key)" : hint;
  } else {
    d.summary = fmt::format("the run failed{} ({}): {}", where, code, first_line(message));
    d.fix = hint.empty() ? "see the message" : hint;
  }
}

// ---- the causes, in order: the first rule that applies names the cause ----

// What the rules look at beyond the findings.
struct Context {
  int ranks = 0;  // the start event's
  // A rank the launcher saw killed that is also the one the watchdog's waiting ranks miss: the kill
  // is the cause, the hang its consequence (srun without --kill-on-bad-exit). Kills of waiting ranks
  // are the launcher ending the job after the watchdog's abort.
  bool killed_missing_rank = false;
};

// One cause: when it applies, how it fills the diagnosis (summary, evidence, fix, rank), whether the
// run can resume from it, and whether the same job is worth submitting again (run.slurm's retry).
struct Rule {
  const char* cause;
  bool (*applies)(const Findings& f, const Context& c);
  void (*fill)(const Findings& f, const Context& c, Diagnosis& d);
  bool resume = true;
  bool retry = false;
};

constexpr const char* kNothingFailedFix = "nothing failed in the run; resume it when wanted";

// The order: the scheduler's and the kernel's records, the failing rank's own error event, the
// watchdog, a cancellation (srun also cancels a step whose task failed: after the two before), a rank
// seen killed (srun's --kill-on-bad-exit then sends SIGTERM to the others, which save and stop: before
// that clean stop), a clean stop on a signal, communication failures, then what little is left.
const Rule kRules[] = {
    {"host_oom", [](const Findings& f, const Context&) { return !f.host_oom.empty(); },
     [](const Findings& f, const Context&, Diagnosis& d) {
       const bool several = f.killed_ranks_text.find_first_of(",-") != std::string::npos;
       d.summary = "the host ran out of memory: " + f.oom_detail + " killed " +
                   (several         ? "ranks " + f.killed_ranks_text
                    : f.killed_rank ? fmt::format("rank {}", *f.killed_rank)
                                    : std::string("a rank"));
       d.rank = f.killed_rank;
       d.evidence = f.host_oom;
       for (const auto& k : f.killed) d.evidence.push_back(k);
       d.fix = kMemoryFix;
     }},
    {"gpu_lost", [](const Findings& f, const Context&) { return !f.gpu_lost.empty(); },
     [](const Findings& f, const Context&, Diagnosis& d) {
       d.summary = "a GPU failed: " + f.xid_detail + " (the NVIDIA driver's record)";
       d.evidence = f.gpu_lost;
       if (f.error) d.evidence.push_back(f.error_ev);
       d.fix = kGpuLostFix;
     }},
    // A lost node takes its ranks with it: the kills, cancellations and broken connections that follow
    // are its consequences.
    {"node_failure", [](const Findings& f, const Context&) { return !f.node_failure.empty(); },
     [](const Findings& f, const Context&, Diagnosis& d) {
       d.summary = (f.failed_node.empty() ? std::string("a node") : "node " + f.failed_node) +
                   " failed (SLURM lost it) and SLURM ended the job";
       d.evidence = f.node_failure;
       d.fix =
           "resume from the last checkpoint on the nodes that are left: run.slurm's job requeues itself, and "
           "submitted with a node range (sbatch --nodes 1-2 ...) it starts again on fewer nodes, with fewer "
           "data-parallel ranks and the same global batch; check the lost node (`llamatrain doctor`, its slurmd log)";
     },
     true, true},
    {"time_limit", [](const Findings& f, const Context&) { return !f.time_limit.empty(); },
     [](const Findings& f, const Context&, Diagnosis& d) {
       d.summary = "the job reached its time limit and SLURM stopped it";
       d.evidence = f.time_limit;
       d.fix = "ask for more time (sbatch --time) or resume in another job; save more often with "
               "exp_manager.checkpoint_callback_params.train_time_interval so less is lost";
     }},
    // The failing rank's error event: its code is the cause (error_cause).
    {"error", [](const Findings& f, const Context&) { return f.error.has_value(); },
     [](const Findings& f, const Context&, Diagnosis& d) { error_cause(f, d); }},
    {"nccl_timeout", [](const Findings& f, const Context&) { return !f.nccl_timeout.empty(); },
     [](const Findings& f, const Context&, Diagnosis& d) {
       d.summary = "a GPU collective timed out (NCCL): a rank stopped taking part in it";
       d.evidence = f.nccl_timeout;
       d.fix = "a rank hung or died, or the network between the nodes failed: the other ranks' logs and `llamatrain "
               "doctor` on the job's nodes say which; NCCL_DEBUG=INFO logs NCCL's view";
     }},
    {"watchdog", [](const Findings& f, const Context& c) { return !f.watchdog.empty() && !c.killed_missing_rank; },
     [](const Findings& f, const Context& c, Diagnosis& d) {
       std::vector<int> missing;
       for (int r = 0; r < c.ranks; r++)
         if (!f.watchdog_ranks.count(r)) missing.push_back(r);
       if (!missing.empty()) d.rank = missing.front();
       std::string who;
       for (int r : missing) who += (who.empty() ? "" : ", ") + std::to_string(r);
       d.summary = fmt::format("a hang: {} never joined {} and the watchdog ended the job",
                               missing.empty() ? std::string("a rank") : "rank " + who, f.watchdog_what);
       d.evidence = f.watchdog;
       d.fix =
           "the rank that never joined was stuck (stopped, blocked in I/O, a dead node or a deadlock): check its "
           "node (`llamatrain doctor`); if the operation is legitimately that slow, raise LLAMATRAIN_WATCHDOG_TIMEOUT";
     },
     true, true},
    {"cancelled",
     [](const Findings& f, const Context&) {
       return !f.cancelled.empty() &&
              ((f.job_cancelled && !f.kill_before_cancel) || (f.killed.empty() && f.bad_exit.empty()));
     },
     [](const Findings& f, const Context&, Diagnosis& d) {
       d.summary = f.cancel_detail.empty() ? "the job was cancelled (scancel, or an administrator)"
                                           : "the job was " + f.cancel_detail;
       d.evidence = f.cancelled;
       if (f.stop_signal) d.evidence.push_back(f.stop_signal_ev);
       d.fix = kNothingFailedFix;
     }},
    {"killed_by_signal",
     [](const Findings& f, const Context&) { return !f.killed.empty() && !f.kill_while_step_ending; },
     [](const Findings& f, const Context&, Diagnosis& d) {
       d.rank = f.killed_rank;
       d.signal = f.killed_signal;
       const int sig = f.killed_signal.value_or(0);
       d.summary =
           fmt::format("rank {} was killed by signal {} ({})", f.killed_rank.value_or(-1), sig, signal_name(sig));
       d.evidence = f.killed;
       // A plain srun (no --kill-on-bad-exit) left the other ranks waiting until someone cancelled the
       // job: the kill came first and is the cause; the cancellation followed.
       if (f.kill_before_cancel && !f.cancelled.empty()) {
         d.evidence.push_back(f.cancelled.front());
         d.notes.push_back("the job was cancelled afterwards, while the other ranks waited for the killed one");
       }
       d.fix = sig == 9 ? "something outside the program killed it: the kernel's OOM killer (give diagnose the output "
                          "of `dmesg` from that node), the scheduler, or a person; check that node's memory and logs"
               : sig == 11 || sig == 7 || sig == 6
                   ? "the program crashed: report it with this log; the run resumes from its last checkpoint"
                   : "find who sent the signal (the scheduler, a person, a node agent)";
     },
     true, true},
    {"stopped_by_signal", [](const Findings& f, const Context&) { return f.stop_signal.has_value(); },
     [](const Findings& f, const Context&, Diagnosis& d) {
       const nlohmann::json& s = *f.stop_signal;
       d.signal =
           s.contains("signal") && s["signal"].is_number() ? std::optional<int>(s["signal"].get<int>()) : std::nullopt;
       d.summary = fmt::format(
           "the run was stopped by {} and saved a checkpoint (a cancellation, the time limit's --signal warning, a "
           "preemption or Ctrl-C)",
           d.signal ? signal_name(*d.signal) : "a signal");
       d.evidence.push_back(f.stop_signal_ev);
       d.fix = kNothingFailedFix;
     },
     true, true},
    {"comm", [](const Findings& f, const Context&) { return !f.comm.empty(); },
     [](const Findings& f, const Context&, Diagnosis& d) {
       d.rank = f.comm_rank;
       d.summary = "an MPI or network failure" + (f.comm_rank ? fmt::format(", first on rank {}", *f.comm_rank) : "");
       d.evidence = f.comm;
       d.fix = "check the nodes' network and MPI setup (`llamatrain doctor`); rerun on healthy nodes";
     },
     true, true},
    {"internal", [](const Findings& f, const Context&) { return !f.internal.empty(); },
     [](const Findings& f, const Context&, Diagnosis& d) {
       d.rank = f.internal_rank;
       d.summary = "an internal check failed" + (f.internal_rank ? fmt::format(" on rank {}", *f.internal_rank) : "");
       d.evidence = f.internal;
       d.fix = "a bug: report it with this log";
     }},
    // An error before the trainer's start event, and not the trainer's own (which has an error event):
    // the model script, the launcher or the job's set-up stopped it.
    {"never_started", [](const Findings& f, const Context&) { return !f.plain_error.empty() && !f.start; },
     [](const Findings& f, const Context&, Diagnosis& d) {
       d.summary = "the job never started training: " + f.plain_error.front().text.substr(7);
       d.evidence = {f.plain_error.front()};
       d.fix = "see the message and its hint; `llamatrain doctor` (launch/slurm/preflight.slurm on the job's nodes) "
               "checks the nodes, the layout and the config's files before a training job";
     }},
    {"error", [](const Findings& f, const Context&) { return !f.plain_error.empty(); },
     [](const Findings& f, const Context&, Diagnosis& d) {
       d.summary = "the program stopped with an error: " + f.plain_error.front().text.substr(7);
       d.evidence = {f.plain_error.front()};
       d.fix = "see the message and its hint";
     }},
    {"success", [](const Findings& f, const Context&) { return f.end.has_value(); },
     [](const Findings& f, const Context&, Diagnosis& d) {
       const nlohmann::json& e = *f.end;
       d.summary = fmt::format("the run finished: {} steps", e.contains("steps") ? e["steps"].dump() : "?");
       d.evidence = {f.end_ev};
       d.fix = "nothing to fix";
     },
     false},
    {"vanished", [](const Findings& f, const Context&) { return f.start.has_value(); },
     [](const Findings& f, const Context&, Diagnosis& d) {
       d.summary = fmt::format("the run started, then its log stops without an error (last step {})", f.last_step);
       d.evidence = {f.start_ev};
       d.fix = "the process was killed without a trace (SIGKILL: the kernel's OOM killer, the scheduler) or its node "
               "failed: give diagnose the SLURM job log and `dmesg` of its nodes";
     },
     true, true},
    {"never_started", [](const Findings&, const Context&) { return true; },
     [](const Findings&, const Context&, Diagnosis& d) {
       d.summary = "no training log: the job never started training";
       d.fix = "check the compute nodes with `llamatrain doctor` and the scheduler's own log of the job";
     }},
};

}  // namespace

std::vector<LogText> read_job_logs(const std::vector<std::string>& paths) {
  if (paths.empty())
    fail("diagnose: no log given, expected a job log or a run folder\nhint: llamatrain diagnose slurm-1234.out "
         "runs/cpt");
  std::vector<LogText> logs;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> files;
      for (auto it = fs::directory_iterator(p, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
        if (it->is_regular_file(ec) && is_job_log(it->path())) files.push_back(it->path());
      if (ec) fail("diagnose: cannot list {}: {}\nhint: check its permissions", p, ec.message());
      // train_log.txt first (the run's own record), then the job logs by name
      std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
        const bool ta = a.filename() == "train_log.txt", tb = b.filename() == "train_log.txt";
        return ta != tb ? ta : a < b;
      });
      for (const auto& f : files) logs.push_back({f.string(), read_text(f)});
    } else if (fs::exists(p, ec)) {
      logs.push_back({p, read_text(p)});
    } else {
      fail("diagnose: {} does not exist, expected a job log or a run folder\nhint: check the path; a job that never "
           "started (cancelled or failed while pending) wrote no log: `scontrol show job ID` or `sacct -j ID` says "
           "why, and `llamatrain doctor` checks the nodes",
           p);
    }
  }
  return logs;
}

Diagnosis diagnose(const std::vector<LogText>& logs) {
  Findings f;
  const std::string latest_start = latest_batch_time(logs);
  for (const auto& log : logs) scan(log, f, latest_start);
  choose_attempt(f);
  Diagnosis d;
  d.last_step = f.last_step;
  d.last_checkpoint = f.last_checkpoint;
  d.nonfinite_first_step = f.first_skip;
  d.rollbacks = f.rollback_count;
  if (!f.skip_steps.empty())
    d.notes.push_back(fmt::format("{} non-finite step(s) skipped, the first at step {}; {} rollback(s)", f.skip_count,
                                  f.first_skip, f.rollback_count));
  if (!f.damaged_checkpoint.empty())
    d.notes.push_back("a damaged checkpoint was skipped: " + f.damaged_checkpoint.front().text);
  Context c;
  c.ranks =
      f.start && f.start->contains("ranks") && (*f.start)["ranks"].is_number() ? (*f.start)["ranks"].get<int>() : 0;
  c.killed_missing_rank = f.killed_rank && !f.watchdog_ranks.count(*f.killed_rank) && !f.kill_while_step_ending;
  // The first rule that applies names the cause (kRules: in the order the causes take precedence).
  for (const Rule& rule : kRules) {
    if (!rule.applies(f, c)) continue;
    d.cause = rule.cause;
    if (rule.resume) d.resume = resume_command(f);
    rule.fill(f, c, d);  // (an error event's code becomes the cause, and the checkpoint code its own resume)
    break;
  }
  if (d.cause != "success" && !f.mpi_abort.empty() && d.evidence.size() < 6) d.evidence.push_back(f.mpi_abort.front());
  return d;
}

bool Diagnosis::retry() const {
  for (const Rule& rule : kRules)
    if (cause == rule.cause) return rule.retry;
  return false;
}

nlohmann::ordered_json Diagnosis::to_json() const {
  nlohmann::ordered_json j{{"cause", cause}, {"retry", retry()}, {"summary", summary}};
  j["rank"] = rank ? nlohmann::ordered_json(*rank) : nlohmann::ordered_json();
  j["signal"] = signal ? nlohmann::ordered_json(*signal) : nlohmann::ordered_json();
  auto& ev = j["evidence"] = nlohmann::ordered_json::array();
  for (const auto& e : evidence) ev.push_back({{"file", e.file}, {"line", e.line}, {"text", e.text}});
  j["fix"] = fix;
  j["resume"] = resume;
  j["last_step"] = last_step;
  j["last_checkpoint"] = last_checkpoint;
  j["nonfinite_first_step"] = nonfinite_first_step;
  j["rollbacks"] = rollbacks;
  j["notes"] = notes;
  return j;
}

std::string Diagnosis::to_text() const {
  std::string s = fmt::format("cause: {} ({})\n", summary, cause);
  for (const auto& e : evidence) s += fmt::format("  {}:{}: {}\n", e.file, e.line, e.text);
  for (const auto& n : notes) s += "note: " + n + "\n";
  if (last_step >= 0) s += fmt::format("last step logged: {}\n", last_step);
  if (!last_checkpoint.empty()) s += "last checkpoint: " + last_checkpoint + "\n";
  s += "fix: " + fix + "\n";
  if (!resume.empty()) s += "resume: " + resume + "\n";
  return s;
}

}  // namespace llamatrain::train
