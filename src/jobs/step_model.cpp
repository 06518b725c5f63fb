// The step model (jobs/step_model.h). Per micro-batch on the busiest pipeline stage: every matmul of
// its layers (forward, input gradient, weight gradient; the recomputed forward again) at the rank's
// tensor-parallel shapes, attention at the kernel's rate, the elementwise kernels' traffic, and the
// tensor-parallel all-reduces; 1F1B then runs micro_batches + pp - 1 of those slots. After the
// micro-batches: the data-parallel gradient reduction and AdamW over the rank's parameters.
#include "jobs/step_model.h"

#include <algorithm>
#include <cctype>

#include "obs/throughput.h"

namespace llamatrain::train {

namespace {

// A ring all-reduce moves 2 (n - 1) / n of the buffer through each rank's link.
double all_reduce_s(double bytes, int n, double bytes_per_s) {
  return n <= 1 || bytes_per_s <= 0 ? 0.0 : 2.0 * (n - 1) / n * bytes / bytes_per_s;
}

// Elementwise traffic of one layer per token, in floats, forward and backward: two RMSNorms, RoPE on
// q and k, the residual adds, SwiGLU, and attention's own reads of q, k, v and its output; the
// backward pass moves about twice the forward's.
double layer_floats_per_token(const model::LlamaConfig& c, int tp, bool sequence_parallel) {
  const double C = double(c.dim) / (sequence_parallel ? tp : 1), F = double(c.ffn_dim) / tp,
               QKV = double(c.qkv_dim()) / tp;
  const double HD = double(c.n_heads) * c.head_dim() / tp;
  const double forward = 4 * C /*norms*/ + 2 * QKV /*rope*/ + 4 * C /*residuals*/ + 3 * 2 * F /*swiglu*/ + QKV +
                         HD /*attention in and out*/;
  return 3 * forward;
}

// Elementwise kernel calls of a layer per micro-batch, forward and backward (norms, RoPE, attention,
// residuals, SwiGLU and their gradients, conversions), of the lm head and loss, and per step (the
// gradient norm, clipping, AdamW, zeroing).
constexpr int kLayerKernelCalls = 24, kHeadKernelCalls = 6, kStepKernelCalls = 4;

}  // namespace

StepPrediction predict_step(const StepWork& w, const MachineRates& m) {
  const model::LlamaConfig& c = w.model;
  StepPrediction p;
  const int64_t N = int64_t(w.B) * w.T;  // tokens per micro-batch
  const int t = std::max(1, w.tp);
  const double C = c.dim, F = c.ffn_dim, QKV = c.qkv_dim(), HD = double(c.n_heads) * c.head_dim();
  auto three_matmuls = [&](double out, double in) {  // forward, input gradient, weight gradient
    return m.matmul_seconds(N, int64_t(out), int64_t(in)) + m.matmul_seconds(N, int64_t(in), int64_t(out)) +
           m.matmul_seconds(int64_t(out), int64_t(in), N);
  };
  auto forward_matmul = [&](double out, double in) { return m.matmul_seconds(N, int64_t(out), int64_t(in)); };
  const double layer_matmuls =
      three_matmuls(QKV / t, C) + three_matmuls(C, HD / t) + three_matmuls(2 * F / t, C) + three_matmuls(C, F / t);
  const double layer_recompute =
      forward_matmul(QKV / t, C) + forward_matmul(C, HD / t) + forward_matmul(2 * F / t, C) + forward_matmul(C, F / t);
  const double layer_attention_flops =
      3.0 * 2.0 * double(w.B) * (double(c.n_heads) / t) * double(w.T) * w.T * c.head_dim() * w.attention_fraction;
  const double act_bytes = w.precision == model::Precision::fp32 ? 4 : m.activation_bytes;
  const double layer_tp_bytes = 4 * double(N) * C * act_bytes;  // 2 all-reduces forward, 2 backward
  const std::vector<int> split = w.split.empty() ? std::vector<int>{c.n_layers} : w.split;

  // The busiest stage, per micro-batch.
  int layer0 = 0;
  double busiest = -1;
  for (size_t s = 0; s < split.size(); s++) {
    const bool last = s + 1 == split.size();
    double matmul = 0, attention = 0, elementwise = 0, tp_s = 0;
    for (int l = layer0; l < layer0 + split[s]; l++) {
      const bool recomputed =
          w.recompute == model::Recompute::full && (w.recompute_layers < 0 || l < w.recompute_layers);
      const bool selective = w.recompute == model::Recompute::selective;
      matmul += layer_matmuls + (recomputed ? layer_recompute : 0);
      attention += layer_attention_flops * (recomputed || selective ? 4.0 / 3.0 : 1.0) / m.attention_flops_per_s;
      elementwise += layer_floats_per_token(c, t, w.sequence_parallel) * 4 * double(N) *
                         (recomputed ? 4.0 / 3.0 : 1.0) / m.memory_bytes_per_s +
                     kLayerKernelCalls * (recomputed ? 4.0 / 3.0 : 1.0) * m.kernel_call_s;
      tp_s += all_reduce_s(layer_tp_bytes * (recomputed ? 1.5 : 1.0), t, m.intra_node_bytes_per_s);
    }
    if (last) {
      matmul += three_matmuls(double(c.vocab_size) / t, C);
      elementwise += 3.0 * double(c.vocab_size) / t * 4 * double(N) / m.memory_bytes_per_s +  // softmax, its gradient
                     kHeadKernelCalls * m.kernel_call_s;
    }
    const double total = matmul + attention + elementwise + tp_s;
    if (total > busiest) {
      busiest = total;
      p.matmul_s = matmul;
      p.attention_s = attention;
      p.elementwise_s = elementwise;
      p.tensor_parallel_s = tp_s;
    }
    layer0 += split[s];
  }
  const double mb = double(w.micro_batches);
  p.matmul_s *= mb;
  p.attention_s *= mb;
  p.elementwise_s *= mb;
  p.tensor_parallel_s *= mb;
  const int pp = int(split.size());
  // Stage boundaries cross nodes when a pipeline stage's ranks fill nodes of their own.
  const int stage_ranks = t * std::max(1, w.dp);
  const double boundary_bw = stage_ranks >= w.ranks_per_node && w.ranks_per_node > 0
                                 ? m.inter_node_bytes_per_s / std::max(1, w.ranks_per_node)
                                 : m.intra_node_bytes_per_s;
  if (pp > 1) p.pipeline_s = (pp - 1) * busiest + (boundary_bw > 0 ? mb * 2 * double(N) * C * 4 / boundary_bw : 0);

  // Data parallelism: the gradients of this rank's parameters (fp32), over the DP group, whose ranks
  // are tp apart: inside one node while dp x tp ranks fit one.
  const double params = double(w.params_per_rank);
  const int dp = std::max(1, w.dp);
  const bool dp_inside_node = int64_t(dp) * t <= w.ranks_per_node;
  const double dp_bw =
      dp_inside_node ? m.intra_node_bytes_per_s : m.inter_node_bytes_per_s / std::max(1, w.ranks_per_node);
  p.data_parallel_s = all_reduce_s(params * 4, dp, dp_bw);
  // AdamW reads weights, gradient and both moments and writes three of them (bf16 copies aside).
  const double adam_bytes = w.precision == model::Precision::bf16_sr ? 18
                            : w.precision == model::Precision::fp32  ? 28
                                                                     : 30;
  p.optimizer_s = params / (w.zero1 ? dp : 1) * adam_bytes / m.memory_bytes_per_s + kStepKernelCalls * m.kernel_call_s;

  p.step_s = p.matmul_s + p.attention_s + p.elementwise_s + p.tensor_parallel_s + p.pipeline_s + p.data_parallel_s +
             p.optimizer_s;
  const double sequences = double(w.B) * mb * dp;
  p.text_fraction = w.text_fraction;
  p.flops = w.text_fraction == 1.0 && w.text_attention_fraction == 1.0
                ? obs::step_flops(c, int64_t(sequences), w.T)
                : obs::step_flops_of(c, sequences * w.T * w.text_fraction,
                                     sequences * double(w.T) * w.T / 2 * w.text_attention_fraction);
  p.seq_per_s = p.step_s > 0 ? sequences / p.step_s : 0;
  p.tokens_per_s = p.seq_per_s * w.T * w.text_fraction;
  return p;
}

// The fraction of an accelerator's memory bandwidth its elementwise kernels reach (assumed).
constexpr double kMemoryEfficiency = 0.6;

const std::vector<Accelerator>& accelerators() {
  // Published peaks (dense, no sparsity) and links; efficiency: docs/performance.md, "Predicted step
  // times", has the fits and the published results behind them.
  static const std::vector<Accelerator> table = {
      // GPU memory as nvidia-smi and cudaMemGetInfo report it (81559 MiB for an H100 80 GB, 143771 MiB for
      // an H200 141 GB, measured on the test machine; 81920 MiB for an A100 80 GB).
      {"H100", "NVIDIA H100 SXM 80 GB (8 per node, NVLink 4, 8 x 400 Gb/s InfiniBand)", 989e12, 67e12,
       int64_t(81559) << 20, 3.35e12, 8, 450e9, 400e9, 0.52,
       "assumed the A100's (no published bf16 Llama 2 result; NeMo's FP8 results bound it from above)", true},
      {"H200", "NVIDIA H200 SXM 141 GB (8 per node, NVLink 4, 8 x 400 Gb/s InfiniBand)", 989e12, 67e12,
       int64_t(143771) << 20, 4.8e12, 8, 450e9, 400e9, 0.52, "as H100 (the same compute; more and faster memory)",
       true},
      {"A100", "NVIDIA A100 SXM 80 GB (8 per node, NVLink 3, 8 x 200 Gb/s InfiniBand)", 312e12, 19.5e12,
       int64_t(81920) << 20, 2.0e12, 8, 300e9, 200e9, 0.52,
       "Llama 2's published A100-80GB GPU hours for 2T tokens: 7B 184,320 (3,014 tokens/s per GPU)", true},
      {"trn1.32xlarge", "AWS Trn1: 16 Trainium chips, 32 NeuronCores (ranks) with 16 GB each, 800 Gb/s EFA",
       3.04e15 / 32, 0.76e15 / 32, 16'000'000'000, 0.82e12 / 2, 32, 768e9 / 16, 100e9, 0.44,
       "the seeds' Llama-2-7B at seq 4096, TP 8, DP 4: 3.7 seq/s on one instance"},
  };
  return table;
}

const Accelerator* find_accelerator(const std::string& name) {
  auto lower = [](std::string s) {
    for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  };
  for (const Accelerator& a : accelerators())
    if (lower(a.name) == lower(name)) return &a;
  return nullptr;
}

std::string accelerator_names() {
  std::string names;
  for (const Accelerator& a : accelerators()) names += (names.empty() ? "" : ", ") + a.name;
  return names;
}

MachineRates machine_rates(const Accelerator& a, model::Precision p) {
  MachineRates m;
  m.name = a.name;
  const double rate = (p == model::Precision::fp32 ? a.fp32_flops : a.bf16_flops) * a.efficiency;
  m.matmul_seconds = [rate](int64_t M, int64_t N, int64_t K) { return 2.0 * double(M) * double(N) * double(K) / rate; };
  m.attention_flops_per_s = rate;
  m.memory_bytes_per_s = a.memory_bytes_per_s * kMemoryEfficiency;
  m.intra_node_bytes_per_s = a.intra_node_bytes_per_s;
  m.inter_node_bytes_per_s = a.inter_node_bytes_per_s;
  m.memory_per_rank = a.memory_bytes;
  return m;
}

}  // namespace llamatrain::train
