// `llamatrain doctor [--all-ranks] [CONFIG [overrides]]`: argument wiring for train::run_doctor
// (jobs/doctor.h). Rank 0 prints the table; the exit status is 1 on every rank when any check
// failed, so that a batch job (launch/slurm/preflight.slurm) fails with the reasons in its log.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "model/machine.h"
#include "parallel/mpi_communicator.h"
#include "config/config.h"
#include "jobs/doctor.h"

namespace llamatrain::cli {

namespace {

struct DoctorArgs {
  std::string config;
  std::vector<std::string> overrides;
  bool all_ranks = false;
  std::string run_dir;
  double allreduce_mib = 16;
};

void run(const DoctorArgs& a) {
  // A config that does not load is one FAIL row: the other checks still run, on every rank, and the
  // table (rank 0's) says why, instead of each rank printing the error on its own.
  std::optional<train::LoadedConfig> loaded;
  train::DoctorOptions o;
  try {
    if (!a.config.empty()) loaded = train::load_config(a.config, a.overrides);
  } catch (const Error& e) {
    o.config_error = e.what();
  }
  o.config = loaded ? &loaded->config : nullptr;
  o.run_dir = a.run_dir;
  o.allreduce_mib = a.allreduce_mib;

  // Rank 0 prints the table (and the failure) before the ranks part: under mpirun a rank that exits 1
  // first would have rank 0 killed before it writes a line.
  std::vector<std::string> failed;
  {
    std::unique_ptr<parallel::Communicator> world;
    if (a.all_ranks) world = parallel::make_mpi_world();
    const int rank = world ? world->rank() : 0;
    const std::vector<train::DoctorRow> rows = train::run_doctor(o, world.get());
    size_t warned = 0;
    for (const auto& r : rows) {
      if (r.status == train::CheckStatus::fail) failed.push_back(r.check);
      warned += r.status == train::CheckStatus::warn;
    }
    if (rank == 0) {
      std::fputs(train::doctor_table(rows).c_str(), stdout);
      const std::string choices = model::matmul_choices_text("  ");
      if (!choices.empty()) std::fputs(choices.c_str(), stdout);
      std::printf("doctor: %zu checks, %zu failed, %zu warnings\n", rows.size(), failed.size(), warned);
      std::fflush(stdout);
      if (!failed.empty()) {
        std::string names;
        for (const auto& f : failed) names += (names.empty() ? "" : ", ") + f;
        std::fprintf(stderr,
                     "error: doctor: %zu check%s failed (%s), expected none\nhint: the FAIL rows above say what is "
                     "wrong and how to fix it\n",
                     failed.size(), failed.size() == 1 ? "" : "s", names.c_str());
        std::fflush(stderr);
      }
    }
    if (world) world->barrier();
  }  // MPI is finalized here, on every rank, before any rank exits
  if (!failed.empty()) std::exit(1);
}

}  // namespace

void register_doctor(CLI::App& app) {
  auto [cmd, a] = add_command<DoctorArgs>(
      app, "doctor", "Check the nodes and ranks of a job before training (PASS/WARN/FAIL table)",
      "Checks: CPU features and the matmul kernels oneDNN runs, threads per rank against cores, memory and\n"
      "disk free, every rank answering, an all-reduce's sums and bandwidth, the run folder written by every\n"
      "rank and seen by rank 0 (a shared filesystem), and the config's files readable. Exit status 1 when a\n"
      "check fails.\n\n"
      "Examples:\n"
      "  llamatrain doctor                                   # this machine\n"
      "  llamatrain doctor configs/tiny.yaml model.data.data_prefix=[1.0,/tmp/fixture_text_document]\n"
      "  mpirun -np 2 llamatrain doctor --all-ranks configs/tiny.yaml \\\n"
      "      model.data.data_prefix=[1.0,/tmp/fixture_text_document] trainer.devices=2\n"
      "  srun --mpi=pmix llamatrain doctor --all-ranks     # every rank of a SLURM allocation\n"
      "  sbatch --nodes 2 launch/slurm/preflight.slurm launch/models/tiny.sh   # plan and doctor as a job",
      run);
  cmd->add_option("config", a->config, "YAML config: its files and run folder are checked too");
  cmd->add_option("overrides", a->overrides, "key=value overrides, as for train");
  cmd->add_flag("--all-ranks", a->all_ranks,
                "Check every rank of the mpirun/srun job together (ranks, all-reduce, shared run folder)");
  cmd->add_option("--run-dir", a->run_dir, "Folder to check for writing (default: the config's run folder, else .)");
  cmd->add_option("--allreduce-mib", a->allreduce_mib, "MiB per rank of the timed all-reduce")
      ->check(CLI::Range(0.001, 4096.0));
}

}  // namespace llamatrain::cli
