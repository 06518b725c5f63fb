// The model's modes, as users name them: the precision (what weights, compute and optimizer state are
// held in) and activation recomputation (what the forward keeps for the backward). Parsed once here;
// the compute type each precision means to the kernels is model/machine.h's compute_type.
#pragma once

#include <string>

namespace llamatrain::model {

enum class Precision {
  fp32,        // fp32 weights, compute, optimizer state
  bf16_mixed,  // bf16 matmul operands, fp32 master weights and Adam states
  bf16_sr,     // bf16 weights and Adam states, every update rounded stochastically
};
Precision parse_precision(const std::string& name);  // "fp32" | "bf16-mixed" | "bf16-sr"; throws Error
const char* precision_name(Precision p);

// Activation recomputation (NeMo's activations_checkpoint_granularity): what the forward keeps for
// the backward, and what the backward recomputes layer by layer from what was kept.
//   none:      every activation is saved.
//   selective: the core attention (output and lse) and the norm / SwiGLU outputs that feed matmuls
//              are recomputed (no matmul runs twice): Megatron's "selective" idea, for this model.
//   full:      only each layer's input (the residual stream) is saved; the backward reruns the
//              layer's forward (all but its last matmul) before its backward.
// Recomputation runs the same kernels on the same inputs, so gradients are bitwise those of none.
// It applies to the first `recompute_layers` layers (all by default; Megatron's "block" method
// recomputes only the first few and keeps the rest).
enum class Recompute { none, selective, full };
Recompute parse_recompute(const std::string& name);  // "none" | "selective" | "full"; throws Error
const char* recompute_name(Recompute r);

}  // namespace llamatrain::model
