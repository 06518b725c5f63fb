// Pipeline parallelism: the schedule of one stage (Megatron's non-interleaved 1F1B, and forward-only
// for evaluation) as a pure function, and a runner that executes it over the pipeline communicator
// with the stage's compute as callbacks. Stage s of P holds a contiguous part of the layers; a
// micro-batch's activation (activation_floats elements) goes from stage s to s + 1, its gradient (the
// same size) from s + 1 back to s. Not here: the interleaved (virtual-stage) schedule, measuring time,
// the loss scaling and gradient reduction around a step.
//
// 1F1B on stage s with M micro-batches: warmup = min(P - s - 1, M) forwards, then M - warmup steady
// pairs (forward of micro m + warmup, backward of micro m), then warmup cooldown backwards.
// P 4, M 6:   stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5
//             stage 3:          F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5
// The backward of micro m reaches stage s only after it has gone through the P - s - 1 stages
// after s and back, which is what the warmup forwards fill; from then on each stage alternates one
// forward and one backward, so it never holds more than warmup + 1 = P - s micro-batches whose
// backward is still to come (and never more than M): pipeline_slots(). Activations are stored per
// slot; micro m uses slot m % slots, which is free again because micro m - slots was backwarded
// before micro m's forward. GPipe (all forwards, then all backwards) would hold all M.
//
// Buffer lifetimes in the runner (one stage; k = slot of micro m):
//  * `input` of forward(m) is a runner-owned buffer of slot k, valid until backward(m) returns
//    (forward-only: until forward(m) returns); the receive of micro m + slots into it is posted then.
//  * `output(k)` is sent as it is: the send is waited before the next forward into slot k (of micro
//    m + slots), so the stage must leave output(k) untouched until then.
//  * `doutput` of backward(m) is a runner-owned buffer of slot k, valid until backward(m) returns.
//  * `input_grad()` is sent as it is: the send is waited before the next backward of this stage, so
//    the stage may overwrite it there.
// Every request is waited before the runner returns. Why neither MPI's nor LocalCommunicator's send
// semantics can deadlock it: pipeline.cpp.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace llamatrain::parallel {

enum class PipelineOp { forward, backward };

struct PipelineAction {
  PipelineOp op;
  int micro;  // micro-batch index, 0 .. M-1
  int slot;   // activation slot, micro % pipeline_slots(...)
  bool operator==(const PipelineAction&) const = default;
};

// Micro-batches stage `stage` of `stages` holds at once under 1F1B: min(stages - stage, micro_batches).
int pipeline_slots(int stages, int stage, int micro_batches);
// The actions of stage `stage` in order: 1F1B (each micro forwarded, later backwarded, once), and
// forward-only (micro 0 .. M-1, slot m % pipeline_slots).
std::vector<PipelineAction> schedule_1f1b(int stages, int stage, int micro_batches);
std::vector<PipelineAction> schedule_forward_only(int stages, int stage, int micro_batches);
// "F0 F1 B0 ...": how tests and messages print a schedule.
std::string schedule_string(const std::vector<PipelineAction>& actions);

// One stage's compute. Pointers are (activation_floats) f32.
struct PipelineStage {
  // Forward of micro `micro` into slot `slot`; input is the previous stage's output, null on stage 0.
  std::function<void(int micro, int slot, const float* input)> forward;
  // The activation to send on after forward into `slot`; not called on the last stage.
  std::function<const float*(int slot)> output;
  // Backward of the micro in `slot`; doutput is the next stage's input gradient, null on the last
  // stage (which starts from its own loss). Not called by run_forward_only.
  std::function<void(int micro, int slot, const float* doutput)> backward;
  // The gradient of this stage's input after backward; not called on stage 0.
  std::function<const float*()> input_grad;
};

// Runs this rank's 1F1B schedule: pp.rank() is the stage, pp.size() the number of stages. Every
// stage calls it with the same micro_batches and activation_floats. Allocates 2 * slots receive
// buffers of activation_floats per call.
void run_1f1b(Communicator& pp, int micro_batches, size_t activation_floats, const PipelineStage& stage);
// Evaluation: forwards only (stage.backward and stage.input_grad are not called).
void run_forward_only(Communicator& pp, int micro_batches, size_t activation_floats, const PipelineStage& stage);

}  // namespace llamatrain::parallel
