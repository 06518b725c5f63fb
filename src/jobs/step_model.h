// A predicted training step: how long one optimizer step of a Llama model takes on a machine, from the
// step's work (every matmul shape of every rank, attention, the elementwise traffic, the optimizer,
// the tensor-, pipeline- and data-parallel communication) and the machine's rates. The rates are this
// CPU's, measured by short probes (jobs/job_plan.h), or a named accelerator's published peaks with an
// efficiency calibrated on published training results (accelerators(); docs/performance.md).
// Nothing here runs a kernel: the figures are arithmetic on the shapes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/modes.h"

namespace llamatrain::train {

// The job as the step model sees it: the whole model and its layout.
struct StepWork {
  model::LlamaConfig model;
  int dp = 1, tp = 1, pp = 1;
  int ranks_per_node = 1;
  int B = 1, T = 1;           // micro batch x sequence length
  int64_t micro_batches = 1;  // per data-parallel rank per step
  std::vector<int> split;     // layers per pipeline stage (pp entries)
  model::Precision precision = model::Precision::fp32;
  model::Recompute recompute = model::Recompute::none;
  int recompute_layers = -1;  // -1: all
  bool zero1 = false;
  bool sequence_parallel = false;  // norms and residuals on 1/tp of the tokens
  int64_t params_per_rank = 0;     // the busiest stage's rank's parameters (LlamaModel::num_params)
  // The data's shape (1 for sequences of one document and no padding; packed or padded fine-tuning
  // samples have less): the inputs that are text, of B x T; the attention the kernel computes (document
  // masks skip the pairs across documents, the padding included); the attention among the text's own
  // documents (throughput's convention). The last two over one causal sequence's T^2 / 2 pairs a sample.
  double text_fraction = 1.0;
  double attention_fraction = 1.0;
  double text_attention_fraction = 1.0;
};

// What the prediction needs of the hardware, per rank.
struct MachineRates {
  std::string name;
  // Seconds of one (M x K) @ (K x N) matmul on one rank.
  std::function<double(int64_t M, int64_t N, int64_t K)> matmul_seconds;
  double attention_flops_per_s = 0;   // the attention kernel's rate on one rank
  double memory_bytes_per_s = 0;      // elementwise kernels' and the optimizer's traffic on one rank
  double kernel_call_s = 0;           // the fixed cost of one elementwise kernel call
  double activation_bytes = 2;        // bytes per activation value the tensor-parallel all-reduces carry
  double intra_node_bytes_per_s = 0;  // all-reduce bus bandwidth between ranks of a node
  double inter_node_bytes_per_s = 0;  // network bandwidth of a node, shared by its ranks
  int64_t memory_per_rank = -1;       // bytes; -1 unknown
};

struct StepPrediction {
  double flops = 0;     // model FLOPs of the step (obs::step_flops_of the global batch's text)
  double matmul_s = 0;  // the busiest stage's, per step (recompute included)
  double attention_s = 0;
  double elementwise_s = 0;      // their memory traffic and the fixed cost of each call
  double tensor_parallel_s = 0;  // all-reduces of activations inside the layers
  double pipeline_s = 0;         // the 1F1B fill and drain (bubble) plus the stage boundaries' transfers
  double data_parallel_s = 0;    // the gradient all-reduce (or ZeRO-1's reduce-scatter + all-gather)
  double optimizer_s = 0;
  double step_s = 0;                       // the sum: nothing assumed to overlap
  double tokens_per_s = 0, seq_per_s = 0;  // tokens of text (padding not counted)
  double text_fraction = 1.0;              // StepWork's: the inputs that are text
};

StepPrediction predict_step(const StepWork& work, const MachineRates& machine);

// A named accelerator: published peaks and links, and the efficiency (achieved model FLOPs over
// peak on large Llama training) that calibrates the prediction, with where it comes from.
struct Accelerator {
  std::string name;  // what --hardware takes: "H100", "trn1.32xlarge", ...
  std::string description;
  double bf16_flops = 0;  // dense peak per rank (one GPU, one NeuronCore)
  double fp32_flops = 0;
  int64_t memory_bytes = 0;  // per rank
  double memory_bytes_per_s = 0;
  int ranks_per_node = 1;  // GPUs or NeuronCores of one node
  double intra_node_bytes_per_s = 0;
  double inter_node_bytes_per_s = 0;  // per node
  double efficiency = 0;
  std::string calibration;
  bool gpu = false;  // an NVIDIA GPU: plan runs the job there on the CUDA backend
};

const std::vector<Accelerator>& accelerators();
// The accelerator of that name (case-insensitive); nullptr when there is none.
const Accelerator* find_accelerator(const std::string& name);
// "H100, H200, A100, trn1.32xlarge"
std::string accelerator_names();
// The rates of one rank of that accelerator, running at its calibrated efficiency.
MachineRates machine_rates(const Accelerator& a, model::Precision p);

}  // namespace llamatrain::train
