// What `llamatrain plan` works out about a training job before it is submitted: the preflight of the
// first rank of every pipeline stage (train/run_plan.h) for the job's nodes and ranks, every check
// that can fail before the first step, each as PASS / WARN / FAIL with its reason (layout, data files
// and their token ids against the tokenizer, tokenizer against the model, the checkpoint a resume
// would load, output folders writable, disk for the checkpoints kept, memory per rank), the memory
// of a rank in its parts, and a predicted step time (jobs/step_model.h) on this CPU, from short probes
// of its matmul and memory rates, or on a named accelerator. Nothing is written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jobs/step_model.h"
#include "jobs/check_status.h"
#include "config/config.h"
#include "train/run_plan.h"

namespace llamatrain::train {

// The job's nodes and ranks per node are the config's trainer.num_nodes and trainer.devices.
struct JobTarget {
  std::string hardware;         // "" or "cpu": this CPU, else an accelerators() name
  double probe_seconds = 0.02;  // time per matmul shape probed on this CPU
};

struct PlanCheck {
  using Status = CheckStatus;
  Status status = Status::pass;
  std::string what;    // "layout", "data", "memory", ...
  std::string detail;  // the finding, or the error and its hint
};

// One rank's memory in its parts, in bytes.
struct RankMemory {
  int stage = 0;
  int64_t weights = 0, gradients = 0, optimizer = 0, activations = 0;
  int64_t communication = 0;  // pipeline send/receive buffers
  int64_t runtime = 0;        // libraries, kernels and MPI (this CPU: measured in this process); a GPU's
                              // context, library workspace and kernel scratch (model::MemoryPlan::runtime)
  // Under tensor or pipeline parallelism, the rank that writes a checkpoint's weights (the first of
  // stage 0) gathers the whole model's fp32 weights at each save (train/gather_weights.h), in host
  // memory: counted when planning this CPU, 0 elsewhere and for an accelerator's memory.
  int64_t save_gather = 0;
  // With async_save, the host copy a save written behind the steps keeps until it is committed: this
  // rank's AdamW moments, and on the rank that writes the weights without model parallelism their
  // fp32 copy (with it, save_gather's weights are the copy). Host memory, counted like save_gather.
  int64_t save_copy = 0;
  // With convert_to_hf, the export at the end of the run on the rank that writes it (the first of
  // stage 0 and data-parallel 0): the exported files read back (in their dtype) into a second model of
  // fp32 weights, which is checked against the trained one. Host memory, counted like save_gather;
  // it comes after the last step, on top of what the steps hold.
  int64_t export_hf = 0;
  // The bf16 modes' matmul operand form the figures assume (the weights' copy and the matmul-only
  // activations): bf16, or bf16 values held in floats (4 bytes) where the CPU's fp32 kernel is the one.
  bool float_operands = false;
  int64_t total() const {
    return weights + gradients + optimizer + activations + communication + runtime + save_gather + save_copy;
  }
  int64_t peak() const { return total() + export_hf; }  // the steps', then the export's at the end
};

struct JobPlan {
  std::string hardware;  // what the figures are for: "this CPU (...)", or the accelerator's name
  int nodes = 1, ranks_per_node = 1;
  bool planned = false;            // the preflight passed: the figures below are filled
  RunPlan plan;                    // rank 0's
  std::vector<RankMemory> stages;  // the first rank of each pipeline stage
  // A rank's activations under each recompute mode ("none", "selective", "full"), the rest unchanged.
  std::vector<std::pair<std::string, int64_t>> activations_by_recompute;
  int64_t memory_per_rank = -1;  // what a rank can have (-1 unknown)
  StepPrediction prediction;
  int64_t max_steps = 0;
  std::vector<PlanCheck> checks;
  std::vector<std::string> suggestions;  // overrides that make the job fit, when memory does not
  bool ok() const;
  int64_t peak_rank_bytes() const;
};

// config: as loaded (with overrides); target: the job's shape and hardware.
JobPlan plan_job(TrainConfig config, const JobTarget& target);

}  // namespace llamatrain::train
