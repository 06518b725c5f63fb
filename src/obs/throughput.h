// Training throughput figures for a Llama config: FLOPs of one training step, MFU against a given
// peak, tokens/s, and an ETA smoothed over recent step times. The FLOP count is the model's matmul
// work (what MFU conventionally counts); elementwise ops, norms and the optimizer are left out.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "model/config.h"

namespace llamatrain::obs {

// FLOPs of one training step (forward + backward) on B sequences of T tokens:
// 6 * tokens * (matmul weights: q, k, v, o, gate, up, down in every layer, and the lm head, tied or
// not) + causal attention, QK^T and PV over the lower triangle, 2 * B*H*T*T*D forward per layer and
// three times that for forward + backward.
double step_flops(const model::LlamaConfig& c, int64_t B, int64_t T);

// step_flops of a step whose samples are partly padding or packed documents: the matmul work of the
// `real_tokens` text inputs and the attention of `attention_pairs` (query, key) pairs (causal within
// each document; step_flops counts T*T/2 per sequence), the same convention, so a packed or padded
// run compares honestly with one of full sequences.
double step_flops_of(const model::LlamaConfig& c, double real_tokens, double attention_pairs);

// The part of step_flops a pipeline stage computes: its layers' matmuls and attention, and the lm head
// on the last stage (the embedding lookup is no matmul). The stages of a split sum to step_flops.
double stage_flops(const model::LlamaConfig& c, int64_t B, int64_t T, int layers, bool lm_head);

// Pipeline balance: the layers of each stage that make the busiest stage's stage_flops at sequence
// length T smallest, among the splits model::pipeline_split can make (sizes of the first and last
// stage, the others even); the even split when it exists and nothing is better. 1 <= stages <= layers.
std::vector<int> balanced_pipeline_split(const model::LlamaConfig& c, int pipeline_stages, int64_t T);

// Model FLOPs utilization: achieved FLOP/s over the peak FLOP/s (a fraction, not a percentage).
double mfu(double flops_per_step, double step_seconds, double peak_flops_per_s);

// Tokens per second; 0 when seconds is not positive.
double tokens_per_s(int64_t tokens, double seconds);

// Mean of the last `window` step times, for a step time and ETA that follow the run's current speed
// (after warmup, a data-loader stall or a slower phase) without jumping on every step.
class StepTimeAverage {
 public:
  explicit StepTimeAverage(int window = 50);
  // Step time in seconds; non-finite or negative values are ignored.
  void add(double step_seconds);
  // Mean of the recent step times; NaN before the first one.
  double mean_step_s() const;
  // steps_left * mean_step_s(); NaN before the first step, 0 when nothing is left.
  double eta_s(int64_t steps_left) const;
  int64_t count() const { return count_; }

 private:
  int window_;
  std::deque<double> recent_;  // (<= window) the latest step times, oldest first
  int64_t count_ = 0;
};

}  // namespace llamatrain::obs
