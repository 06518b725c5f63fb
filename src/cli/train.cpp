// `llamatrain train CONFIG [key=value ...]`: argument wiring only. The config is loaded and checked
// by train::load_config (NeMo key names, Hydra-style overrides) and run by train::run_training;
// `--help-config` prints every key with its type, default and meaning.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "parallel/mpi_communicator.h"
#include "config/config.h"
#include "train/events.h"
#include "train/trainer.h"

namespace llamatrain::cli {

namespace {

struct TrainOptions {
  std::string config;                  // YAML
  std::vector<std::string> overrides;  // key=value
  bool help_config = false;
};

// Trains the job the config describes: one process, or every rank of an mpirun / srun job.
void run_train(const TrainOptions& o) {
  if (o.help_config) {
    std::fputs(train::config_help().c_str(), stdout);
    return;
  }
  if (o.config.empty())
    fail("train: no config given, expected a YAML file\nhint: llamatrain train configs/tiny.yaml "
         "model.data.data_prefix=[1.0,data/corpus_text_document]; `llamatrain train --help` has examples");
  // A config error ends every rank before MPI starts: its error event on each (rank 0's stdout).
  train::LoadedConfig loaded;
  try {
    loaded = train::load_config(o.config, o.overrides);
  } catch (const Error& e) {
    train::print_error_event(*e.code() ? e.code() : "config", e.what(), train::rank_from_environment(),
                             train::command_fields({o.config, o.overrides}, train::ranks_from_environment()));
    throw;
  }
  // One process, or a parallel job under mpirun / srun (an MPI singleton without a launcher).
  const auto world = parallel::make_mpi_world();
  train::TrainResult result;
  try {
    result = train::run_training(loaded.config, loaded.notes, world.get(), {o.config, o.overrides},
                                 train::faults_from_environment());
  } catch (const std::exception& e) {
    // The other ranks may be waiting in a collective: end the whole job, not this rank alone.
    if (world->size() > 1) world->abort(std::string("error: ") + e.what());
    throw;
  }
  // Stopped by SIGTERM / SIGINT after saving: the shell's convention, so a batch script (SLURM's
  // requeue) sees an interrupted run rather than a finished one.
  if (result.stop_signal != 0) {
    std::fflush(stdout);
    std::exit(128 + result.stop_signal);
  }
}

}  // namespace

void register_train(CLI::App& app) {
  auto [cmd, o] = add_command<TrainOptions>(
      app, "train", "Train a Llama model from a YAML config (NeMo key names)",
      "Overrides are Hydra's key=value with dotted keys; docs/configuration.md describes every key.\n\n"
      "Examples:\n"
      "  # the tiny model on the test corpus (run from the repository root), preprocessed first:\n"
      "  llamatrain preprocess --input tests/data/fixtures/corpus.jsonl \\\n"
      "      --tokenizer-model tests/data/fixtures/tokenizer.model --output-prefix /tmp/fixture --append-eod\n"
      "  llamatrain train configs/tiny.yaml model.data.data_prefix=[1.0,/tmp/fixture_text_document]\n"
      "  # continued pretraining of a Hugging Face model (its shape and tokenizer.model come with it):\n"
      "  llamatrain train configs/llama2_7b.yaml model.init_from=/models/Llama-2-7b-hf \\\n"
      "      model.data.data_prefix=[1.0,data/book_text_document] trainer.max_steps=2000\n"
      "  # resume: the same command again continues from the newest checkpoint in the log folder\n"
      "  llamatrain train configs/tiny.yaml model.data.data_prefix=[1.0,/tmp/fixture_text_document] \\\n"
      "      exp_manager.explicit_log_dir=runs/tiny exp_manager.resume_if_exists=true\n"
      "  # a Hugging Face folder at the end, which `llamatrain generate out/tiny-hf` loads:\n"
      "  llamatrain train configs/tiny.yaml model.data.data_prefix=[1.0,/tmp/fixture_text_document] \\\n"
      "      convert_to_hf=true model.output_dir=out/tiny-hf\n"
      "  # data parallel on 2 processes, optimizer state sharded (ZeRO-1); under SLURM: srun llamatrain ...\n"
      "  mpirun -np 2 llamatrain train configs/tiny.yaml model.data.data_prefix=[1.0,/tmp/fixture_text_document] \\\n"
      "      trainer.devices=2 model.distributed_optimizer=true\n"
      "  # 8 processes: tensor parallel 2 x pipeline parallel 2 x data parallel 2\n"
      "  mpirun -np 8 llamatrain train configs/tiny.yaml model.data.data_prefix=[1.0,/tmp/fixture_text_document] \\\n"
      "      trainer.devices=8 model.tensor_model_parallel_size=2 model.pipeline_model_parallel_size=2\n"
      "  llamatrain train --help-config          # every key, its type, default and meaning",
      run_train);
  cmd->add_option("config", o->config, "YAML config (NeMo megatron_llama_config.yaml key names)");
  cmd->add_option("overrides", o->overrides, "key=value overrides, e.g. trainer.max_steps=100");
  cmd->add_flag("--help-config", o->help_config, "List every config key with its type, default and meaning");
}

}  // namespace llamatrain::cli
