// LlamaModel's state: the parameter table (build_param_specs, the one list that sizes the arenas,
// the checkpoints and the shards), the arenas of weights, gradients and AdamW moments, init, the
// bf16 copies and their operand form, the gradient norm and model-parallel gradient sums, and the
// optimizer step. The passes are in passes.cpp, activations in memory.cpp, decoding in decode.cpp.
#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/memory.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"

namespace llamatrain::model {

namespace {

// The full model's tensors in arena order; full_id is the index in this list whether or not a rank
// holds the tensor.
// bqkv is last so that the ids of the other tensors (their init and rounding streams) are the same
// with or without biases.
enum FullId { kWte, kAttnNorm, kWqkv, kWo, kFfnNorm, kW13, kW2, kNorm, kWout, kBqkv };

// Merge adjacent row blocks (a single rank's q, k and v are one block).
void merge_row_blocks(std::vector<ParamSpec>& specs) {
  for (auto& s : specs) {
    auto& rows = s.shard.rows;
    std::vector<std::pair<int64_t, int64_t>> merged;
    for (const auto& r : rows) {
      if (r.second == 0) continue;
      if (!merged.empty() && merged.back().first + merged.back().second == r.first)
        merged.back().second += r.second;
      else
        merged.push_back(r);
    }
    rows = merged;
  }
}

// What each rank's copy counts for: all, nothing, or (wqkv of a kv-head replica) its q rows.
void set_owned(std::vector<ParamSpec>& specs, int64_t q_begin, int64_t q_rows) {
  for (auto& s : specs) {
    s.owned = s.shard;
    if (s.in_norm) continue;
    s.owned.rows.clear();
    if (s.full_id == kWqkv || s.full_id == kBqkv) s.owned.rows = {{q_begin, q_rows}};
  }
}

// Frozen tensors first (in their usual order), then the trainable ones: the gradient arena, the
// moments and the ZeRO-1 shards cover one range at the arena's end.
void place_in_arena(const LlamaConfig& c, std::vector<ParamSpec>& specs) {
  for (auto& s : specs) s.frozen = c.is_frozen(s.name);
  std::stable_partition(specs.begin(), specs.end(), [](const ParamSpec& s) { return s.frozen; });
  int64_t offset = 0, frozen = 0;
  for (auto& s : specs) {
    s.numel = 1;
    for (int64_t n : s.shape) s.numel *= n;
    const bool vocab_rows = s.full_id == kWte || s.full_id == kWout;  // may have padding past the shard
    CHECK(vocab_rows ? s.numel >= s.shard.numel() : s.numel == s.shard.numel(), "shard of {} disagrees with its shape",
          s.name);
    s.offset = offset;
    offset += s.numel;
    if (s.frozen) frozen += s.numel;
  }
  for (auto& s : specs) s.grad_offset = s.frozen ? -1 : s.offset - frozen;
}

// Frozen parts: where this rank's runs of the full tensor meet each part, in local offsets.
void find_frozen_parts(const LlamaConfig& c, std::vector<ParamSpec>& specs) {
  for (auto& s : specs) {
    if (s.frozen) continue;
    for (const FrozenPart& part : c.frozen_parts) {
      if (part.tensor != s.name) continue;
      s.shard.for_each_run([&](int64_t local, int64_t full, int64_t n) {
        const int64_t b = std::max(full, part.begin), e = std::min(full + n, part.end);
        if (b < e) s.frozen_ranges.emplace_back(local + (b - full), local + (e - full));
      });
    }
    s.frozen_ranges = merged_ranges(std::move(s.frozen_ranges));
    const auto& r = s.frozen_ranges;
    const bool stacked = s.full_id != kWte && s.full_id != kWout && s.full_id != kNorm;  // shape (L, ...)
    if (r.empty() || !stacked || s.shape[0] <= 0) continue;
    const int64_t layers = s.shape[0], per = s.numel / layers;
    for (int64_t l = 0; l < layers; l++)
      s.frozen_layers.push_back(std::any_of(r.begin(), r.end(), [&](const std::pair<int64_t, int64_t>& x) {
        return x.first <= l * per && (l + 1) * per <= x.second;
      }));
  }
}

// This rank's tensors: each a TensorShard of the full one (all of it on a single rank).
std::vector<ParamSpec> build_param_specs(const LlamaConfig& c, const ShardPlan& plan) {
  const LocalDims d = local_dims(c, plan);
  const int64_t C = c.dim, L = c.n_layers, V = c.vocab_size, F = c.ffn_dim, D = d.D;
  const int64_t H = c.n_heads, Hkv = c.n_kv_heads, HD = H * D, QKV = c.qkv_dim();
  const int64_t tp = plan.tp_rank, l0 = plan.layer_begin, Ll = plan.layers();
  const bool replica = plan.tp_rank != 0;  // norms: TP rank 0 counts them
  // A stacked (L, R, K) tensor of this stage's layers, given its local row blocks and columns.
  auto stacked = [&](int64_t R, int64_t K, std::vector<std::pair<int64_t, int64_t>> rows, int64_t col_begin,
                     int64_t cols) {
    TensorShard t;
    t.full_layers = L, t.full_rows = R, t.full_cols = K;
    t.layer_begin = l0, t.layers = Ll;
    t.rows = std::move(rows);
    t.col_begin = col_begin, t.cols = cols;
    return t;
  };
  // The embedding and lm head: this rank's real rows of the (V, C) table; its padding rows (the local
  // rows [V_valid, d.V)) are in no shard.
  auto vocab = [&] {
    TensorShard t = TensorShard::whole_tensor(1, V, C);
    t.rows = {{d.vocab_begin, d.V_valid}};
    return t;
  };
  std::vector<ParamSpec> specs;
  auto add = [&](const char* name, FullId id, TensorShard t, bool decay, bool in_norm) {
    ParamSpec s;
    s.name = name;
    s.full_id = id;
    s.decay = decay;
    s.norm = id == kAttnNorm || id == kFfnNorm || id == kNorm;
    s.in_norm = in_norm;
    const int64_t rows = t.local_rows();
    switch (id) {
      case kAttnNorm:
      case kFfnNorm: s.shape = {t.layers, t.cols}; break;  // (L, C)
      case kBqkv: s.shape = {t.layers, rows}; break;       // (L, QKV)
      case kNorm: s.shape = {t.cols}; break;               // (C)
      case kWte:
      case kWout: s.shape = {d.V, t.cols}; break;   // (V, C), padding rows too
      default: s.shape = {t.layers, rows, t.cols};  // (L, rows, cols)
    }
    s.shard = std::move(t);
    specs.push_back(std::move(s));
  };
  if (plan.holds_embedding(c)) add("wte", kWte, vocab(), true, plan.first_stage());
  add("attn_norm", kAttnNorm, stacked(1, C, {{0, 1}}, 0, C), false, !replica);
  const int64_t kv0 = int64_t(d.kv_head_begin) * D;  // first row of this rank's kv heads within k (and v)
  // This rank's q heads, then its kv heads' k and v rows (bqkv: the same rows, one column each).
  const std::vector<std::pair<int64_t, int64_t>> qkv_rows = {
      {tp * d.H * D, d.H * D}, {HD + kv0, d.Hkv * D}, {HD + Hkv * D + kv0, d.Hkv * D}};
  add("wqkv", kWqkv, stacked(QKV, C, qkv_rows, 0, C), true, d.kv_owner);
  if (c.qkv_bias) add("bqkv", kBqkv, stacked(QKV, 1, qkv_rows, 0, 1), false, d.kv_owner);
  add("wo", kWo, stacked(C, HD, {{0, C}}, tp * d.H * D, d.H * D), true, true);
  add("ffn_norm", kFfnNorm, stacked(1, C, {{0, 1}}, 0, C), false, !replica);
  add("w13", kW13, stacked(2 * F, C, {{tp * d.F, d.F}, {F + tp * d.F, d.F}}, 0, C), true, true);
  add("w2", kW2, stacked(C, F, {{0, C}}, tp * d.F, d.F), true, true);
  if (plan.last_stage()) {
    add("norm", kNorm, TensorShard::whole_tensor(1, 1, C), false, !replica);
    if (!c.tie_embeddings) add("wout", kWout, vocab(), true, true);
  }
  merge_row_blocks(specs);
  set_owned(specs, tp * d.H * D, d.H * D);
  place_in_arena(c, specs);
  find_frozen_parts(c, specs);
  return specs;
}

// The frozen parts of the trainable tensors, in gradient-arena offsets, sorted and disjoint: the
// elements without AdamW moments.
std::vector<std::pair<int64_t, int64_t>> moment_holes_of(const std::vector<ParamSpec>& specs) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const ParamSpec& s : specs)
    if (!s.frozen)
      for (const auto& [b, e] : s.frozen_ranges) out.emplace_back(s.grad_offset + b, s.grad_offset + e);
  std::sort(out.begin(), out.end());
  return out;
}

// The elements of [lo, hi) inside `holes`.
int64_t hole_elements(const std::vector<std::pair<int64_t, int64_t>>& holes, int64_t lo, int64_t hi) {
  int64_t n = 0;
  for (const auto& [b, e] : holes) n += std::max<int64_t>(0, std::min(e, hi) - std::max(b, lo));
  return n;
}

// Views of the parameter arena, or (grads) of the gradient arena, where frozen tensors have none.
ParameterTensors views(float* base, const std::vector<ParamSpec>& specs, bool tied, bool grads = false) {
  auto at = [&](const char* name) -> float* {
    for (const auto& s : specs)
      if (s.name == name) return grads ? (s.frozen ? nullptr : base + s.grad_offset) : base + s.offset;
    return nullptr;
  };
  ParameterTensors t{at("wte"),      at("attn_norm"), at("wqkv"), at("bqkv"), at("wo"),
                     at("ffn_norm"), at("w13"),       at("w2"),   at("norm"), tied ? at("wte") : at("wout")};
  return t;
}

}  // namespace

LlamaModel::LlamaModel(const LlamaConfig& config, Precision precision, uint64_t seed)
    : LlamaModel(config, precision, seed, ShardPlan{}, nullptr) {}

LlamaModel::LlamaModel(const LlamaConfig& config, Precision precision, uint64_t seed, const ShardPlan& plan,
                       parallel::Communicator* tp, Device device)
    : config_(config),
      plan_(plan),
      tp_(tp),
      precision_(precision),
      seed_(seed),
      kernels_(make_kernels(device, precision)),
      k_(*kernels_) {
  config_.validate("model");
  if (plan_.layer_end == 0) plan_ = ShardPlan::single(config_);  // the default plan: everything
  CHECK(plan_.tp_size == 1 || (tp_ != nullptr && tp_->size() == plan_.tp_size && tp_->rank() == plan_.tp_rank),
        "tensor parallel model without its TP communicator");
  dims_ = local_dims(config_, plan_);
  // The TP ranks sharing a kv head (collective over tp: every TP rank builds its model together).
  if (dims_.kv_replicas > 1) kv_group_ = tp_->split(dims_.kv_head_begin, plan_.tp_rank, "kv");
  specs_ = build_param_specs(config_, plan_);
  num_params_ = specs_.back().offset + specs_.back().numel;
  for (const ParamSpec& s : specs_)
    if (s.frozen) num_frozen_ += s.numel;
  moment_holes_ = moment_holes_of(specs_);
  if (!k_.host_memory() && !plan_.is_single())
    fail("device {}: a model split over ranks (tensor or pipeline parallelism) runs on the cpu\nhint: set "
         "tensor_model_parallel_size and pipeline_model_parallel_size to 1, or use the cpu device",
         device_name(device));
  param_arena_.assign_zero(num_params_);
  if (precision_ == Precision::bf16_sr) master_bf16_.assign_zero(num_params_);
  bind_weights();
}

void LlamaModel::bind_weights() {
  params_ = views(param_arena_.data(), specs_, config_.tie_embeddings);
  k_.bind_weights(param_arena_.data(), precision_ == Precision::bf16_sr ? master_bf16_.data() : nullptr, num_params_);
}

void LlamaModel::set_optimizer_shard(int64_t begin, int64_t end, int64_t grad_elements) {
  CHECK(!training_state_, "set_optimizer_shard after the training state was allocated");
  CHECK(0 <= begin && begin <= end && end <= num_trainable() && grad_elements >= num_trainable());
  shard_begin_ = begin;
  shard_end_ = end;
  grad_elements_ = grad_elements;
  // The trainable weights are padded too (the padding stays zero), so that
  // parallel::all_gather_parameters spreads the updated shards in place (trainable_param_data()).
  param_arena_.resize(num_frozen_ + grad_elements);
  bind_weights();
}

void LlamaModel::ensure_training_state() {
  if (training_state_) return;
  training_state_ = true;
  grad_arena_.assign_zero(std::max(num_trainable(), grad_elements_));
  const int64_t moments = shard_end() - shard_begin_ - hole_elements(moment_holes_, shard_begin_, shard_end());
  if (precision_ == Precision::bf16_sr) {
    m_bf16_.assign_zero(moments);
    v_bf16_.assign_zero(moments);
  } else {
    m_f32_.assign_zero(moments);
    v_f32_.assign_zero(moments);
  }
  grads_ = views(grad_arena_.data(), specs_, config_.tie_embeddings, true);
}

int64_t LlamaModel::moment_index(int64_t g) const {
  return g - shard_begin_ - hole_elements(moment_holes_, shard_begin_, g);
}

ParameterTensors LlamaModel::grads() {
  ensure_training_state();
  return grads_;
}

float* LlamaModel::grad_data() {
  ensure_training_state();
  return host(grad_arena_.data(), "the gradients");
}

float* LlamaModel::grad_arena() {
  ensure_training_state();
  return grad_arena_.data();
}

void LlamaModel::copy_params_to_host(float* out) const {
  k_.copy_to_host(out, param_arena_.data(), sizeof(float) * size_t(num_params_));
}

void LlamaModel::copy_params_from_host(const float* in) {
  k_.copy_from_host(param_arena_.data(), in, sizeof(float) * size_t(num_params_));
  params_changed();
}

void LlamaModel::copy_grads_to_host(float* out) {
  ensure_training_state();
  k_.copy_to_host(out, grad_arena_.data(), sizeof(float) * size_t(num_trainable()));
}

void LlamaModel::fail_not_host(const char* what) const {
  fail("device {}: this step reads {} of the model as host memory, which runs on the cpu only (a model split "
       "over ranks: tensor or pipeline parallelism)\nhint: use the cpu device (--device cpu, trainer.accelerator=cpu)",
       device_name(k_.device()), what);
}

LlamaModel::~LlamaModel() = default;

void LlamaModel::init_random(float std, float output_std) {
  // Each element's value is a function of its place in the full tensor: every layout draws the same model.
  for (const ParamSpec& s : specs_) {
    float* p = param_arena_.data() + s.offset;
    const float sd = output_std > 0 && (s.name == "wo" || s.name == "w2") ? output_std : std;
    const auto id = uint32_t(s.full_id);
    s.shard.for_each_run([&](int64_t local, int64_t full, int64_t n) {
      if (s.norm)
        k_.fill_constant(p + local, n, 1.0f);
      else if (s.full_id == kBqkv)  // biases start at zero (HF's _init_weights)
        k_.fill_constant(p + local, n, 0.0f);
      else
        k_.fill_normal(p + local, n, sd, seed_, id, uint64_t(full));
    });
  }
  params_changed();
}

void LlamaModel::params_changed() { k_.weights_changed(); }

void LlamaModel::choose_operand_form(int64_t N) {
  if (precision_ == Precision::fp32 || dims_.L == 0) return;
  // The backend's choice for a layer's widest matmul (gate | up).
  OperandForm form = k_.preferred_operand_form(int(N), 2 * dims_.F, dims_.C);
  if (plan_.tp_size > 1) {
    // Sequence parallelism all-gathers the norm outputs in this form, so the TP group needs one form;
    // each rank chose on its own (a CPU's timings may differ near a tie): the majority's, bf16 on a tie.
    float votes = form == OperandForm::bf16_in_f32 ? 1.0f : 0.0f;
    tp_->all_reduce(&votes, 1);
    form = 2 * votes > float(plan_.tp_size) ? OperandForm::bf16_in_f32 : OperandForm::bf16;
  }
  k_.use_operand_form(form);
}

bool LlamaModel::float_operands_at(const LlamaConfig& c, const ShardPlan& plan, Precision p, int64_t N, bool probe,
                                   Device device) {
  const LocalDims d = local_dims(c, plan);
  if (p == Precision::fp32 || d.L == 0) return false;
  return backend_sizing(device).float_operands(int(N), 2 * d.F, d.C, probe);  // a layer's widest matmul: gate | up
}

void LlamaModel::zero_grad() {
  ensure_training_state();
  k_.zero(grad_arena_.data(), grad_arena_.size() * sizeof(float));
}

float LlamaModel::optimizer_step(const AdamWConfig& opt, float lr, int step, float embedding_lr) {
  zero_frozen_grads();
  const float norm = grad_norm();
  optimizer_update(opt, lr, step, norm, embedding_lr);
  return norm;
}

bool LlamaModel::layer_frozen(std::string_view tensor, int l) const {
  const ParamSpec* s = find_param(tensor);
  return s && size_t(l) < s->frozen_layers.size() && s->frozen_layers[size_t(l)];
}

void LlamaModel::zero_frozen_grads() {
  ensure_training_state();
  for (const ParamSpec& s : specs_)
    for (const auto& [b, e] : s.frozen_ranges)
      k_.zero(grad_arena_.data() + s.grad_offset + b, size_t(e - b) * sizeof(float));
}

float LlamaModel::grad_norm() { return float(std::sqrt(grad_sum_squares(0, num_trainable()))); }

double LlamaModel::grad_sum_squares(int64_t begin, int64_t end) {
  ensure_training_state();
  CHECK(0 <= begin && begin <= end && end <= num_trainable());
  bool all = true;
  for (const ParamSpec& s : specs_) all = all && (s.in_norm || s.frozen);
  if (all) return k_.sum_squares(grad_arena_.data() + begin, end - begin);
  double sum = 0;
  std::vector<float> packed;
  for (const ParamSpec& s : specs_) {
    if (s.frozen) continue;
    const int64_t a = std::max(s.grad_offset, begin), b = std::min(s.grad_offset + s.numel, end);
    if (a >= b) continue;
    if (s.in_norm) {
      sum += k_.sum_squares(grad_arena_.data() + a, b - a);
    } else if (s.owned.numel() > 0) {  // the owned elements of [a, b), packed
      packed.assign(size_t(s.owned.numel()), 0.0f);
      copy_between_shards(packed.data(), s.owned, 0, s.owned.numel(), grad_arena_.data() + a, s.shard,
                          a - s.grad_offset, b - a);
      sum += k_.sum_squares(packed.data(), s.owned.numel());
    }
  }
  return sum;
}

void LlamaModel::reduce_model_parallel_grads(parallel::Communicator* embedding_group) {
  ensure_training_state();
  if (dims_.kv_replicas > 1) {
    // A replicated kv head's k and v rows got part of their gradient on each replica (from its q
    // heads): sum them over the replicas. Per layer they are one block, after the q rows (the weight
    // rows of C columns; the bias rows of one).
    const int64_t kv_rows = 2 * int64_t(dims_.Hkv) * dims_.D, qkv = dims_.QKV(), q = dims_.HD();
    const int64_t C = dims_.C;
    for (int64_t l = 0; l < dims_.L; l++) {
      if (grads_.wqkv) kv_group_->all_reduce(grads_.wqkv + (l * qkv + q) * C, size_t(kv_rows * C));
      if (grads_.bqkv) kv_group_->all_reduce(grads_.bqkv + l * qkv + q, size_t(kv_rows));
    }
  }
  if (plan_.sequence_parallel)  // the norm weights' gradients are partial sums over this rank's tokens
    for (const ParamSpec& s : specs_)
      if (s.norm && !s.frozen) tp_->all_reduce(grad_arena_.data() + s.grad_offset, size_t(s.numel));
  if (embedding_group && embedding_group->size() > 1 && config_.tie_embeddings && grads_.wte)
    for (const ParamSpec& s : specs_)
      if (s.name == "wte") embedding_group->all_reduce(grads_.wte, size_t(s.numel));
}

void LlamaModel::optimizer_update(const AdamWConfig& opt, float lr, int step, float norm, float embedding_lr) {
  CHECK(step >= 1);
  ensure_training_state();
  float scale = 1.0f;
  if (opt.grad_clip > 0 && norm > opt.grad_clip) scale = float(opt.grad_clip / (double(norm) + 1e-6));
  // Each trainable tensor's part inside the optimizer shard (all of it without ZeRO-1), in gradient
  // arena offsets; moments are indexed from the shard's start, less the frozen parts. Frozen tensors
  // are not touched (nor decayed), nor are the frozen parts of the others. The embedding and the
  // output layer may have a learning rate of their own.
  const int64_t lo = shard_begin_, hi = shard_end();
  auto update = [&](const ParamSpec& s, int64_t g, int64_t b, float rate) {  // gradient arena [g, b)
    const int64_t n = b - g, k = moment_index(g), a = g + num_frozen_;       // a: in the parameter arena
    const float wd = s.decay ? opt.weight_decay : 0.0f;
    float* p = param_arena_.data() + a;
    const float* gr = grad_arena_.data() + g;
    if (precision_ == Precision::bf16_sr) {
      k_.adamw_update_bf16_sr(master_bf16_.data() + a, m_bf16_.data() + k, v_bf16_.data() + k, p, gr, n, rate,
                              opt.beta1, opt.beta2, opt.eps, wd, step, scale, seed_, uint32_t(s.full_id),
                              uint64_t(a - s.offset));
    } else if (precision_ == Precision::bf16_mixed) {
      k_.adamw_update_bf16_copy(p, m_f32_.data() + k, v_f32_.data() + k, gr, n, rate, opt.beta1, opt.beta2, opt.eps, wd,
                                step, scale);
    } else {
      k_.adamw_update(p, m_f32_.data() + k, v_f32_.data() + k, gr, n, rate, opt.beta1, opt.beta2, opt.eps, wd, step,
                      scale);
    }
  };
  for (const ParamSpec& s : specs_) {
    if (s.frozen) continue;
    const float rate = embedding_lr >= 0 && (s.full_id == kWte || s.full_id == kWout) ? embedding_lr : lr;
    int64_t g = std::max(s.grad_offset, lo);
    const int64_t b = std::min(s.grad_offset + s.numel, hi);
    for (const auto& [fb, fe] : s.frozen_ranges) {  // the trainable runs between the frozen ranges
      const int64_t stop = std::min(b, s.grad_offset + fb);
      if (g < stop) update(s, g, stop, rate);
      g = std::max(g, s.grad_offset + fe);
    }
    if (g < b) update(s, g, b, rate);
  }
}

namespace {

// The gradient ranges of `specs` complete at one point of the backward: the head (layer -1), layer l,
// or the embedding (layer L), leaving out those a model-parallel sum still changes.
std::vector<std::pair<int64_t, int64_t>> ready_ranges_of(const std::vector<ParamSpec>& specs, const LlamaConfig& c,
                                                         const ShardPlan& plan, const LocalDims& d, int layer) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const bool head = layer < 0, embedding = layer >= d.L;
  for (const ParamSpec& s : specs) {
    if (s.frozen) continue;                          // no gradient
    if (plan.sequence_parallel && s.norm) continue;  // norm weights: summed over TP after the backward
    if (d.kv_replicas > 1 && (s.name == "wqkv" || s.name == "bqkv")) continue;  // replicated kv rows: likewise
    const bool stacked = s.name != "wte" && s.name != "wout" && s.name != "norm";
    const int64_t g = s.grad_offset;
    if (stacked && !head && !embedding) {
      const int64_t per = s.numel / d.L;
      out.emplace_back(g + layer * per, g + (layer + 1) * per);
    } else if (head && (s.name == "norm" || s.name == "wout")) {
      out.emplace_back(g, g + s.numel);
    } else if (embedding && s.name == "wte" && !(c.tie_embeddings && plan.pp_size > 1)) {
      out.emplace_back(g, g + s.numel);  // a tied embedding: also complete only here
    }
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> ready_order_of(const std::vector<ParamSpec>& specs, const LlamaConfig& c,
                                                        const ShardPlan& plan, const LocalDims& d) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int l = d.L; l >= -1; l--) {
    const int layer = l == d.L ? -1 : l == -1 ? d.L : l;  // head, L-1 .. 0, embedding
    const auto r = ready_ranges_of(specs, c, plan, d, layer);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> LlamaModel::ready_ranges(int layer) const {
  return ready_ranges_of(specs_, config_, plan_, dims_, layer);
}

std::vector<std::pair<int64_t, int64_t>> LlamaModel::grad_ready_order() const {
  return ready_order_of(specs_, config_, plan_, dims_);
}

std::vector<std::pair<int64_t, int64_t>> LlamaModel::grad_ready_order(const LlamaConfig& c, const ShardPlan& plan) {
  return ready_order_of(build_param_specs(c, plan), c, plan, local_dims(c, plan));
}

const ParamSpec* LlamaModel::find_param(std::string_view name) const {
  for (const ParamSpec& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

std::vector<StateTensor> LlamaModel::state_tensors() {
  ensure_training_state();
  const bool sr = precision_ == Precision::bf16_sr;
  std::vector<StateTensor> out;
  const int64_t lo = shard_begin_, hi = shard_end();
  for (const ParamSpec& s : specs_) {
    // The state is the shard's elements: the local tensor less its padding rows (its last elements).
    const int64_t end = s.offset + s.shard.numel();
    std::vector<int64_t> shape = s.shape;
    if (s.numel != s.shard.numel()) shape[0] = s.shard.local_rows();  // (V_valid, C)
    // [a, b) of the arena, stored at `at` of the given arrays.
    auto add = [&](const char* kind, Buffer<float>& f32, Buffer<bf16>& b16, int64_t a, int64_t b, int64_t at) {
      void* data = sr ? static_cast<void*>(b16.data() + at) : static_cast<void*>(f32.data() + at);
      out.push_back({std::string(kind) + "." + s.name,
                     s.name,
                     sr ? StateDType::bf16 : StateDType::f32,
                     shape,
                     data,
                     b - a,
                     a - s.offset,
                     s.shard,
                     {}});
    };
    add("weight", param_arena_, master_bf16_, s.offset, end, s.offset);
    if (s.frozen) continue;  // no moments
    const int64_t a = std::max(s.grad_offset, lo), b = std::min(s.grad_offset + s.shard.numel(), hi);
    if (a >= b) continue;
    // The frozen parts inside [a, b), in local elements: the moments skip them.
    std::vector<std::pair<int64_t, int64_t>> holes;
    for (const auto& [fb, fe] : s.frozen_ranges) {
      const int64_t hb = std::max(fb, a - s.grad_offset), he = std::min(fe, b - s.grad_offset);
      if (hb < he) holes.emplace_back(hb, he);
    }
    for (const char* kind : {"exp_avg", "exp_avg_sq"}) {
      const bool m = std::string_view(kind) == "exp_avg";
      add(kind, m ? m_f32_ : v_f32_, m ? m_bf16_ : v_bf16_, a - s.grad_offset + s.offset, b - s.grad_offset + s.offset,
          moment_index(a));
      out.back().holes = holes;
    }
  }
  return out;
}

int64_t LlamaModel::state_bytes(const LlamaConfig& c, Precision p, int optimizer_shards, bool float_operands) {
  return state_bytes(c, ShardPlan::single(c), p, optimizer_shards, float_operands);
}

int64_t LlamaModel::num_params(const LlamaConfig& c, const ShardPlan& plan) {
  const auto specs = build_param_specs(c, plan);
  return specs.back().offset + specs.back().numel;
}

int64_t LlamaModel::num_trainable(const LlamaConfig& c, const ShardPlan& plan) {
  int64_t n = 0;
  for (const ParamSpec& s : build_param_specs(c, plan))
    if (!s.frozen) n += s.numel;
  return n;
}

int64_t LlamaModel::state_bytes(const LlamaConfig& c, const ShardPlan& plan, Precision p, int optimizer_shards,
                                bool float_operands) {
  return state_parts(c, plan, p, optimizer_shards, float_operands).total();
}

LlamaModel::StateBytes LlamaModel::state_parts(const LlamaConfig& c, const ShardPlan& plan, Precision p,
                                               int optimizer_shards, bool float_operands) {
  // fp32 weights (compute copy) and gradients always; fp32 Adam moments, or bf16 weights and moments
  // in bf16-sr; bf16-mixed adds its matmul copy of the weights (bf16, or bf16_in_f32 with float
  // operands). ZeRO-1 keeps the moments of one shard (the largest, as the trainer splits them). Frozen
  // tensors have weights only; frozen parts have weights and gradients.
  const int64_t n = num_params(c, plan), t = num_trainable(c, plan);
  const auto holes = moment_holes_of(build_param_specs(c, plan));
  int64_t kept = t - hole_elements(holes, 0, t);
  if (optimizer_shards > 1) {
    const parallel::ZeroShards split(size_t(t), optimizer_shards);
    kept = 0;
    for (int r = 0; r < optimizer_shards; r++) {
      const parallel::ShardRange range = split.range(r);
      kept = std::max(kept, int64_t(range.size()) - hole_elements(holes, int64_t(range.begin), int64_t(range.end)));
    }
  }
  const int64_t moments = p == Precision::bf16_sr ? 4 : 8;  // m and v, per parameter
  const int64_t copy = p == Precision::fp32 ? 0 : p == Precision::bf16_mixed && float_operands ? 4 : 2;
  return {n * (4 + copy), t * 4, kept * moments};
}

int64_t LlamaModel::weight_bytes(const LlamaConfig& c, Precision p) {
  return num_params(c, ShardPlan::single(c)) * (p == Precision::fp32 ? 4 : 6);
}

int64_t LlamaModel::state_bytes() const {
  int64_t bytes = int64_t(param_arena_.size() + grad_arena_.size() + m_f32_.size() + v_f32_.size()) * 4;
  bytes += int64_t(master_bf16_.size() + m_bf16_.size() + v_bf16_.size()) * 2;
  return bytes + k_.weight_copy_bytes();
}

}  // namespace llamatrain::model
