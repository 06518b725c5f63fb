// NeMo's learning-rate schedulers and Megatron-core's WSD, transcribed formula by formula (same
// operation order, so values agree with the Python to the last bit up to libm). Sources:
// neuronx-nemo-megatron nemo/nemo/core/optim/lr_scheduler.py (WarmupPolicy, WarmupHoldPolicy,
// WarmupAnnealHoldPolicy + CosineAnnealing, WarmupAnnealing) and Megatron-LM
// megatron/core/optimizer_param_scheduler.py (OptimizerParamScheduler.get_lr, lr_decay_style WSD).
// Upstream NVIDIA NeMo differs in one place: with constant_steps > 0 its CosineAnnealing warms up
// as lr * step / warmup_steps; the Neuron fork the seeds ran uses lr * (step + 1) / (warmup + 1) on
// both paths, which is what lr() does.
#include "config/schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace llamatrain::train {

namespace {

constexpr const char* kKey = "model.optim.sched";

ScheduleKind parse_kind(const std::string& name) {
  if (name == "CosineAnnealing") return ScheduleKind::cosine_annealing;
  if (name == "WarmupAnnealing") return ScheduleKind::warmup_annealing;
  if (name == "WarmupPolicy") return ScheduleKind::warmup_policy;
  if (name == "WarmupHoldPolicy") return ScheduleKind::warmup_hold_policy;
  if (name == "WSD") return ScheduleKind::wsd;
  if (name == "none") return ScheduleKind::none;
  fail("{}.name: got '{}', expected one of CosineAnnealing, WarmupAnnealing, WarmupPolicy, WarmupHoldPolicy, "
       "WSD, none\nhint: CosineAnnealing is what NeMo's Llama config uses",
       kKey, name);
}

WsdDecayStyle parse_wsd_style(const std::string& s) {
  if (s == "linear") return WsdDecayStyle::linear;
  if (s == "cosine") return WsdDecayStyle::cosine;
  if (s == "exponential") return WsdDecayStyle::exponential;
  if (s == "minus_sqrt") return WsdDecayStyle::minus_sqrt;
  fail("{}.wsd_decay_style: got '{}', expected one of linear, cosine, exponential, minus_sqrt\n"
       "hint: Megatron-core's default is exponential",
       kKey, s);
}

// NeMo: `steps` if given, else int(ratio * max_steps), else 0; both given is an assertion there.
int64_t steps_or_ratio(const std::optional<int64_t>& steps, const std::optional<double>& ratio, int64_t max_steps,
                       const char* steps_key, const char* ratio_key) {
  if (steps && ratio)
    fail("{0}.{3}: got {4} while {1} is {2} too, expected one of them\nhint: remove {0}.{1} or {0}.{3}", kKey,
         steps_key, *steps, ratio_key, *ratio);
  if (steps) {
    if (*steps < 0) fail("{}.{}: got {}, expected a number >= 0", kKey, steps_key, *steps);
    return *steps;
  }
  if (ratio) {
    if (!(*ratio >= 0.0 && *ratio <= 1.0))
      fail("{}.{}: got {}, expected a fraction in [0, 1]", kKey, ratio_key, *ratio);
    return int64_t(*ratio * double(max_steps));  // Python int(): truncation
  }
  return 0;
}

void refuse_unused(bool set, const char* key, const std::string& name) {
  if (set)
    fail("{0}.{1} is set, but scheduler {2} has no such parameter (NeMo would refuse it too)\n"
         "hint: remove {0}.{1} or choose a scheduler that uses it",
         kKey, key, name);
}

// WarmupPolicy._get_warmup_lr: initial_lr * ((step + 1) / (warmup_steps + 1)).
double nemo_warmup(double base, int64_t step, int64_t warmup) {
  const double lr_val = double(step + 1) / double(warmup + 1);
  return base * lr_val;
}

// _cosine_annealing(initial_lr, step, max_steps, min_lr).
double cosine_annealing(double initial_lr, int64_t step, int64_t max_steps, double min_lr) {
  const double mult = 0.5 * (1 + std::cos(std::numbers::pi * double(step) / double(max_steps)));
  return (initial_lr - min_lr) * mult + min_lr;
}

// _linear_warmup_with_cosine_annealing(max_lr, warmup_steps, step, decay_steps, min_lr) (Neuron fork).
double linear_warmup_with_cosine_annealing(double max_lr, int64_t warmup_steps, int64_t step, int64_t decay_steps,
                                           double min_lr) {
  if (warmup_steps > 0 && step <= warmup_steps) return max_lr * double(step + 1) / double(warmup_steps + 1);
  if (step > warmup_steps + decay_steps) return min_lr;
  const double decay_ratio = double(step - warmup_steps) / double(decay_steps);
  const double delta_lr = max_lr - min_lr;
  const double coeff = 0.5 * (std::cos(std::numbers::pi * decay_ratio) + 1.0);
  return min_lr + coeff * delta_lr;
}

}  // namespace

double LrSchedule::lr(int64_t step) const {
  CHECK(step >= 0, "scheduler step {} < 0", step);
  const double base = max_lr;
  switch (kind) {
    case ScheduleKind::none: return base;
    case ScheduleKind::warmup_policy:
    case ScheduleKind::warmup_hold_policy:
      // WarmupPolicy.get_lr / WarmupHoldPolicy.get_lr: warmup, then the hold phase and
      // WarmupPolicy._get_lr both return the base lr, min_lr after max_steps.
      if (step <= warmup_steps && warmup_steps > 0) return nemo_warmup(base, step, warmup_steps);
      if (step > max_steps) return min_lr;
      return base;
    case ScheduleKind::warmup_annealing: {
      if (step <= warmup_steps && warmup_steps > 0) return nemo_warmup(base, step, warmup_steps);
      if (step > max_steps) return min_lr;
      // WarmupAnnealing._get_lr: linear from lr at the end of warmup to min_lr at max_steps.
      const double delta_lr = base - min_lr;
      const double mult = double(step - warmup_steps) / double(max_steps - warmup_steps);
      return min_lr + (1 - mult) * delta_lr;
    }
    case ScheduleKind::cosine_annealing:
      // WarmupAnnealHoldPolicy.get_lr with CosineAnnealing's overrides.
      if (warmup_steps > 0 && step <= warmup_steps) {
        if (constant_steps == 0) return nemo_warmup(base, step, warmup_steps);
        return linear_warmup_with_cosine_annealing(base, warmup_steps, step, decay_steps, min_lr);
      }
      if (constant_steps > 0 && warmup_steps + decay_steps < step && step <= max_steps)
        return linear_warmup_with_cosine_annealing(base, warmup_steps, step, decay_steps, min_lr);
      if (step > max_steps) return min_lr;
      if (constant_steps == 0) return cosine_annealing(base, step - warmup_steps, max_steps - warmup_steps, min_lr);
      return linear_warmup_with_cosine_annealing(base, warmup_steps, step, decay_steps, min_lr);
    case ScheduleKind::wsd: {
      // OptimizerParamScheduler.get_lr with init_lr = 0 (Megatron's --lr-warmup-init default).
      const double init_lr = 0.0;
      if (warmup_steps > 0 && step <= warmup_steps)
        return init_lr + ((base - init_lr) * double(step) / double(warmup_steps));
      if (step > max_steps) return min_lr;
      const double delta_lr = base - min_lr;
      const int64_t anneal_start = max_steps - wsd_decay_steps;
      double coeff = 1.0;
      if (step > anneal_start) {
        const double r = double(step - anneal_start) / double(wsd_decay_steps);
        switch (wsd_style) {
          case WsdDecayStyle::linear: coeff = 1.0 - r; break;
          case WsdDecayStyle::cosine: coeff = 0.5 * (std::cos(std::numbers::pi * r) + 1.0); break;
          case WsdDecayStyle::exponential: coeff = (2.0 * std::pow(0.5, r)) - 1.0; break;
          case WsdDecayStyle::minus_sqrt: coeff = 1.0 - std::sqrt(r); break;
        }
      }
      return min_lr + coeff * delta_lr;
    }
  }
  CHECK(false, "unknown schedule kind");
  return 0;
}

LrSchedule make_schedule(const SchedConfig& c, double lr, int64_t trainer_max_steps) {
  LrSchedule s;
  s.kind = parse_kind(c.name);
  s.max_lr = lr;
  s.min_lr = c.min_lr;
  s.max_steps = c.max_steps ? *c.max_steps : trainer_max_steps;
  if (s.max_steps < 1)
    fail("{}.max_steps: got {}, expected >= 1\nhint: leave it null to use trainer.max_steps", kKey, s.max_steps);
  if (!(lr > 0.0 && std::isfinite(lr))) fail("model.optim.lr: got {}, expected a finite number > 0", lr);
  if (!(c.min_lr >= 0.0 && c.min_lr <= lr))
    fail("{}.min_lr: got {}, expected a value in [0, model.optim.lr = {}]\nhint: min_lr is the floor of the decay",
         kKey, c.min_lr, lr);

  const bool uses_warmup = s.kind != ScheduleKind::none;
  const bool uses_constant = s.kind == ScheduleKind::cosine_annealing;
  const bool uses_hold = s.kind == ScheduleKind::warmup_hold_policy;
  const bool uses_wsd = s.kind == ScheduleKind::wsd;
  if (!uses_warmup) {
    refuse_unused(c.warmup_steps.has_value(), "warmup_steps", c.name);
    refuse_unused(c.warmup_ratio.has_value(), "warmup_ratio", c.name);
  }
  if (!uses_constant) {
    refuse_unused(c.constant_steps.has_value(), "constant_steps", c.name);
    refuse_unused(c.constant_ratio.has_value(), "constant_ratio", c.name);
  }
  if (!uses_hold) {
    refuse_unused(c.hold_steps.has_value(), "hold_steps", c.name);
    refuse_unused(c.hold_ratio.has_value(), "hold_ratio", c.name);
  }
  if (!uses_wsd) refuse_unused(c.wsd_decay_steps.has_value(), "wsd_decay_steps", c.name);

  s.warmup_steps = steps_or_ratio(c.warmup_steps, c.warmup_ratio, s.max_steps, "warmup_steps", "warmup_ratio");
  s.constant_steps =
      steps_or_ratio(c.constant_steps, c.constant_ratio, s.max_steps, "constant_steps", "constant_ratio");
  const int64_t hold = steps_or_ratio(c.hold_steps, c.hold_ratio, s.max_steps, "hold_steps", "hold_ratio");
  // WarmupHoldPolicy stores hold_steps + warmup_steps, or 0 when no hold was given.
  s.hold_steps = (c.hold_steps || c.hold_ratio) ? hold + s.warmup_steps : 0;

  switch (s.kind) {
    case ScheduleKind::none: break;
    case ScheduleKind::warmup_policy:
    case ScheduleKind::warmup_hold_policy:
      if (s.warmup_steps + hold > s.max_steps)
        fail("{}.warmup_steps: {} + hold_steps {} exceed max_steps {}, expected them to fit\n"
             "hint: shorten the warmup or raise trainer.max_steps",
             kKey, s.warmup_steps, hold, s.max_steps);
      break;
    case ScheduleKind::warmup_annealing:
    case ScheduleKind::cosine_annealing:
      s.decay_steps = s.max_steps - (s.constant_steps + s.warmup_steps);
      if (s.decay_steps < 1)
        fail("{}.warmup_steps: {} + constant_steps {} leave {} decay steps of max_steps {}, expected at least 1\n"
             "hint: shorten the warmup or the constant phase, or raise trainer.max_steps",
             kKey, s.warmup_steps, s.constant_steps, s.decay_steps, s.max_steps);
      if (s.constant_steps > 0 && !(lr > c.min_lr))
        fail("{}.min_lr: got {} with constant_steps > 0, expected less than model.optim.lr ({})\n"
             "hint: NeMo asserts max_lr > min_lr on this path",
             kKey, c.min_lr, lr);
      break;
    case ScheduleKind::wsd:
      s.wsd_style = parse_wsd_style(c.wsd_decay_style);
      if (!c.wsd_decay_steps)
        fail("{}.wsd_decay_steps is not set, expected the length of the final decay for WSD\n"
             "hint: e.g. model.optim.sched.wsd_decay_steps=<10-20% of max_steps>",
             kKey);
      s.wsd_decay_steps = *c.wsd_decay_steps;
      if (s.warmup_steps >= s.max_steps)
        fail("{}.warmup_steps: got {}, expected fewer than max_steps ({}) (Megatron asserts warmup < decay steps)",
             kKey, s.warmup_steps, s.max_steps);
      if (s.wsd_decay_steps < 1 || s.wsd_decay_steps > s.max_steps - s.warmup_steps)
        fail("{}.wsd_decay_steps: got {}, expected a value in [1, max_steps - warmup_steps = {}]", kKey,
             s.wsd_decay_steps, s.max_steps - s.warmup_steps);
      break;
  }
  return s;
}

}  // namespace llamatrain::train
