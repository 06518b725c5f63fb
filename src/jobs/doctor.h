// Node checks before a training job (`llamatrain doctor`): what each rank's machine offers (CPU
// features and the matmul kernels oneDNN runs, memory, disk, threads against cores), whether the
// ranks reach each other (every rank answers, an all-reduce gives the exact sum, and how fast it
// is), whether the run folder is one folder that every rank can write and sees (a shared filesystem),
// and whether the files a config names can be read. Every rank runs every check; the table shows
// each check's worst result over the ranks, with the detail of the rank that had it. Nothing is left
// behind: the probe files are removed, and a run folder made only for the check too.
#pragma once

#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "jobs/check_status.h"
#include "config/config.h"

namespace llamatrain::train {

struct DoctorRow {
  std::string check;  // "cpu", "matmul", "memory", ...
  CheckStatus status = CheckStatus::pass;
  std::string detail;  // one line; for a WARN or FAIL, what is wrong and the fix
  int rank = 0;        // the rank whose result this is (the worst one)
};

struct DoctorOptions {
  const TrainConfig* config = nullptr;  // the config's files and run folder are checked when given
  std::string config_error;             // the config did not load: this message, as a FAIL row
  std::string run_dir;                  // the folder checked for writing (default: the config's run
                                        // folder, else the current folder)
  double allreduce_mib = 16;            // bytes per rank of the timed all-reduce
};

// Runs every check on this rank. `world` may be null (this process alone); otherwise every rank of
// it must call this. Returns the same rows on every rank.
std::vector<DoctorRow> run_doctor(const DoctorOptions& options, parallel::Communicator* world);

// The rows as an aligned table, one line each: "PASS  memory   20.1 GiB available of 23.6 GiB".
std::string doctor_table(const std::vector<DoctorRow>& rows);

}  // namespace llamatrain::train
