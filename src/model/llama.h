// The Llama model: parameters, gradients and optimizer state in flat arenas, activations for one
// micro-batch shape, and the hand-written forward / backward (mirror images, one kernel call per
// line) plus AdamW. Weights are in Hugging Face layout ([out, in] rows, rotate_half RoPE), with q/k/v
// packed as row blocks of one (QKV, C) matrix per layer and gate/up as row blocks of one (2F, C)
// matrix, so HF tensors map to contiguous slices (io/hf_checkpoint.cpp) and TP can later split heads
// and FFN rows per rank without touching the passes. A model may be one rank's part of a
// model-parallel layout (model/shard.h): its heads, FFN rows and vocabulary under tensor parallelism
// (the TP communicator's pairs, parallel/comm_pairs.h, at the points Megatron puts them), its
// layers under pipeline parallelism (stage_forward / stage_backward; the schedule lives in
// parallel/pipeline.h). MPI itself never appears here. Every kernel runs through the model's backend
// (model/backend.h), chosen once by its Device, which also owns the arenas. The class is defined over
// four files: the passes (passes.cpp, read first), the state and optimizer (llama.cpp), where
// activations live (memory.cpp) and decoding (decode.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/bf16.h"
#include "model/config.h"
#include "model/backend.h"
#include "model/modes.h"
#include "model/shard.h"

namespace llamatrain::parallel {
class Communicator;
}

namespace llamatrain::model {

// One parameter tensor of the arena (all layers stacked in one tensor, llm.c style).
struct ParamSpec {
  std::string name;            // "wqkv", "attn_norm", ...
  std::vector<int64_t> shape;  // e.g. {L, QKV, C}
  int64_t offset = 0;          // into the arena, in elements
  int64_t numel = 0;           // the local tensor's elements (the embedding's and lm head's padding rows too)
  // AdamW weight decay: false for norm weights and biases (Megatron's rule: only weight matrices
  // and embeddings decay).
  bool decay = true;
  // A norm weight (attn_norm, ffn_norm, norm): replicated over TP, its gradient a partial sum over
  // this rank's tokens under sequence parallelism, initialized to ones.
  bool norm = false;
  // Where this (local) tensor sits in the full model's tensor: its first shard.numel() elements. The
  // rest (wte and wout: the vocabulary's padding rows, model/shard.h) are in no full tensor: zero,
  // with gradient zero, never saved.
  TensorShard shard;
  int full_id = 0;  // index among the full model's tensors (init and rounding streams)
  // Counted in the global gradient norm on this rank: false for copies another rank also counts
  // (norm weights on TP ranks > 0, the tied embedding on a last stage that is not the first).
  bool in_norm = true;
  // The elements this rank's copy counts for (gradient norm, checkpoint moments, gathered weights):
  // all of `shard` when in_norm; when not, none, or a part: the q rows of wqkv on a rank whose kv
  // head an earlier TP rank also holds (n_kv_heads < TP). Its own local order packs those elements.
  TensorShard owned;
  // Frozen (LlamaConfig::frozen): no gradient, no AdamW moments, never updated. Frozen tensors come
  // first in the parameter arena, so the trainable ones are one range [num_frozen(), num_params())
  // that the gradient arena, the moments and the ZeRO-1 shards cover.
  bool frozen = false;
  int64_t grad_offset = -1;  // into the gradient arena (offset - num_frozen()); -1 when frozen
  // LlamaConfig::frozen_parts on this rank: element ranges [begin, end) of the local tensor (from
  // offset, or grad_offset) that are never updated, whose gradient is zeroed before the norm, and
  // that have no AdamW moments (the moments skip them: LlamaModel::moment_index).
  std::vector<std::pair<int64_t, int64_t>> frozen_ranges;
  // Of a tensor stacked over layers (shape {L, ...}): whether local layer l's slice lies in the frozen
  // ranges, so that the backward skips its weight gradient (empty for the others).
  std::vector<bool> frozen_layers;
};

// Views into the parameter (or gradient) arena; a frozen tensor's gradient view is nullptr. Shapes: C dim, L layers, H heads, Hkv kv heads,
// D head dim, F ffn dim, V vocab, QKV = (H + 2*Hkv)*D, all local (LocalDims) on a model-parallel
// rank; tensors a pipeline stage does not hold are nullptr.
struct ParameterTensors {
  float* wte;        // (V, C)      token embedding
  float* attn_norm;  // (L, C)      input_layernorm
  float* wqkv;       // (L, QKV, C) rows [0,H*D) q_proj, then k_proj, then v_proj
  float* bqkv;       // (L, QKV)    their biases in the same row order (qkv_bias); else nullptr
  float* wo;         // (L, C, H*D) o_proj
  float* ffn_norm;   // (L, C)      post_attention_layernorm
  float* w13;        // (L, 2F, C)  rows [0,F) gate_proj (w1), rows [F,2F) up_proj (w3)
  float* w2;         // (L, C, F)   down_proj
  float* norm;       // (C)         final norm
  float* wout;       // (V, C)      lm_head; == wte when tied
};

// One activation tensor of every layer: layers [0, first_saved) share one (n) scratch that the
// backward refills by recomputation; layers [first_saved, L) are stacked, stride n apart.
template <typename T>
struct PerLayer {
  T* scratch = nullptr;
  T* base = nullptr;
  int64_t stride = 0;
  int first_saved = 0;
  T* operator[](int l) const { return l < first_saved ? scratch : base + (l - first_saved) * stride; }
};

// Activations of one micro-batch of B sequences of T tokens (N = B*T). The ones that only feed
// matmuls live in MatmulInputs. Under sequence parallelism the residual-stream tensors (marked Nl)
// hold this rank's N/TP tokens; the rest hold all N.
struct ActivationTensors {
  float* x0;                 // (Nl, C)       embedding output, or the previous stage's output
  PerLayer<float> ln1_rstd;  // (L, Nl)
  PerLayer<float> qkv;       // (L, N, QKV)   projections, RoPE applied to q and k
  PerLayer<float> att;       // (L, N, H*D)   attention output, before o_proj
  PerLayer<float> lse;       // (L, B, H, T)  attention log-sum-exp
  PerLayer<float> resid;     // (L, Nl, C)    residual stream after attention
  PerLayer<float> ln2_rstd;  // (L, Nl)
  PerLayer<float> h13;       // (L, N, 2F)    gate | up projections
  PerLayer<float> out;       // (L, Nl, C)    layer outputs (residual stream after the MLP); always saved
  float* lnf;                // (N, C)        final norm output (all tokens: the lm head's input)
  float* lnf_rstd;           // (Nl)
  float* losses;             // (N)           per-token cross-entropy (0 where target < 0)
};

// One operand tensor of every layer, laid out as PerLayer in bytes (the backend's operand form
// decides the element size).
struct OperandLayers {
  PerLayer<std::byte> bytes;
  Operand operator[](int l) const { return {bytes[l]}; }
};

// Tensors whose only use is as a matmul operand, kept in the backend's operand form
// (Kernels::operand_form: fp32 values in fp32 mode; bf16, or what the backend prefers, in the bf16
// modes). Their producers (rmsnorm, SwiGLU) write that form directly, so no conversion pass runs.
struct MatmulInputs {
  OperandLayers ln1;   // (L, N, C)   attn_norm output
  OperandLayers ln2;   // (L, N, C)   ffn_norm output
  OperandLayers hmid;  // (L, N, F)   silu(gate) * up
  Operand dh13;        // (N, 2F)     backward scratch of one layer: gradient of gate | up
};

// What a checkpoint holds: every parameter tensor's weights and AdamW moments, in the dtype the
// precision mode keeps as master (fp32, or bf16 in bf16-sr). Built from param_specs(), the table
// that also sizes the arenas, so a checkpoint and a model that disagree do so by name. The state is
// each tensor's shard: the vocabulary's padding rows are not part of it.
enum class StateDType { f32, bf16 };
struct StateTensor {
  std::string name;   // "weight.wqkv", "exp_avg.wqkv", "exp_avg_sq.wqkv"
  std::string param;  // "wqkv"
  StateDType dtype;
  std::vector<int64_t> shape;  // the parameter's shape without padding rows
  void* data;                  // numel elements of dtype (the backend's memory): elements [first, first + numel)
  int64_t numel;
  int64_t first = 0;  // a ZeRO-1 shard holds part of a tensor's moments; weights are whole
  TensorShard shard;  // where the parameter (local to this rank) sits in the full model's
  // Moments only: the frozen parts (LlamaConfig::frozen_parts) have none. Sorted, disjoint element
  // ranges of the local tensor inside [first, first + numel); data holds the other elements, packed.
  std::vector<std::pair<int64_t, int64_t>> holes;
  int64_t stored() const {  // the elements data holds
    int64_t n = numel;
    for (const auto& [b, e] : holes) n -= e - b;
    return n;
  }
  // fn(element, at, n) for each run of kept elements: elements [element, element + n) of the range
  // (counted from first) are data's [at, at + n).
  template <typename Fn>
  void for_each_kept(Fn fn) const {
    int64_t element = 0, at = 0;
    for (const auto& [b, e] : holes) {
      if (b - first > element) fn(element, at, b - first - element);
      at += b - first - element;
      element = e - first;
    }
    if (numel > element) fn(element, at, numel - element);
  }
};

struct AdamWConfig {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // global L2 norm; <= 0 disables clipping
};

struct StepStats {
  float loss = 0;         // mean cross-entropy over valid targets
  int64_t num_valid = 0;  // targets >= 0
};

// Sequences that hold several documents (packed samples), per token of a micro-batch (B, T), in host
// memory: its RoPE position, and the position in its sequence where its document starts (attention
// stops there: a document sees only itself). nullptr: positions 0..T-1, one document per sequence.
struct Documents {
  const int32_t* positions = nullptr;  // (B, T)
  const int32_t* doc_start = nullptr;  // (B, T), non-decreasing along T, each value t or the previous one
};

class LlamaModel {
 public:
  // config is the full model's; plan (default: all of it) says which part this rank holds, and tp is
  // the tensor-parallel group (required when plan.tp_size > 1; it must outlive the model). With kv
  // heads replicated over TP ranks, construction is collective over tp. device: the backend whose
  // kernels run the model and whose memory holds it (model/backend.h).
  LlamaModel(const LlamaConfig& config, Precision precision, uint64_t seed = 1234);
  LlamaModel(const LlamaConfig& config, Precision precision, uint64_t seed, const ShardPlan& plan,
             parallel::Communicator* tp, Device device = Device::cpu);
  ~LlamaModel();
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  const LlamaConfig& config() const { return config_; }  // the full model's
  const ShardPlan& plan() const { return plan_; }
  const LocalDims& dims() const { return dims_; }
  bool is_sharded() const { return !plan_.is_single(); }
  Precision precision() const { return precision_; }
  Device device() const { return kernels_->device(); }
  void synchronize() { k_.synchronize(); }  // waits for the device's queued work (timing)
  // bf16 modes: whether the matmul operands are kept as floats holding bf16 values (the CPU's fp32
  // kernel was the faster one at the first activations' size, or the reference backend), not as bf16.
  bool float_operands() const {
    return precision_ != Precision::fp32 && kernels_->operand_form() == OperandForm::bf16_in_f32;
  }
  // Whether a model of this plan and precision keeps float operands at N tokens per micro-batch (the
  // kernel choice for its widest matmul, made once per shape and cached: the same answer the model
  // gets at its first forward).
  // probe = false: no probe; the choice when already known (forced or cached), else true (what
  // needs more memory), for estimates that must not run gemms.
  static bool float_operands_at(const LlamaConfig& c, const ShardPlan& plan, Precision p, int64_t N, bool probe = true,
                                Device device = Device::cpu);
  const std::vector<ParamSpec>& param_specs() const { return specs_; }
  const ParamSpec* find_param(std::string_view name) const;  // by ParamSpec::name; nullptr when absent
  int64_t num_params() const { return num_params_; }
  // The trainable part: elements [num_frozen(), num_params()) of the parameter arena, which the
  // gradient arena (grad_data()), the moments and the optimizer shard index from 0.
  int64_t num_frozen() const { return num_frozen_; }
  int64_t num_trainable() const { return num_params_ - num_frozen_; }
  // The backend that runs the model and holds its arenas: host access to them in bounded pieces on
  // any device (Kernels::read_elements / write_elements, get / set).
  Kernels& backend() const { return k_; }
  // The arenas in the backend's memory (device memory on a GPU: read and written through backend()).
  float* param_arena() { return param_arena_.data(); }  // (num_params) fp32 compute weights
  const float* param_arena() const { return param_arena_.data(); }
  float* grad_arena();  // (num_trainable, or the ZeRO-1 padded size)
  // The arenas as host pointers, for code that runs on host-memory backends only (the cpu and ref
  // devices; on a device of its own memory, an Error naming `what` needed them).
  // (num_trainable)
  float* trainable_param_data() { return host(param_arena_.data(), "the weights") + num_frozen_; }
  ParameterTensors params() { return params_; }
  // Gradients and AdamW state are allocated (zeroed) on first use: here, zero_grad, forward_backward
  // or optimizer_step. A model used only for inference (generate) holds just its weights.
  ParameterTensors grads();
  float* param_data() { return host(param_arena_.data(), "the weights"); }  // (num_params) fp32 compute copy
  // Copies between host memory and the arenas on any device: the weights (num_params floats; from the
  // host, then params_changed) and the gradients (num_trainable floats).
  void copy_params_to_host(float* out) const;
  void copy_params_from_host(const float* in);
  void copy_grads_to_host(float* out);
  float* grad_data();  // (num_trainable)

  // Normal(0, std) matrices and embeddings, ones for norms (counter-based RNG: layout independent).
  // output_std (if > 0) replaces std for the layers' output projections wo and w2 (Megatron's scaled
  // init: std / sqrt(2 L)).
  void init_random(float std = 0.02f, float output_std = 0.0f);
  // After writing param_data() directly (checkpoint load), re-derive the bf16 copy (bf16 modes) and,
  // in bf16-sr, round the fp32 compute copy to bf16 so both agree.
  void params_changed();

  // Sizes the activation arena for micro-batches of (B, T); cheap when unchanged.
  void ensure_activations(int B, int T);
  // Chooses what the backward recomputes (default none) in the first `layers` layers (-1: all);
  // takes effect at the next forward.
  void set_recompute(Recompute r, int layers = -1);
  Recompute recompute() const { return recompute_; }
  int recompute_layers() const { return recompute_layers_; }  // layers [0, this) recompute
  // tokens, targets: (B, T). Fills activations and per-token losses; returns the mean loss over
  // targets >= 0 (target -100 is ignored). Needs no gradient state.
  // docs: where the sequences hold several documents (packed samples); default one each.
  StepStats forward(const int32_t* tokens, const int32_t* targets, int B, int T, const Documents& docs = {});
  // Forward then backward; gradients are ACCUMULATED into grads (call zero_grad() first).
  // The loss gradient of each valid token is grad_scale / num_valid (grad_scale = 1 for one
  // micro-batch; 1/num_micro_batches when averaging).
  StepStats forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float grad_scale = 1.0f,
                             const Documents& docs = {});
  // Logits (B*T, V) of the last forward's final-norm output into host memory (tests and evaluation
  // only; a single rank's model).
  void logits(float* out);
  // Logits (n, V) of `rows` (indices b*T + t into the last forward's B*T tokens) only, into host
  // memory: what scoring a few positions of long sequences needs (multiple-choice evaluation), in
  // n x V floats instead of B*T x V. Same single-rank rule as logits().
  void logits_rows(float* out, const int64_t* rows, int n);
  // The cross-entropy summed over each sequence of the last loss (forward, or stage_loss on the last
  // stage), in fp64: out (B). Validation splits its figure by the data source of each sequence.
  void sequence_loss_sums(double* out) const;

  // Pipeline stages. A micro-batch's activations live in one of `slots` sets (1F1B keeps up to
  // PP - stage micro-batches in flight); set before a forward, like set_recompute.
  void set_activation_slots(int slots);
  int activation_slots() const { return slots_; }
  // This stage's forward of one micro-batch into slot `slot`: from tokens (B, T) on the first stage,
  // from `input` (Nl, C), the previous stage's output, on the others. Ends at the last layer's output
  // (stage_output) or, on the last stage, at the final norm. docs (every stage gets the same) hold for
  // the slot until its next forward: its backward uses them too.
  void stage_forward(int slot, const int32_t* tokens, const float* input, int B, int T, const Documents& docs = {});
  const float* stage_output(int slot) const;  // (Nl, C)
  // The backward of the micro-batch in `slot`: from the loss on the last stage (targets (B, T); its
  // stats are returned, the loss gradient of each valid token being grad_scale / num_valid), from
  // `doutput` (Nl, C) on the others. Gradients accumulate. On stages after the first, the gradient of
  // the stage's input is left in stage_input_grad() until the next backward.
  StepStats stage_backward(int slot, const int32_t* tokens, const int32_t* targets, const float* doutput,
                           float grad_scale);
  const float* stage_input_grad() const;  // (Nl, C)
  // The last stage's loss of the micro-batch in `slot` without a backward (evaluation).
  StepStats stage_loss(int slot, const int32_t* targets);
  // Tokens per micro-batch on this rank's residual stream: B*T, or B*T / TP under sequence parallelism.
  int64_t stage_tokens(int B, int T) const;
  void zero_grad();

  // Global grad norm (before clipping), then AdamW on every tensor. step is 1-based.
  // Returns the pre-clip grad norm.
  // embedding_lr >= 0: the learning rate of the embedding and the output layer (wte, wout; others
  // take lr), as a separate parameter group would.
  float optimizer_step(const AdamWConfig& opt, float lr, int step, float embedding_lr = -1.0f);
  // The halves of optimizer_step: the frozen parts' gradients zeroed (LlamaConfig::frozen_parts; after
  // every gradient sum, before the norm), the global L2 norm of the gradients, and AdamW given that
  // norm (a caller that skips non-finite steps looks at the norm first), which leaves frozen parts as
  // they are.
  void zero_frozen_grads();
  float grad_norm();
  void optimizer_update(const AdamWConfig& opt, float lr, int step, float grad_norm, float embedding_lr = -1.0f);

  // Data-parallel overlap: the ranges [begin, end) of the gradient arena (trainable tensors only) in the order the backward
  // completes them (the lm head and final norm, then layer by layer from the last, then the
  // embedding), leaving out the ones a model-parallel sum still changes after the backward (norm
  // weights under SP, a tied embedding split over stages). While a hook is set, every backward calls
  // it with each of these ranges as soon as it is complete: set it for a step's last micro-batch only.
  std::vector<std::pair<int64_t, int64_t>> grad_ready_order() const;
  // The same ranges for the rank `plan` describes, without a model (what a plan sizes buckets from).
  static std::vector<std::pair<int64_t, int64_t>> grad_ready_order(const LlamaConfig& c, const ShardPlan& plan);
  void set_grad_ready_hook(std::function<void(int64_t begin, int64_t end)> hook) { grad_ready_ = std::move(hook); }

  // Weights and AdamW moments as a table of named tensors (allocates the training state), their data
  // in the backend's memory (read and written through backend()). With an optimizer shard, the
  // moments are the parts of each tensor inside the shard (tensors outside it are left out).
  std::vector<StateTensor> state_tensors();

  // ZeRO-1: AdamW moments for the flat range [begin, end) of the gradient arena (the trainable part
  // of the parameter arena) only, so that optimizer_update updates that range, and gradient and
  // trainable weight arenas of grad_elements (>= num_trainable(); the padding stays zero) that a reduce-scatter and an all-gather can work on in
  // place. Before the training state's first use and before the weights are set. The default is the
  // whole arena.
  void set_optimizer_shard(int64_t begin, int64_t end, int64_t grad_elements);
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_ < 0 ? num_trainable() : shard_end_; }
  // Sum of squared gradients over [begin, end) of the gradient arena (a shard's part of the global norm),
  // counting only the elements this rank's copies count for (ParamSpec::owned). The vocabulary's
  // padding rows are in the arena, but their gradient is exactly 0: they add nothing.
  double grad_sum_squares(int64_t begin, int64_t end);
  // Model-parallel gradient sums a step needs before the norm: under sequence parallelism the norm
  // weights' partial gradients over TP; with kv heads replicated over TP ranks, their k and v rows'
  // over the replicas; under pipeline parallelism with tied embeddings, the embedding's over the
  // embedding group (first and last stage; null when this rank is on neither).
  void reduce_model_parallel_grads(parallel::Communicator* embedding_group);

  // Bytes: parameters + grads + optimizer state (+ bf16 copy), and activations for (B, T) (saved
  // activations and backward scratch). state_bytes() counts what is allocated now (weights only until
  // the training state's first use); the static one is the full training figure.
  int64_t state_bytes() const;
  // float_operands: the bf16-mixed matmul copy is bf16_in_f32 (float_operands_at), not bf16.
  static int64_t state_bytes(const LlamaConfig& c, Precision p, int optimizer_shards = 1, bool float_operands = false);
  static int64_t state_bytes(const LlamaConfig& c, const ShardPlan& plan, Precision p, int optimizer_shards,
                             bool float_operands = false);
  // The same figure in its parts: fp32 weights with the bf16 copy, fp32 gradients of the trainable
  // tensors, AdamW's moments of those less their frozen parts (with ZeRO-1: the largest shard's).
  struct StateBytes {
    int64_t weights = 0, gradients = 0, optimizer = 0;
    int64_t total() const { return weights + gradients + optimizer; }
  };
  static StateBytes state_parts(const LlamaConfig& c, const ShardPlan& plan, Precision p, int optimizer_shards,
                                bool float_operands = false);
  static int64_t num_params(const LlamaConfig& c, const ShardPlan& plan);     // this rank's part
  static int64_t num_trainable(const LlamaConfig& c, const ShardPlan& plan);  // of it, not frozen
  static int64_t weight_bytes(const LlamaConfig& c, Precision p);             // inference: fp32 (+ bf16) weights
  static int64_t activation_bytes(const LlamaConfig& c, Precision p, int B, int T, Recompute r = Recompute::none,
                                  int recompute_layers = -1, bool float_operands = false);
  // A model-parallel rank's activations, `slots` micro-batches of them. float_operands: the
  // matmul-only activations are bf16_in_f32 (float_operands_at), not bf16.
  static int64_t activation_bytes(const LlamaConfig& c, const ShardPlan& plan, Precision p, int B, int T, Recompute r,
                                  int recompute_layers, int slots, bool float_operands = false);

  // Decode one token per sequence with a KV cache (generate). kv cache is owned by the model;
  // reset_cache(max_T) clears it. Returns logits (V) of the given token at position pos.
  void reset_cache(int max_T);
  void decode_step(float* logits /*(V)*/, int32_t token, int pos);

 private:
  void forward_body(const int32_t* tokens, const float* input, int B, int T);  // embedding .. final norm
  // Layer l's forward; with for_backward, stops after SwiGLU (what the backward reads is then in place).
  void forward_layer(int l, bool for_backward);
  void recompute_layer(int l);  // refills what recompute_ dropped
  void backward(const int32_t* tokens, const int32_t* targets, float dloss, const float* doutput);
  void backward_layers();   // layers L-1 .. 0
  void use_slot(int slot);  // points acts_ and the matmul inputs at slot `slot`
  // Takes docs for slot's micro-batch (validated: Error on positions outside [0, T) or document starts
  // that describe no documents); the current slot's, in the backend's memory:
  void set_documents(int slot, const Documents& docs);
  const int32_t* positions() const;  // (N)
  const int32_t* doc_start() const;  // (N), or nullptr: one document per sequence
  // Token ids (host) where the kernels read them (the host array on host backends).
  const int32_t* device_ids(Buffer<int32_t>& staging, const int32_t* host);
  // The grad_ready_order() ranges completed at one point of the backward: the head (layer -1), layer
  // l, or the embedding (layer L).
  std::vector<std::pair<int64_t, int64_t>> ready_ranges(int layer) const;
  void report_ready(int layer) {
    if (grad_ready_)
      for (const auto& [b, e] : ready_ranges(layer)) grad_ready_(b, e);
  }
  void check_tokens(const int32_t* tokens) const;
  // The tensor / sequence parallel steps of a layer (plain kernels on a single rank):
  // a norm whose output feeds a column-parallel matmul (all-gathered over the tokens under SP), in the
  // operand form, or as floats (the final norm: the lm head's input);
  void norm_for_matmul(Operand out, float* rstd, const float* x, const float* weight);
  void norm_for_matmul(float* out, float* rstd, const float* x, const float* weight);
  // under SP, the all-gather of a norm output of `bytes` per element from sp_ln_ into out
  void gather_norm_output(void* out, size_t bytes);
  // out = x + partial, partial (N, C) being this rank's part of a row-parallel matmul (summed over TP,
  // scattered over the tokens under SP);
  void add_to_residual(float* out, const float* x, float* partial);
  // the two above in one: out = x + partial, then normed = the norm of out (fused on one rank);
  void add_to_residual_and_norm(float* out, Operand normed, float* rstd, const float* x, float* partial,
                                const float* weight);
  // backward: the residual gradient (Nl, C) on all N tokens (SP all-gather), and a column-parallel
  // matmul's input gradient (N, C) summed over TP on this rank's tokens (in place, or SP's scratch).
  const float* all_tokens(const float* dres);
  const float* own_tokens(float* dln);
  // The lm head and cross-entropy split over the vocabulary (TP > 1): losses (and, with dloss, the
  // gradients of wout and of lnf into dln_).
  void vocab_parallel_lmhead_ce(const int32_t* targets, float dloss, bool backward);
  void lmhead_ce(const int32_t* targets, float dloss, bool backward);  // either path
  int64_t count_valid(const int32_t* targets) const;                   // checks target ids too
  float mean_loss(int64_t num_valid) const;
  // bf16 modes: the backend's operand form for N tokens (agreed over the TP group).
  void choose_operand_form(int64_t N);
  void bind_weights();  // after the parameter arena moved
  // p, when the backend's memory is the host's; else an Error naming what needed it there.
  template <typename T>
  T* host(T* p, const char* what) const {
    if (!k_.host_memory()) fail_not_host(what);
    return p;
  }
  [[noreturn]] void fail_not_host(const char* what) const;
  void ensure_training_state();  // grads and AdamW moments, on first use
  // Where gradient-arena element g (inside the optimizer shard, not in a frozen part) has its moments.
  int64_t moment_index(int64_t g) const;
  bool layer_frozen(std::string_view tensor, int l) const;  // ParamSpec::frozen_layers[l] of that tensor

  LlamaConfig config_;  // the full model
  ShardPlan plan_;
  LocalDims dims_;
  parallel::Communicator* tp_ = nullptr;
  std::unique_ptr<parallel::Communicator> kv_group_;  // TP ranks holding the same kv heads (when replicated)
  Precision precision_;
  uint64_t seed_;
  // The backend: its kernels run every pass, and every Buffer below is its memory (declared first,
  // so it outlives them).
  std::unique_ptr<Kernels> kernels_;
  Kernels& k_;
  Recompute recompute_ = Recompute::none;
  int64_t shard_begin_ = 0, shard_end_ = -1;  // AdamW moments cover [shard_begin_, shard_end()) of the arena
  int64_t grad_elements_ = 0;                 // 0: num_params_
  int recompute_layers_ = 0;                  // layers [0, recompute_layers_) recompute in the backward
  std::vector<ParamSpec> specs_;
  int64_t num_params_ = 0;
  int64_t num_frozen_ = 0;                                 // elements of the frozen tensors, at the start of the arena
  std::vector<std::pair<int64_t, int64_t>> moment_holes_;  // the frozen parts, in gradient-arena offsets
  bool training_state_ = false;                            // gradients and moments allocated
  Buffer<float> param_arena_{&k_};  // (num_params) fp32 compute weights (master in fp32/bf16-mixed)
  Buffer<float> grad_arena_{&k_};   // (num_trainable) the trainable tensors' gradients
  Buffer<bf16> master_bf16_{&k_};   // (num_params) bf16-sr: the bf16 master weights
  // AdamW moments of the optimizer shard less the frozen parts (moment_index): fp32 / bf16-mixed, bf16-sr.
  Buffer<float> m_f32_{&k_}, v_f32_{&k_};
  Buffer<bf16> m_bf16_{&k_}, v_bf16_{&k_};
  ParameterTensors params_{}, grads_{};
  std::function<void(int64_t, int64_t)> grad_ready_;

  int B_ = 0, T_ = 0;
  int slots_ = 1;                              // activation sets (pipeline micro-batches in flight)
  int64_t slot_floats_ = 0, slot_inputs_ = 0;  // one set's size in each arena (inputs: in operands)
  Buffer<float> act_arena_{&k_};
  ActivationTensors acts_{};
  Buffer<std::byte> mm_arena_{&k_};  // MatmulInputs storage, in the backend's operand form
  MatmulInputs mm_{};
  // Tensor/sequence parallelism scratch: the vocabulary-parallel logits (N, V/TP), a norm output on
  // this rank's tokens before the all-gather (Nl, C, as floats or operands), per-row statistics.
  Buffer<float> logits_{&k_};
  Buffer<std::byte> sp_ln_{&k_};
  Buffer<float> sp_tmp_{&k_};
  Buffer<float> row_max_{&k_}, row_stats_{&k_};
  // Per slot (slots, N): RoPE positions (0..T-1 per sequence unless set) and documents' starts.
  struct SlotLayout {
    bool positions = false;  // pos_ holds set positions (else 0..T-1)
    bool documents = false;  // doc_ holds document starts (else attention spans the sequence)
  };
  Buffer<int32_t> pos_{&k_}, doc_{&k_};
  std::vector<SlotLayout> slot_layout_;
  int slot_ = 0;                                // the slot use_slot chose
  Buffer<int32_t> tokens_{&k_}, targets_{&k_};  // (N) the micro-batch's ids (backends of device memory)
  // Backward scratch, one layer's worth each.
  Buffer<float> dres_{&k_}, dln_{&k_}, dqkv_{&k_}, datt_{&k_}, dhmid_{&k_}, tmp_{&k_};

  // KV cache for decode: (L, max_T, 2*Hkv*D) and one-token scratch.
  int cache_T_ = 0;
  Buffer<float> kv_cache_{&k_};
  Buffer<float> dec_x_{&k_}, dec_ln_{&k_}, dec_qkv_{&k_}, dec_att_{&k_}, dec_h13_{&k_}, dec_hmid_{&k_}, dec_tmp_{&k_},
      dec_scores_{&k_}, dec_rstd_{&k_}, dec_logits_{&k_};
  Buffer<int32_t> dec_ids_{&k_};  // (2) the token and its position
};

}  // namespace llamatrain::model
