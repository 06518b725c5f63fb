// `llamatrain diagnose`: names why a training job ended, from its logs: the trainer's event lines
// (train/events.h) in train_log.txt or the job's stdout, the launcher's messages (OpenMPI's mpirun,
// SLURM's srun and slurmstepd), the watchdog's and the MPI layer's lines on stderr, and the kernel's
// OOM killer lines when dmesg text is given. One cause wins, by a fixed order (the scheduler's and the
// kernel's word first, then the failing rank's error event, then what the launcher saw), with the
// lines that show it, the fix, and the command that resumes the run (its start event's command with
// exp_manager.resume_if_exists=true; for a job of launch/slurm/run.slurm, whose `batch` event says how
// it was submitted, that sbatch command with LLAMATRAIN_RUN_DIR). The logs given together are taken as
// one job's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace llamatrain::train {

struct LogText {
  std::string path;  // as shown in the evidence
  std::string text;
};

// The logs at `paths`: a file as it is; a run folder's train_log.txt and the *.out, *.err and *.log
// files beside it. Throws Error for a path that does not exist or cannot be read.
std::vector<LogText> read_job_logs(const std::vector<std::string>& paths);

struct Evidence {
  std::string file;
  int64_t line = 0;  // 1-based
  std::string text;
};

struct Diagnosis {
  // Stable names: success, host_oom, oom, time_limit, cancelled, stopped_by_signal, killed_by_signal,
  // watchdog, comm, nonfinite, divergence, data, checkpoint, config, disk_full, io, export, internal, error,
  // vanished (started, then nothing), never_started.
  std::string cause;
  std::string summary;  // one sentence for a person
  std::vector<Evidence> evidence;
  std::string fix;
  std::string resume;       // a shell command that resumes the run; "" when there is none to give
  std::optional<int> rank;  // the first failing rank where the logs name it
  std::optional<int> signal;
  int64_t last_step = -1;             // the last step logged, -1 when none
  std::string last_checkpoint;        // the newest checkpoint saved or loaded, "" when none
  int64_t nonfinite_first_step = -1;  // the first step skipped as non-finite, -1 when none
  int64_t rollbacks = 0;              // rollbacks to a checkpoint after non-finite steps
  std::vector<std::string> notes;     // what else happened (non-finite steps skipped, rollbacks)

  // Whether starting the job again can help (a rank killed or stopped from outside, a hung rank the
  // watchdog ended, a communication failure, a rank that vanished): what SLURM's run.slurm requeues on.
  // A config, data, memory or divergence failure would fail the same way again.
  bool retry() const;
  nlohmann::ordered_json to_json() const;
  std::string to_text() const;
};

Diagnosis diagnose(const std::vector<LogText>& logs);

}  // namespace llamatrain::train
