// The training log's event lines: `@event ` and one single-line JSON object with at least "event"
// (its kind), printed by the trainer beside its human lines so that tools (`llamatrain diagnose`,
// `llamatrain report`) read a run's log without parsing prose. docs/training.md lists the kinds and
// their fields; readers ignore kinds and fields they do not know and tolerate missing ones.
// Also here: what the first line says about the job (SLURM's names, the hosts) and the error event
// of a failure, whose code names its kind.
#pragma once

#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "obs/log_lines.h"

namespace llamatrain::train {

// The event line's format (obs/log_lines.h), as the trainer and diagnose name it.
using obs::event_line;
using obs::kEventMarker;
using obs::parse_event_line;
using obs::utc_time_ms;

// Whether event lines go to stdout: yes under a launcher (srun, mpirun: the job's log) or when it is
// a file or a pipe, no for a single process on a terminal, where they would only repeat the human
// lines. The run folder's train_log.txt has them either way.
bool events_on_stdout();

// The job as the scheduler or the launcher names it: SLURM's job id and name and node list when set.
struct JobInfo {
  std::string job_id, job_name, node_list;  // "" when not under SLURM
  std::string launcher;                     // "srun", "mpirun" or "" (a single process started directly)
};
JobInfo job_from_environment();
// How to start this job again, as it was started: the launcher's command line before the program
// (mpirun's own options as typed: -np, --allow-run-as-root, -x, --mca, --hostfile..., read from the
// parent process when it is mpirun, mpiexec, orterun or prterun; srun's --nodes, --ntasks and
// --cpus-per-task from SLURM's step variables), empty for a single process or a launcher not known;
// and this program as it was named (argv[0]).
std::vector<std::string> launcher_command();
std::string program_as_started();
// This process's rank as the launcher says it before MPI starts (OpenMPI, PMIx, SLURM), 0 without one.
int rank_from_environment();

// How the run was started, for its start event: a tool repeats it to resume.
struct RunCommand {
  std::string config;                  // the YAML path as given
  std::vector<std::string> overrides;  // key=value, in order
};
// The fields of the start event that say how to run it again: config, overrides, cwd, ranks, launcher,
// launcher_command and program.
nlohmann::ordered_json command_fields(const RunCommand& command, int ranks);
// The job's number of ranks as the launcher says it before MPI starts, 1 without one.
int ranks_from_environment();

// A failure's stable kind: Error::code when set; std::bad_alloc "oom"; a filesystem error "disk_full"
// when the disk is full, else "io"; otherwise `context` (the trainer's step that failed).
std::string error_code(const std::exception& e, const char* context);
// The error event of a failure on `rank`; `extra`: more fields (command_fields() of a run that
// failed before its start event).
std::string error_event(const std::string& code, const std::string& message, int rank,
                        const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());
// Prints an error event where a failure before the run's console exists belongs: rank 0's stdout,
// other ranks' stderr behind "[rank N] ".
void print_error_event(const std::string& code, const std::string& message, int rank,
                       const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

}  // namespace llamatrain::train
