// What one rank of a training job holds, in bytes, before it starts: the one estimate that train,
// bench and plan check against the device's memory. The model's state (weights, gradients, AdamW
// moments, the bf16 matmul copy; LlamaModel::state_bytes) plus its activations (saved activations and
// backward scratch, LlamaModel::activation_bytes, and the fused lm head's scratch) plus, on a GPU, the
// runtime's own memory. What the backend keeps besides the arenas is the backend's answer
// (BackendSizing). On the CPU, in bf16 compute, the operand form (bf16, or bf16 values in floats
// where the fp32 kernel is the faster) changes both; it is chosen per shape by a probe that runs
// matmuls, so an estimate probes only when the form decides whether the job fits.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/backend.h"
#include "model/modes.h"
#include "model/shard.h"

namespace llamatrain::model {

// A backend's own answers for sizing a job before any model exists (plan, preflight, bench), on
// machines that may lack its device: each backend gives them (model/backend_cpu.cpp, backend_ref.cpp,
// backend_cuda.cpp), and nothing here assumes one backend's policy for another.
struct BackendSizing {
  // bf16 modes: whether matmul operands are kept as floats holding bf16 values for the (M, N, K)
  // gemm of a layer's widest matmul. probe = false answers without running gemms: the choice when
  // known (forced or cached), else true (the form that needs more memory).
  bool (*float_operands)(int M, int N, int K, bool probe);
  // The fused lm head + cross-entropy's scratch for N tokens.
  int64_t (*lmhead_scratch_bytes)(int N, int C, int V, Precision p, bool float_operands);
  // The device runtime's own memory for micro-batches of B x T on a rank of these local sizes (a GPU's
  // context, library workspace, kernel scratch, allocator rounding); 0 on the host, whose process
  // memory plan measures instead.
  int64_t (*runtime_bytes)(const LocalDims& d, int B, int T, Precision p);
};
const BackendSizing& backend_sizing(Device d);

// The job as memory sees it: one micro-batch of B sequences of T tokens on one rank.
struct TrainingShape {
  Precision precision = Precision::fp32;
  int B = 1, T = 1;
  Recompute recompute = Recompute::none;
  int recompute_layers = -1;    // -1: all layers (see LlamaModel::set_recompute)
  int slots = 1;                // micro-batches in flight on a pipeline stage
  int optimizer_shards = 1;     // ZeRO-1: the data-parallel ranks sharing the AdamW moments
  Device device = Device::cpu;  // whose memory holds it all, and whose kernels' policy sizes it
};

struct MemoryPlan {
  int64_t state = 0;            // weights, gradients, optimizer state (+ the bf16 copy): their sum
  int64_t weights = 0;          // fp32 weights and the bf16 copy (matmul operands, or bf16-sr's weights)
  int64_t gradients = 0;        // fp32 gradients
  int64_t optimizer = 0;        // AdamW's two moments (this rank's ZeRO-1 shard)
  int64_t activations = 0;      // saved activations, backward scratch, lm head scratch
  int64_t runtime = 0;          // the device runtime's own memory (a GPU's; 0 on the host)
  bool float_operands = false;  // the bf16 modes' operand form the figures assume
  int64_t total() const { return state + activations + runtime; }

  // The figures for a given operand form.
  static MemoryPlan of(const LlamaConfig& c, const ShardPlan& plan, const TrainingShape& s, bool float_operands);
  // The figures a memory check of `avail` bytes (< 0: unknown) should use: the form already known
  // (forced or cached), else the larger figure; the form is probed only when it decides whether the
  // job fits. With avail < 0 nothing is probed.
  static MemoryPlan for_check(const LlamaConfig& c, const ShardPlan& plan, const TrainingShape& s, int64_t avail);
};

}  // namespace llamatrain::model
