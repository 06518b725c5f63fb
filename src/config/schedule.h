// Learning-rate schedules under NeMo's names (model.optim.sched.name), with the formulas of the code
// the seeds ran: nemo/core/optim/lr_scheduler.py of aws-neuron/neuronx-nemo-megatron (NeMo 1.x),
// and Megatron-core's OptimizerParamScheduler (megatron/core/optimizer_param_scheduler.py) for WSD.
//
// Step indexing: lr(step) takes the scheduler's step count, i.e. the number of optimizer updates
// already applied. NeMo's scheduler is a torch LRScheduler: its constructor sets last_epoch = 0,
// Lightning calls scheduler.step() after every optimizer step, so update k (1-based, as
// LlamaModel::optimizer_step counts) runs with lr(k - 1), and a run resumed at global step g uses
// lr(g) for its next update. Megatron counts num_steps in samples (increment = global batch per
// iteration, warmup and decay lengths also multiplied by the global batch), which is the same
// thing in iterations with a constant global batch; here everything is in iterations.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace llamatrain::train {

// model.optim.sched as written in the YAML (key names are NeMo's; wsd_* follow Megatron-core's
// lr_wsd_decay_iters / lr_wsd_decay_style). Defaults live in the config schema (config/config_schema.cpp).
struct SchedConfig {
  std::string name;  // CosineAnnealing | WarmupAnnealing | WarmupPolicy | WarmupHoldPolicy | WSD | none
  std::optional<int64_t> warmup_steps;    // at most one of warmup_steps / warmup_ratio
  std::optional<double> warmup_ratio;     // warmup_steps = int(warmup_ratio * max_steps)
  std::optional<int64_t> constant_steps;  // CosineAnnealing: min_lr held for the last constant_steps
  std::optional<double> constant_ratio;
  std::optional<int64_t> hold_steps;  // WarmupHoldPolicy: peak lr held after warmup
  std::optional<double> hold_ratio;
  double min_lr = 0;
  std::optional<int64_t> max_steps;        // null: trainer.max_steps
  std::optional<int64_t> wsd_decay_steps;  // WSD: length of the final decay
  std::string wsd_decay_style;             // WSD: linear | cosine | exponential | minus_sqrt

  bool operator==(const SchedConfig&) const = default;
};

enum class ScheduleKind { cosine_annealing, warmup_annealing, warmup_policy, warmup_hold_policy, wsd, none };
enum class WsdDecayStyle { linear, cosine, exponential, minus_sqrt };

// A resolved schedule: every length in optimizer steps, ratios already applied.
struct LrSchedule {
  ScheduleKind kind = ScheduleKind::none;
  double max_lr = 0;  // model.optim.lr
  double min_lr = 0;
  int64_t max_steps = 0;  // length of the schedule (NeMo's max_steps, Megatron's lr_decay_steps)
  int64_t warmup_steps = 0;
  int64_t constant_steps = 0;  // CosineAnnealing
  int64_t decay_steps = 0;     // CosineAnnealing with constant_steps: max_steps - constant - warmup
  int64_t hold_steps = 0;      // WarmupHoldPolicy: warmup + hold (NeMo stores the sum)
  int64_t wsd_decay_steps = 0;
  WsdDecayStyle wsd_style = WsdDecayStyle::exponential;

  // Learning rate for scheduler step `step` >= 0 (see the file comment for how it maps to updates).
  double lr(int64_t step) const;
};

// Resolves and validates model.optim.sched for peak lr `lr` and trainer.max_steps. Throws Error
// naming the model.optim.sched key for values NeMo or Megatron would reject or that give an empty
// or negative phase (both warmup_steps and warmup_ratio, constant + warmup > max_steps, lr < min_lr,
// WSD without wsd_decay_steps, ...).
LrSchedule make_schedule(const SchedConfig& sched, double lr, int64_t trainer_max_steps);

}  // namespace llamatrain::train
