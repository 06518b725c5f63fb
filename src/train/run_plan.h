// What a training job will do, worked out before it touches anything: preflight() checks the layout
// against the job's processes, the run folder, the data files, the tokenizer against the model, the
// micro-batch against the model's limits and the memory each rank needs, and returns the RunPlan that
// the trainer follows (and that a planning command can print). Everything that can fail before the
// expensive work fails here, with the config key in the message. Nothing is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "io/vocab_resize.h"
#include "model/config.h"
#include "model/memory.h"
#include "model/modes.h"
#include "model/shard.h"
#include "parallel/layout.h"
#include "config/config.h"

namespace llamatrain::train {

// Elements of fp32 gradients per data-parallel all-reduce bucket (16 MB).
constexpr size_t kDpBucketElements = size_t(1) << 22;

struct RunPlan {
  parallel::ParallelLayout layout;  // this rank's place: data x tensor x pipeline
  model::LlamaConfig model;         // the full model (from model.init_from, or the config's shape)
  model::ShardPlan shard;           // this rank's part of it
  std::vector<int> pipeline_split;  // layers per stage (one entry without pipeline parallelism)
  model::Precision precision = model::Precision::fp32;
  model::Device device = model::Device::cpu;  // trainer.accelerator
  std::string device_note;                    // why trainer.accelerator=auto chose the cpu ("" otherwise)
  model::Recompute recompute = model::Recompute::none;
  int recompute_layers = -1;  // layers [0, this) recompute; -1: all
  int B = 1, T = 1;           // micro batch x sequence length
  int64_t global_batch = 1;
  int64_t micro_batches = 1;  // per data-parallel rank per step (gradient accumulation)
  int slots = 1;              // micro-batches in flight on this pipeline stage (1F1B)
  bool zero1 = false;         // the AdamW moments sharded over the data-parallel ranks
  model::MemoryPlan memory;   // what this rank holds
  std::string log_dir, checkpoint_dir;
  std::string export_dir;      // "" without convert_to_hf
  std::string tokenizer_path;  // "" when the run has none
  std::shared_ptr<const data::Tokenizer> tokenizer;
  // model.init_from with a tokenizer of more pieces than its vocab_size: the rows the model adds
  // (growth.active()); model.vocab_size is then the tokenizer's count.
  io::VocabGrowth growth;

  // "layers 0-3, layers 4-7 + lm head"; the busiest stage's share of a step's work; a split that
  // balances the stages better, when there is one (first and last stage sizes; empty otherwise).
  std::string pipeline_stages() const;
  double busiest_stage_share(const std::vector<int>& split) const;
  std::vector<int> better_pipeline_split() const;
  // "none", "full", or "full in layers 0-3".
  std::string recompute_text() const;
};

// The run's directory, as NeMo's exp_manager names it: explicit_log_dir, or
// exp_dir (default ./nemo_experiments) / name / version, where version is exp_manager.version,
// else $NEMO_EXPM_VERSION, else $SLURM_JOB_ID, else none when resume_if_exists is set (so a rerun
// finds its checkpoints), else the start time.
std::string resolve_log_dir(const TrainConfig& config);

// What model.freeze (and freeze_base_vocab) leave out of training, over the whole model, by Hugging
// Face tensor: "19 tensors and part of 2 others, 1.23M parameters (45.6% of the model); training 1.47M
// parameters"; "" when nothing is frozen.
std::string freeze_summary(const model::LlamaConfig& model);

// The plan of rank `rank` of a job of world_size processes; throws Error for anything that would make
// the job fail later. here: the job runs on this machine, so its device must be usable here and the
// plan must fit the device's free memory; false when planning for other machines (`llamatrain plan`
// compares with theirs, and plans for the GPU trainer.accelerator names on a machine without one).
RunPlan preflight(const TrainConfig& config, int world_size, int rank, bool here = true);

// Whether a run saves before its end (every_n_train_steps below max_steps, or train_time_interval):
// only those saves are written behind the steps; the end's and a stop signal's are written in place.
bool saves_before_the_end(const TrainConfig& cfg);
// The host copy a save written behind the steps keeps on the rank of `p` (what plan counts as RankMemory::save_copy).
int64_t save_copy_bytes(const RunPlan& p);
// async_save left unset: on where a rank's host copy, beside what its steps hold, fits in what the rank
// may have (memory_per_rank; < 0: unknown) with a fifth of it left free. A rank with no copy fits.
bool async_save_fits(int64_t copy_bytes, int64_t steps_bytes, int64_t memory_per_rank);

}  // namespace llamatrain::train
