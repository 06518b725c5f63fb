// Llama forward / backward / AdamW over the cpu:: kernels. Forward and backward are mirror images:
// backward calls the same layers in exact reverse order, one kernel per line. The residual-stream
// gradient dres_ flows through in place (rmsnorm_backward accumulates into it).
#include "model/llama.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/cpu/lmhead_ce.h"
#include "kernels/cpu/ops.h"
#include "parallel/comm_pairs.h"
#include "parallel/communicator.h"

namespace llamatrain::model {

Precision parse_precision(const std::string& name) {
  if (name == "fp32" || name == "32") return Precision::fp32;
  if (name == "bf16-mixed" || name == "bf16_mixed") return Precision::bf16_mixed;
  if (name == "bf16-sr" || name == "bf16_sr" || name == "bf16") return Precision::bf16_sr;
  fail("precision: got '{}', expected one of fp32, bf16-mixed, bf16-sr", name);
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16_mixed: return "bf16-mixed";
    case Precision::bf16_sr: return "bf16-sr";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  if (name == "none" || name == "null" || name.empty()) return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "full") return Recompute::full;
  fail("activation recomputation: got '{}', expected one of none, selective, full", name);
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

namespace {

// The full model's tensors in arena order; full_id is the index in this list whether or not a rank
// holds the tensor.
enum FullId { kWte, kAttnNorm, kWqkv, kWo, kFfnNorm, kW13, kW2, kNorm, kWout };

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
  auto vocab = [&] {
    TensorShard t = TensorShard::whole_tensor(1, V, C);
    t.rows = {{d.vocab_begin, d.V}};
    return t;
  };
  std::vector<ParamSpec> specs;
  auto add = [&](const char* name, FullId id, TensorShard t, bool decay, bool in_norm) {
    ParamSpec s;
    s.name = name;
    s.full_id = id;
    s.decay = decay;
    s.in_norm = in_norm;
    const int64_t rows = t.local_rows();
    switch (id) {
      case kAttnNorm: case kFfnNorm: s.shape = {t.layers, t.cols}; break;  // (L, C)
      case kNorm: s.shape = {t.cols}; break;                              // (C)
      case kWte: case kWout: s.shape = {rows, t.cols}; break;             // (V, C)
      default: s.shape = {t.layers, rows, t.cols};                        // (L, rows, cols)
    }
    s.shard = std::move(t);
    specs.push_back(std::move(s));
  };
  if (plan.holds_embedding(c)) add("wte", kWte, vocab(), true, plan.first_stage());
  add("attn_norm", kAttnNorm, stacked(1, C, {{0, 1}}, 0, C), false, !replica);
  const int64_t kv0 = int64_t(d.kv_head_begin) * D;  // first row of this rank's kv heads within k (and v)
  add("wqkv", kWqkv,
      stacked(QKV, C, {{tp * d.H * D, d.H * D}, {HD + kv0, d.Hkv * D}, {HD + Hkv * D + kv0, d.Hkv * D}}, 0, C), true,
      d.kv_owner);
  add("wo", kWo, stacked(C, HD, {{0, C}}, tp * d.H * D, d.H * D), true, true);
  add("ffn_norm", kFfnNorm, stacked(1, C, {{0, 1}}, 0, C), false, !replica);
  add("w13", kW13, stacked(2 * F, C, {{tp * d.F, d.F}, {F + tp * d.F, d.F}}, 0, C), true, true);
  add("w2", kW2, stacked(C, F, {{0, C}}, tp * d.F, d.F), true, true);
  if (plan.last_stage()) {
    add("norm", kNorm, TensorShard::whole_tensor(1, 1, C), false, !replica);
    if (!c.tie_embeddings) add("wout", kWout, vocab(), true, true);
  }
  // Merge adjacent row blocks (a single rank's q, k and v are one block).
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
  // What each rank's copy counts for: all, nothing, or (wqkv of a kv-head replica) its q rows.
  for (auto& s : specs) {
    s.owned = s.shard;
    if (s.in_norm) continue;
    s.owned.rows.clear();
    if (s.full_id == kWqkv) s.owned.rows = {{tp * d.H * D, d.H * D}};
  }
  int64_t offset = 0;
  for (auto& s : specs) {
    s.numel = 1;
    for (int64_t n : s.shape) s.numel *= n;
    CHECK(s.numel == s.shard.numel(), "shard of {} disagrees with its shape", s.name);
    s.offset = offset;
    offset += s.numel;
  }
  return specs;
}

ParameterTensors views(float* base, const std::vector<ParamSpec>& specs, bool tied) {
  auto at = [&](const char* name) -> float* {
    for (const auto& s : specs)
      if (s.name == name) return base + s.offset;
    return nullptr;
  };
  ParameterTensors t{at("wte"), at("attn_norm"), at("wqkv"), at("wo"), at("ffn_norm"),
                     at("w13"), at("w2"),        at("norm"), tied ? at("wte") : at("wout")};
  return t;
}

cpu::ComputeType compute_type(Precision p) {
  return p == Precision::fp32 ? cpu::ComputeType::f32 : cpu::ComputeType::bf16;
}

}  // namespace

LlamaModel::LlamaModel(const LlamaConfig& config, Precision precision, uint64_t seed)
    : LlamaModel(config, precision, seed, ShardPlan{}, nullptr) {}

LlamaModel::LlamaModel(const LlamaConfig& config, Precision precision, uint64_t seed, const ShardPlan& plan,
                       parallel::Communicator* tp)
    : config_(config), plan_(plan), tp_(tp), precision_(precision), seed_(seed) {
  config_.validate("model");
  if (plan_.layer_end == 0) plan_ = ShardPlan::single(config_);  // the default plan: everything
  CHECK(plan_.tp_size == 1 || (tp_ != nullptr && tp_->size() == plan_.tp_size && tp_->rank() == plan_.tp_rank),
        "tensor parallel model without its TP communicator");
  dims_ = local_dims(config_, plan_);
  // The TP ranks sharing a kv head (collective over tp: every TP rank builds its model together).
  if (dims_.kv_replicas > 1) kv_group_ = tp_->split(dims_.kv_head_begin, plan_.tp_rank, "kv");
  specs_ = build_param_specs(config_, plan_);
  num_params_ = specs_.back().offset + specs_.back().numel;
  param_arena_.assign(num_params_, 0.0f);
  if (precision_ != Precision::fp32) param_bf16_.assign(num_params_, bf16{0});
  params_ = views(param_arena_.data(), specs_, config_.tie_embeddings);
}

void LlamaModel::set_optimizer_shard(int64_t begin, int64_t end, int64_t grad_elements) {
  CHECK(grad_arena_.empty(), "set_optimizer_shard after the training state was allocated");
  CHECK(0 <= begin && begin <= end && end <= num_params_ && grad_elements >= num_params_);
  shard_begin_ = begin;
  shard_end_ = end;
  grad_elements_ = grad_elements;
}

void LlamaModel::ensure_training_state() {
  if (!grad_arena_.empty()) return;
  grad_arena_.assign(std::max(num_params_, grad_elements_), 0.0f);
  const int64_t moments = shard_end() - shard_begin_;
  if (precision_ == Precision::bf16_sr) {
    m_bf16_.assign(moments, bf16{0});
    v_bf16_.assign(moments, bf16{0});
  } else {
    m_f32_.assign(moments, 0.0f);
    v_f32_.assign(moments, 0.0f);
  }
  grads_ = views(grad_arena_.data(), specs_, config_.tie_embeddings);
}

ParameterTensors LlamaModel::grads() {
  ensure_training_state();
  return grads_;
}

float* LlamaModel::grad_data() {
  ensure_training_state();
  return grad_arena_.data();
}

LlamaModel::~LlamaModel() = default;

void LlamaModel::init_random(float std, float output_std) {
  // Each element's value is a function of its place in the full tensor: every layout draws the same model.
  for (const ParamSpec& s : specs_) {
    float* p = param_arena_.data() + s.offset;
    const bool is_norm = !s.decay;
    const float sd = output_std > 0 && (s.name == "wo" || s.name == "w2") ? output_std : std;
    const auto id = uint32_t(s.full_id);
    s.shard.for_each_run([&](int64_t local, int64_t full, int64_t n) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; i++)
        p[local + i] = is_norm ? 1.0f : sd * random_normal(seed_, id, uint64_t(full + i));
    });
  }
  params_changed();
}

void LlamaModel::params_changed() {
  if (precision_ == Precision::fp32) return;
  if (!param_f32x_.empty()) {
    bf16_from_float(param_f32x_.data(), param_arena_.data(), num_params_);
    return;
  }
  bf16_from_float(param_bf16_.data(), param_arena_.data(), num_params_);
  if (precision_ == Precision::bf16_sr) float_from_bf16(param_arena_.data(), param_bf16_.data(), num_params_);
}

cpu::Bf16Weight LlamaModel::bf16_of(const float* param) const {
  if (precision_ == Precision::fp32) return nullptr;
  const int64_t i = param - param_arena_.data();
  if (!float_operands_) return param_bf16_.data() + i;
  if (precision_ == Precision::bf16_sr) return cpu::Bf16Weight::rounded_floats(param);  // holds bf16 values
  return param_f32x_.data() + i;
}

void LlamaModel::choose_operand_form(int64_t N) {
  bool floats = float_operands_at(config_, plan_, precision_, N);
  if (plan_.tp_size > 1 && precision_ != Precision::fp32) {
    // Sequence parallelism all-gathers the norm outputs in this form, so the TP group needs one form;
    // each rank probed on its own (timings may differ near a tie): the majority's, bf16 on a tie.
    float votes = floats ? 1.0f : 0.0f;
    tp_->all_reduce(&votes, 1);
    floats = 2 * votes > float(plan_.tp_size);
  }
  if (floats == float_operands_) return;
  float_operands_ = floats;
  if (precision_ != Precision::bf16_mixed) return;  // bf16-sr: the compute copy already is bf16_in_f32
  if (floats) {  // the same values: the fp32 master rounded to nearest even
    param_bf16_ = ArenaVector<bf16>();
    param_f32x_.resize(size_t(num_params_));
  } else {
    param_f32x_ = ArenaVector<bf16_in_f32>();
    param_bf16_.resize(size_t(num_params_));
  }
  params_changed();
}

bool LlamaModel::float_operands_at(const LlamaConfig& c, const ShardPlan& plan, Precision p, int64_t N, bool probe) {
  const LocalDims d = local_dims(c, plan);
  if (p == Precision::fp32 || d.L == 0) return false;
  const int M = int(N), Nout = 2 * d.F, K = d.C;  // a layer's widest matmul: gate | up
  if (probe) return cpu::bf16_operands_as_floats(M, Nout, K);
  return cpu::bf16_operands_as_floats_known(M, Nout, K).value_or(true);
}

bool LlamaModel::float_operands_for_check(const LlamaConfig& c, const ShardPlan& plan, Precision p, int64_t N,
                                          int64_t avail, const std::function<int64_t(bool)>& job_bytes) {
  const bool floats = float_operands_at(c, plan, p, N, false);
  if (floats && avail >= 0 && job_bytes(true) > avail && job_bytes(false) <= avail)  // the form decides: probe
    return float_operands_at(c, plan, p, N);
  return floats;
}

namespace {

// Where each activation lives, in elements: offsets into the fp32 arena (or, for the matmul inputs,
// into the arena of their dtype) of a one-layer scratch for the recomputed layers [0, R) and of the
// stacked copies of the layers that keep it. The one layout both sizes the arenas and answers
// activation_bytes(), so the analytic figure is the allocation.
struct Slot {
  int64_t scratch = 0, base = 0, stride = 0;
  int first_saved = 0;
};
struct ActivationLayout {
  Slot x0, ln1_rstd, qkv, att, lse, resid, ln2_rstd, h13, out, lnf, lnf_rstd, losses;  // fp32 arena
  Slot ln1, ln2, hmid, dh13;                                                           // matmul inputs
  int64_t floats = 0, inputs = 0;
};

// N tokens per micro-batch, Nl of them on this rank's residual stream (N / TP under sequence
// parallelism); local sizes d.
ActivationLayout activation_layout(const LocalDims& d, Recompute r, int R, int B, int T, int64_t Nl) {
  const int64_t N = int64_t(B) * T, C = d.C, L = d.L, F = d.F;
  const int64_t HD = d.HD(), QKV = d.QKV();
  if (r == Recompute::none || R < 0 || R > L) R = r == Recompute::none ? 0 : int(L);
  // In the recomputed layers, selective drops the attention core and the norm / SwiGLU outputs, full
  // drops everything but the layer output (the next layer's input).
  const bool drop_all = r == Recompute::full;
  ActivationLayout a;
  auto layers = [&](int64_t& used, int64_t n, bool dropped) {
    const int first_saved = dropped ? R : 0;
    Slot s{used, 0, n, first_saved};
    if (first_saved > 0) used += n;  // the scratch
    s.base = used;
    used += (L - first_saved) * n;
    return s;
  };
  auto once = [&](int64_t& used, int64_t n) {
    Slot s{used, used, 0, 0};
    used += n;
    return s;
  };
  a.x0 = once(a.floats, Nl * C);
  a.ln1_rstd = layers(a.floats, Nl, drop_all);
  a.qkv = layers(a.floats, N * QKV, drop_all);
  a.att = layers(a.floats, N * HD, true);
  a.lse = layers(a.floats, int64_t(B) * d.H * T, true);
  a.resid = layers(a.floats, Nl * C, drop_all);
  a.ln2_rstd = layers(a.floats, Nl, drop_all);
  a.h13 = layers(a.floats, N * 2 * F, drop_all);
  a.out = layers(a.floats, Nl * C, false);
  a.lnf = once(a.floats, N * C);
  a.lnf_rstd = once(a.floats, Nl);
  a.losses = once(a.floats, N);
  a.ln1 = layers(a.inputs, N * C, true);
  a.ln2 = layers(a.inputs, N * C, true);
  a.hmid = layers(a.inputs, N * F, true);
  a.dh13 = once(a.inputs, N * 2 * F);
  return a;
}

// Floats of the backward's one-layer scratch (dres_, dln_, dqkv_, datt_, dhmid_), tmp_ and, under
// tensor parallelism, the sequence-parallel and vocabulary-parallel scratch.
int64_t scratch_floats(const LocalDims& d, int B, int T, int64_t Nl, bool tp) {
  const int64_t N = int64_t(B) * T, C = d.C, F = d.F;
  const int64_t HD = d.HD(), QKV = d.QKV();
  const int64_t widest = std::max({C, QKV, HD, 2 * F});
  int64_t n = Nl * C /*dres*/ + N * widest /*dln*/ + N * QKV + N * HD + N * F /*dhmid*/ + N * C /*tmp*/;
  if (tp) n += Nl * C /*sp_ln*/ + N * d.V /*logits*/ + 4 * N /*row stats*/;
  return n;
}

template <typename T>
PerLayer<T> at(T* arena, Slot s) {
  return PerLayer<T>{arena + s.scratch, arena + s.base, s.stride, s.first_saved};
}

}  // namespace

int64_t LlamaModel::activation_bytes(const LlamaConfig& c, Precision p, int B, int T, Recompute r,
                                     int recompute_layers, bool float_operands) {
  return activation_bytes(c, ShardPlan::single(c), p, B, T, r, recompute_layers, 1, float_operands);
}

int64_t LlamaModel::activation_bytes(const LlamaConfig& c, const ShardPlan& plan, Precision p, int B, int T,
                                     Recompute r, int recompute_layers, int slots, bool float_operands) {
  const LocalDims d = local_dims(c, plan);
  const int64_t N = int64_t(B) * T, Nl = plan.sequence_parallel ? N / plan.tp_size : N;
  const ActivationLayout a = activation_layout(d, r, recompute_layers, B, T, Nl);
  const int64_t matmul_input_bytes = p == Precision::fp32 || float_operands ? 4 : 2;
  const int64_t sp_norm = plan.tp_size > 1 && p != Precision::fp32 ? Nl * d.C : 0;  // in the matmul dtype
  return 4 * (a.floats * slots + scratch_floats(d, B, T, Nl, plan.tp_size > 1)) +
         matmul_input_bytes * (a.inputs * slots + sp_norm);
}

void LlamaModel::set_recompute(Recompute r, int layers) {
  const int L = config_.n_layers;
  const int R = r == Recompute::none ? 0 : layers < 0 || layers > L ? L : layers;
  if (r == recompute_ && R == recompute_layers_) return;
  recompute_ = r;
  recompute_layers_ = R;
  B_ = T_ = 0;  // re-laid out at the next forward
}

void LlamaModel::set_activation_slots(int slots) {
  CHECK(slots >= 1);
  if (slots == slots_) return;
  slots_ = slots;
  B_ = T_ = 0;  // re-laid out at the next forward
}

int64_t LlamaModel::stage_tokens(int B, int T) const {
  const int64_t N = int64_t(B) * T;
  return plan_.sequence_parallel ? N / plan_.tp_size : N;
}

void LlamaModel::ensure_activations(int B, int T) {
  if (B == B_ && T == T_) return;
  CHECK(B > 0 && T > 0);
  if (T > config_.max_seq_len)
    fail("sequence length: got {}, expected at most max_position_embeddings = {}\nhint: lower the sequence "
         "length or use a model with longer context",
         T, config_.max_seq_len);
  const int64_t N = int64_t(B) * T;
  if (plan_.sequence_parallel && N % plan_.tp_size != 0)
    fail("sequence parallelism: micro batch {} x seq {} = {} tokens, expected a multiple of "
         "model.tensor_model_parallel_size {}\nhint: choose model.data.seq_length divisible by the tensor parallel "
         "size",
         B, T, N, plan_.tp_size);
  B_ = B;
  T_ = T;
  const LocalDims& d = dims_;
  const int64_t Nl = stage_tokens(B, T), C = d.C, F = d.F;
  const int64_t HD = d.HD(), QKV = d.QKV();
  const ActivationLayout lay = activation_layout(d, recompute_, recompute_layers_, B, T, Nl);
  slot_floats_ = lay.floats;
  slot_inputs_ = lay.inputs;
  act_arena_.assign(lay.floats * slots_, 0.0f);
  choose_operand_form(N);
  mm_arena_f32_.clear();
  mm_arena_bf16_.clear();
  mm_arena_f32x_.clear();
  if (precision_ == Precision::fp32)
    mm_arena_f32_.assign(lay.inputs * slots_, 0.0f);
  else if (float_operands_)
    mm_arena_f32x_.assign(lay.inputs * slots_, bf16_in_f32{0.0f});
  else
    mm_arena_bf16_.assign(lay.inputs * slots_, bf16{0});
  use_slot(0);

  pos_.resize(N);
  for (int64_t n = 0; n < N; n++) pos_[n] = int32_t(n % T);
  const int64_t widest = std::max({C, QKV, HD, 2 * F});
  dres_.assign(Nl * C, 0.0f);
  dln_.assign(N * widest, 0.0f);
  dqkv_.assign(N * QKV, 0.0f);
  datt_.assign(N * HD, 0.0f);
  dhmid_.assign(N * F, 0.0f);
  tmp_.assign(N * C, 0.0f);
  if (plan_.tp_size > 1) {
    sp_ln_f32_.assign(Nl * C, 0.0f);  // float norm outputs (and the final norm's in every mode)
    sp_ln_bf16_.clear();
    sp_ln_f32x_.clear();
    if (precision_ != Precision::fp32 && float_operands_)
      sp_ln_f32x_.assign(Nl * C, bf16_in_f32{0.0f});
    else if (precision_ != Precision::fp32)
      sp_ln_bf16_.assign(Nl * C, bf16{0});
    sp_tmp_.assign(Nl * C, 0.0f);
    logits_.assign(N * d.V, 0.0f);
    row_max_.assign(size_t(N) * plan_.tp_size, 0.0f);
    row_stats_.assign(2 * size_t(N), 0.0f);
  }
}

void LlamaModel::use_slot(int slot) {
  CHECK(slot >= 0 && slot < slots_ && B_ > 0, "activation slot {} of {}", slot, slots_);
  const ActivationLayout lay =
      activation_layout(dims_, recompute_, recompute_layers_, B_, T_, stage_tokens(B_, T_));
  float* f = act_arena_.data() + int64_t(slot) * slot_floats_;
  acts_.x0 = f + lay.x0.base;
  acts_.ln1_rstd = at(f, lay.ln1_rstd);
  acts_.qkv = at(f, lay.qkv);
  acts_.att = at(f, lay.att);
  acts_.lse = at(f, lay.lse);
  acts_.resid = at(f, lay.resid);
  acts_.ln2_rstd = at(f, lay.ln2_rstd);
  acts_.h13 = at(f, lay.h13);
  acts_.out = at(f, lay.out);
  acts_.lnf = f + lay.lnf.base;
  acts_.lnf_rstd = f + lay.lnf_rstd.base;
  acts_.losses = f + lay.losses.base;
  // The matmul-only tensors, in the dtype the matmuls read (one of the two arenas stays empty).
  auto take_inputs = [&](auto& arena, auto& m) {
    auto* q = arena.data() + int64_t(slot) * slot_inputs_;
    m.ln1 = at(q, lay.ln1);
    m.ln2 = at(q, lay.ln2);
    m.hmid = at(q, lay.hmid);
    m.dh13 = q + lay.dh13.base;
  };
  if (precision_ == Precision::fp32)
    take_inputs(mm_arena_f32_, mm_f32_);
  else if (float_operands_)
    take_inputs(mm_arena_f32x_, mm_f32x_);
  else
    take_inputs(mm_arena_bf16_, mm_bf16_);
}

// ---- tensor / sequence parallel steps (identity on a single rank) ----

template <typename A>
A* LlamaModel::sp_norm_buffer() {
  if constexpr (std::is_same_v<A, float>)
    return sp_ln_f32_.data();
  else if constexpr (std::is_same_v<A, bf16_in_f32>)
    return sp_ln_f32x_.data();
  else
    return sp_ln_bf16_.data();
}

template <typename A>
void LlamaModel::norm_for_matmul(A* out, float* rstd, const float* x, const float* weight) {
  const int64_t N = int64_t(B_) * T_, Nl = stage_tokens(B_, T_);
  const int C = dims_.C;
  if (!plan_.sequence_parallel) {  // copy_to_tp: the replicated norm output feeds the column-parallel matmul
    cpu::rmsnorm_forward(out, rstd, x, weight, int(N), C, config_.norm_eps);
    return;
  }
  // gather_from_sp: this rank's tokens, then all of them. bf16 travels as pairs packed in floats
  // (a gather moves bits only; C is even), bf16_in_f32 as floats.
  A* local = sp_norm_buffer<A>();
  cpu::rmsnorm_forward(local, rstd, x, weight, int(Nl), C, config_.norm_eps);
  if constexpr (std::is_same_v<A, float>)
    parallel::gather_from_sp_forward(out, local, size_t(Nl), size_t(C), *tp_);
  else if constexpr (std::is_same_v<A, bf16_in_f32>)
    parallel::gather_from_sp_forward(reinterpret_cast<float*>(out), reinterpret_cast<const float*>(local), size_t(Nl),
                                     size_t(C), *tp_);
  else
    tp_->all_gather(reinterpret_cast<float*>(out), reinterpret_cast<const float*>(local), size_t(Nl * C / 2));
}

void LlamaModel::add_to_residual(float* out, const float* x, float* partial) {
  const int64_t N = int64_t(B_) * T_, Nl = stage_tokens(B_, T_), C = dims_.C;
  if (plan_.tp_size == 1) {
    cpu::residual_forward(out, x, partial, N * C);
  } else if (plan_.sequence_parallel) {
    parallel::reduce_scatter_to_sp_forward(sp_tmp_.data(), partial, size_t(Nl), size_t(C), *tp_);
    cpu::residual_forward(out, x, sp_tmp_.data(), Nl * C);
  } else {
    parallel::reduce_from_tp_forward(partial, partial, size_t(N * C), *tp_);
    cpu::residual_forward(out, x, partial, N * C);
  }
}

const float* LlamaModel::all_tokens(const float* dres) {
  if (!plan_.sequence_parallel) return dres;  // reduce_from_tp's backward: identity
  const int64_t Nl = stage_tokens(B_, T_);
  parallel::reduce_scatter_to_sp_backward(tmp_.data(), dres, size_t(Nl), size_t(dims_.C), *tp_);
  return tmp_.data();
}

const float* LlamaModel::own_tokens(float* dln) {
  const int64_t N = int64_t(B_) * T_, Nl = stage_tokens(B_, T_), C = dims_.C;
  if (plan_.tp_size == 1) return dln;
  if (plan_.sequence_parallel) {
    parallel::gather_from_sp_backward(sp_tmp_.data(), dln, size_t(Nl), size_t(C), *tp_);
    return sp_tmp_.data();
  }
  parallel::copy_to_tp_backward(dln, dln, size_t(N * C), *tp_);
  return dln;
}

void LlamaModel::check_tokens(const int32_t* tokens) const {
  const int64_t N = int64_t(B_) * T_;
  for (int64_t n = 0; n < N; n++)
    if (tokens[n] < 0 || tokens[n] >= config_.vocab_size)
      fail("token id at position {}: got {}, expected 0 <= id < vocab_size {}\nhint: the data was tokenized "
           "with a different tokenizer than the model's",
           n, tokens[n], config_.vocab_size);
}

void LlamaModel::forward_body(const int32_t* tokens, const float* input, int B, int T) {
  ensure_activations(B, T);
  const int64_t N = int64_t(B) * T, Nl = stage_tokens(B, T), C = dims_.C;
  if (!plan_.first_stage()) {
    std::memcpy(acts_.x0, input, sizeof(float) * size_t(Nl * C));  // the previous stage's output
  } else {
    check_tokens(tokens);
    if (plan_.tp_size == 1) {
      cpu::embedding_forward(acts_.x0, tokens, params_.wte, int(N), int(C));  // x = embed_tokens(input_ids)
    } else {
      // Vocabulary-parallel embedding: this rank's rows, zeros for the others' tokens, summed over TP.
      const int64_t v0 = dims_.vocab_begin, V = dims_.V;
      float* part = tmp_.data();
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; n++) {
        const int64_t t = tokens[n] - v0;
        if (t >= 0 && t < V)
          std::memcpy(part + n * C, params_.wte + t * C, sizeof(float) * size_t(C));
        else
          std::fill(part + n * C, part + (n + 1) * C, 0.0f);
      }
      if (plan_.sequence_parallel)
        parallel::reduce_scatter_to_sp_forward(acts_.x0, part, size_t(Nl), size_t(C), *tp_);
      else
        parallel::reduce_from_tp_forward(acts_.x0, part, size_t(N * C), *tp_);
    }
  }
  if (precision_ == Precision::fp32)
    forward_layers(mm_f32_);
  else if (float_operands_)
    forward_layers(mm_f32x_);
  else
    forward_layers(mm_bf16_);
  if (!plan_.last_stage()) return;
  const float* last = acts_.out[dims_.L - 1];
  norm_for_matmul(acts_.lnf, acts_.lnf_rstd, last, params_.norm);  // final norm (all tokens: the lm head's input)
}

template <typename A>
void LlamaModel::forward_layers(const MatmulInputs<A>& m) {
  for (int l = 0; l < dims_.L; l++) forward_layer(l, m, false);
}

template <typename A>
void LlamaModel::forward_layer(int l, const MatmulInputs<A>& m, bool for_backward) {
  const LocalDims& d = dims_;
  const int B = B_, T = T_;
  const int N = B * T, C = d.C, F = d.F, H = d.H, Hkv = d.Hkv, D = d.D;
  const int HD = d.HD(), QKV = d.QKV();
  const auto ct = compute_type(precision_);
  const ParameterTensors& w = params_;
  const ActivationTensors& a = acts_;
  const float* x = l == 0 ? a.x0 : a.out[l - 1];  // (Nl, C) layer input
  const float* wqkv = w.wqkv + int64_t(l) * QKV * C;
  const float* wo = w.wo + int64_t(l) * C * HD;
  const float* w13 = w.w13 + int64_t(l) * 2 * F * C;
  const float* w2 = w.w2 + int64_t(l) * C * F;

  norm_for_matmul(m.ln1[l], a.ln1_rstd[l], x, w.attn_norm + int64_t(l) * C);                         // input_ln
  cpu::matmul_forward(a.qkv[l], m.ln1[l], wqkv, bf16_of(wqkv), N, C, QKV, ct);                       // q, k, v
  cpu::rope_forward(a.qkv[l], pos_.data(), N, H + Hkv, QKV, D, config_.rope_theta);                  // rotate q, k
  cpu::attention_forward(a.att[l], a.lse[l], a.qkv[l], B, T, H, Hkv, D);                             // causal GQA
  cpu::matmul_forward(tmp_.data(), a.att[l], wo, bf16_of(wo), N, HD, C, ct);                         // o_proj
  add_to_residual(a.resid[l], x, tmp_.data());                                                       // h = x + attn
  norm_for_matmul(m.ln2[l], a.ln2_rstd[l], a.resid[l], w.ffn_norm + int64_t(l) * C);                 // post_attn_ln
  cpu::matmul_forward(a.h13[l], m.ln2[l], w13, bf16_of(w13), N, C, 2 * F, ct);                      // gate | up
  cpu::swiglu_forward(m.hmid[l], a.h13[l], N, F);                                                    // silu(g) * u
  if (for_backward) return;  // the backward needs nothing past this point (out is saved)
  cpu::matmul_forward(tmp_.data(), m.hmid[l], w2, bf16_of(w2), N, F, C, ct);                         // down_proj
  add_to_residual(a.out[l], a.resid[l], tmp_.data());                                                // h + mlp
}

template <typename A>
void LlamaModel::recompute_layer(int l, const MatmulInputs<A>& m) {
  if (l >= recompute_layers_) return;
  if (recompute_ == Recompute::full) {
    forward_layer(l, m, true);
    return;
  }
  if (recompute_ != Recompute::selective) return;
  // The saved matmul outputs (qkv with RoPE, resid, h13) feed the same kernels as in the forward.
  const LocalDims& d = dims_;
  const int N = B_ * T_, C = d.C;
  const ParameterTensors& w = params_;
  const ActivationTensors& a = acts_;
  const float* x = l == 0 ? a.x0 : a.out[l - 1];
  norm_for_matmul(m.ln1[l], a.ln1_rstd[l], x, w.attn_norm + int64_t(l) * C);
  cpu::attention_forward(a.att[l], a.lse[l], a.qkv[l], B_, T_, d.H, d.Hkv, d.D);
  norm_for_matmul(m.ln2[l], a.ln2_rstd[l], a.resid[l], w.ffn_norm + int64_t(l) * C);
  cpu::swiglu_forward(m.hmid[l], a.h13[l], N, d.F);
}

int64_t LlamaModel::count_valid(const int32_t* targets) const {
  const int64_t N = int64_t(B_) * T_;
  int64_t valid = 0;
  for (int64_t n = 0; n < N; n++) {
    if (targets[n] >= config_.vocab_size)
      fail("target id at position {}: got {}, expected < vocab_size {} (or -100 to ignore)", n, targets[n],
           config_.vocab_size);
    if (targets[n] >= 0) valid++;
  }
  return valid;
}

float LlamaModel::mean_loss(int64_t num_valid) const {
  const int64_t N = int64_t(B_) * T_;
  double sum = 0;
  for (int64_t n = 0; n < N; n++) sum += acts_.losses[n];
  return num_valid > 0 ? float(sum / double(num_valid)) : 0.0f;
}

StepStats LlamaModel::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  CHECK(plan_.pp_size == 1, "forward() on a pipeline stage: use stage_forward / stage_loss");
  forward_body(tokens, nullptr, B, T);
  StepStats stats;
  if (targets == nullptr) return stats;
  return stage_loss(0, targets);
}

StepStats LlamaModel::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                                       float grad_scale) {
  CHECK(plan_.pp_size == 1, "forward_backward() on a pipeline stage: use stage_forward / stage_backward");
  stage_forward(0, tokens, nullptr, B, T);
  return stage_backward(0, tokens, targets, nullptr, grad_scale);
}

void LlamaModel::stage_forward(int slot, const int32_t* tokens, const float* input, int B, int T) {
  CHECK(plan_.first_stage() ? tokens != nullptr : input != nullptr);
  ensure_activations(B, T);
  use_slot(slot);
  forward_body(tokens, input, B, T);
}

const float* LlamaModel::stage_output(int slot) const {
  CHECK(B_ > 0 && slot >= 0 && slot < slots_);
  const ActivationLayout lay =
      activation_layout(dims_, recompute_, recompute_layers_, B_, T_, stage_tokens(B_, T_));
  return at(const_cast<float*>(act_arena_.data()) + int64_t(slot) * slot_floats_, lay.out)[dims_.L - 1];
}

const float* LlamaModel::stage_input_grad() const { return dres_.data(); }

StepStats LlamaModel::stage_loss(int slot, const int32_t* targets) {
  CHECK(plan_.last_stage() && B_ > 0);
  use_slot(slot);
  StepStats stats;
  stats.num_valid = count_valid(targets);
  lmhead_ce(targets, 0.0f, false);
  stats.loss = mean_loss(stats.num_valid);
  return stats;
}

StepStats LlamaModel::stage_backward(int slot, const int32_t* tokens, const int32_t* targets, const float* doutput,
                                     float grad_scale) {
  CHECK(B_ > 0);
  CHECK(plan_.last_stage() ? targets != nullptr : doutput != nullptr);
  use_slot(slot);
  ensure_training_state();
  StepStats stats;
  float dloss = 0;
  if (plan_.last_stage()) {
    stats.num_valid = count_valid(targets);
    dloss = stats.num_valid > 0 ? grad_scale / float(stats.num_valid) : 0.0f;
  }
  backward(tokens, targets, dloss, doutput);  // the lm head computes the losses on its way
  if (plan_.last_stage()) stats.loss = mean_loss(stats.num_valid);
  return stats;
}

void LlamaModel::lmhead_ce(const int32_t* targets, float dloss, bool backward) {
  const int N = B_ * T_;
  if (plan_.tp_size > 1) {
    vocab_parallel_lmhead_ce(targets, dloss, backward);
    return;
  }
  // lm head + cross-entropy (+ their gradient) in one pass over row chunks.
  cpu::lmhead_ce_fused(acts_.losses, backward ? dln_.data() : nullptr, backward ? grads_.wout : nullptr, acts_.lnf,
                       params_.wout, bf16_of(params_.wout), targets, dloss, N, config_.dim, config_.vocab_size,
                       compute_type(precision_));
}

void LlamaModel::vocab_parallel_lmhead_ce(const int32_t* targets, float dloss, bool backward) {
  // Megatron's vocab-parallel cross-entropy: each rank has the logits of its V/TP vocabulary rows;
  // the row maxima, the sums of exponentials and the target logits are combined over TP. Each row
  // goes through the fused kernel's own steps (kernels/cpu/lmhead_ce.h), so a split vocabulary
  // differs from one rank only in the order of the sum of exponentials.
  const int64_t N = int64_t(B_) * T_, P = plan_.tp_size, v0 = dims_.vocab_begin;
  const int V = dims_.V, C = dims_.C;
  const bool bf16_values = precision_ != Precision::fp32;  // dlogits hold bf16 values, as the fused kernel's
  float* logits = logits_.data();  // (N, V/TP)
  cpu::matmul_forward(logits, acts_.lnf, params_.wout, bf16_of(params_.wout), int(N), C, V,
                      compute_type(precision_));
  float* local_max = row_max_.data() + int64_t(tp_->rank()) * N;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) local_max[n] = cpu::detail::row_max(logits + n * V, V);
  tp_->all_gather(row_max_.data(), local_max, size_t(N));  // in place: (TP, N)
  std::vector<float> gmax(static_cast<size_t>(N));
  float* stats = row_stats_.data();  // per row: sum of exp(logit - max), target logit (0 off this rank)
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    float mx = row_max_[size_t(n)];
    for (int64_t p = 1; p < P; p++) mx = std::max(mx, row_max_[size_t(p * N + n)]);
    gmax[size_t(n)] = mx;
    float* row = logits + n * V;
    const int64_t t = targets[n] - v0;
    stats[2 * n + 1] = targets[n] >= 0 && t >= 0 && t < V ? row[t] : 0.0f;
    stats[2 * n] = cpu::detail::row_exp_sum(row, mx, V);  // row now holds exp(logit - max)
  }
  tp_->all_reduce(stats, size_t(2 * N));
  float* losses = acts_.losses;
  for (int64_t n = 0; n < N; n++)
    losses[n] = targets[n] < 0 ? 0.0f : gmax[size_t(n)] + std::log(stats[2 * n]) - stats[2 * n + 1];
  if (!backward) return;
  // dlogits = dloss * (softmax - onehot), in place of the exponentials; then the lm head's backward,
  // whose input gradient is this rank's part of the sum over the vocabulary (own_tokens reduces it).
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    float* row = logits + n * V;
    if (targets[n] < 0) {
      std::fill(row, row + V, 0.0f);
      continue;
    }
    const float sum = stats[2 * n], scale = dloss / sum;
    const int64_t t = targets[n] - v0;
    const bool mine = t >= 0 && t < V;
    const float dt = mine ? (row[t] / sum - 1.0f) * dloss : 0.0f;
    if (bf16_values) {
      cpu::detail::row_scale_bf16_values(row, row, scale, V);
      if (mine) row[t] = to_float(to_bf16(dt));
    } else {
      cpu::detail::row_scale_f32(row, row, scale, V);
      if (mine) row[t] = dt;
    }
  }
  cpu::matmul_backward(dln_.data(), grads_.wout, logits, acts_.lnf, params_.wout, bf16_of(params_.wout), int(N), C, V,
                       compute_type(precision_));
}

void LlamaModel::backward(const int32_t* tokens, const int32_t* targets, float dloss, const float* doutput) {
  const int64_t N = int64_t(B_) * T_, Nl = stage_tokens(B_, T_);
  const int C = dims_.C;
  const ParameterTensors& w = params_;
  ParameterTensors& g = grads_;
  ActivationTensors& a = acts_;

  if (plan_.last_stage()) {
    // lm head + cross-entropy + their gradient, then the final norm.
    lmhead_ce(targets, dloss, true);
    std::fill(dres_.begin(), dres_.end(), 0.0f);
    const float* last = a.out[dims_.L - 1];
    const float* dlnf = own_tokens(dln_.data());
    cpu::rmsnorm_backward(dres_.data(), g.norm, dlnf, last, w.norm, a.lnf_rstd, int(Nl), C);
    report_ready(-1);
  } else {
    std::memcpy(dres_.data(), doutput, sizeof(float) * size_t(Nl * C));  // from the next stage
  }
  if (precision_ == Precision::fp32)
    backward_layers(mm_f32_);
  else if (float_operands_)
    backward_layers(mm_f32x_);
  else
    backward_layers(mm_bf16_);
  if (!plan_.first_stage()) return;  // dres_ holds the gradient of the stage's input
  if (plan_.tp_size == 1) {
    cpu::embedding_backward(g.wte, dres_.data(), tokens, int(N), C);
    report_ready(dims_.L);
    return;
  }
  const float* dx = all_tokens(dres_.data());
  const int64_t v0 = dims_.vocab_begin, V = dims_.V;
  // This rank's vocabulary rows; tokens in order, so repeated tokens sum as on one rank.
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += 64) {
    const int c1 = std::min(C, c0 + 64);
    for (int64_t n = 0; n < N; n++) {
      const int64_t t = tokens[n] - v0;
      if (t < 0 || t >= V) continue;
      for (int c = c0; c < c1; c++) g.wte[t * C + c] += dx[n * C + c];
    }
  }
  report_ready(dims_.L);
}

template <typename A>
void LlamaModel::backward_layers(const MatmulInputs<A>& m) {
  const LocalDims& d = dims_;
  const int B = B_, T = T_;
  const int N = B * T, Nl = int(stage_tokens(B, T)), C = d.C, F = d.F, H = d.H, Hkv = d.Hkv, D = d.D;
  const int HD = d.HD(), QKV = d.QKV();
  const auto ct = compute_type(precision_);
  const ParameterTensors& w = params_;
  ParameterTensors& g = grads_;
  const ActivationTensors& a = acts_;
  float* dres = dres_.data();  // (Nl, C) gradient of the residual stream, flowing backward
  float* dln = dln_.data();
  A* dh13 = m.dh13;            // (N, 2F)

  for (int l = d.L - 1; l >= 0; l--) {
    recompute_layer(l, m);
    const float* x = l == 0 ? a.x0 : a.out[l - 1];
    const float* wqkv = w.wqkv + int64_t(l) * QKV * C;
    const float* wo = w.wo + int64_t(l) * C * HD;
    const float* w13 = w.w13 + int64_t(l) * 2 * F * C;
    const float* w2 = w.w2 + int64_t(l) * C * F;
    float* dwqkv = g.wqkv + int64_t(l) * QKV * C;
    float* dwo = g.wo + int64_t(l) * C * HD;
    float* dw13 = g.w13 + int64_t(l) * 2 * F * C;
    float* dw2 = g.w2 + int64_t(l) * C * F;

    // dres holds d(out); out = resid + down(hmid), so d(resid) = dres + (MLP branch gradient).
    cpu::matmul_backward(dhmid_.data(), dw2, all_tokens(dres), m.hmid[l], w2, bf16_of(w2), N, F, C, ct);  // down_proj
    cpu::swiglu_backward(dh13, dhmid_.data(), a.h13[l], N, F);                                           // silu(g) * u
    cpu::matmul_backward(dln, dw13, dh13, m.ln2[l], w13, bf16_of(w13), N, C, 2 * F, ct);                 // gate | up
    cpu::rmsnorm_backward(dres, g.ffn_norm + int64_t(l) * C, own_tokens(dln), a.resid[l],
                          w.ffn_norm + int64_t(l) * C, a.ln2_rstd[l], Nl, C);                            // post_attn_ln
    // dres now holds d(resid); resid = x + o_proj(att).
    cpu::matmul_backward(datt_.data(), dwo, all_tokens(dres), a.att[l], wo, bf16_of(wo), N, HD, C, ct);  // o_proj
    cpu::attention_backward(dqkv_.data(), datt_.data(), a.qkv[l], a.att[l], a.lse[l], B, T, H, Hkv, D);
    if constexpr (std::is_same_v<A, bf16_in_f32>) {
      // dqkv's only use is this matmul: rounded to bf16 values in RoPE's pass, it is read as is.
      cpu::rope_backward(dqkv_.data(), pos_.data(), N, H + Hkv, QKV, D, config_.rope_theta, true);     // rotate q, k
      cpu::matmul_backward(dln, dwqkv, reinterpret_cast<const bf16_in_f32*>(dqkv_.data()), m.ln1[l], wqkv,
                           bf16_of(wqkv), N, C, QKV, ct);                                                // q, k, v
    } else {
      cpu::rope_backward(dqkv_.data(), pos_.data(), N, H + Hkv, QKV, D, config_.rope_theta);            // rotate q, k
      cpu::matmul_backward(dln, dwqkv, dqkv_.data(), m.ln1[l], wqkv, bf16_of(wqkv), N, C, QKV, ct);      // q, k, v
    }
    cpu::rmsnorm_backward(dres, g.attn_norm + int64_t(l) * C, own_tokens(dln), x, w.attn_norm + int64_t(l) * C,
                          a.ln1_rstd[l], Nl, C);                                                         // input_ln
    // dres now holds d(x), the gradient of this layer's input.
    report_ready(l);
  }
}

void LlamaModel::logits(float* out) {
  CHECK(B_ > 0, "logits() before forward()");
  CHECK(!is_sharded(), "logits() of a model-parallel rank");
  const int N = B_ * T_;
  cpu::matmul_forward(out, acts_.lnf, params_.wout, bf16_of(params_.wout), N, config_.dim, config_.vocab_size,
                      compute_type(precision_));
}

void LlamaModel::zero_grad() {
  ensure_training_state();
  std::fill(grad_arena_.begin(), grad_arena_.end(), 0.0f);
}

float LlamaModel::optimizer_step(const AdamWConfig& opt, float lr, int step) {
  const float norm = grad_norm();
  optimizer_update(opt, lr, step, norm);
  return norm;
}

float LlamaModel::grad_norm() { return float(std::sqrt(grad_sum_squares(0, num_params_))); }

double LlamaModel::grad_sum_squares(int64_t begin, int64_t end) {
  ensure_training_state();
  CHECK(0 <= begin && begin <= end && end <= num_params_);
  bool all = true;
  for (const ParamSpec& s : specs_) all = all && s.in_norm;
  if (all) return cpu::sum_squares(grad_arena_.data() + begin, end - begin);
  double sum = 0;
  std::vector<float> packed;
  for (const ParamSpec& s : specs_) {
    const int64_t a = std::max(s.offset, begin), b = std::min(s.offset + s.numel, end);
    if (a >= b) continue;
    if (s.in_norm) {
      sum += cpu::sum_squares(grad_arena_.data() + a, b - a);
    } else if (s.owned.numel() > 0) {  // the owned elements of [a, b), packed
      packed.assign(size_t(s.owned.numel()), 0.0f);
      copy_between_shards(packed.data(), s.owned, 0, s.owned.numel(), grad_arena_.data() + a, s.shard, a - s.offset,
                          b - a);
      sum += cpu::sum_squares(packed.data(), s.owned.numel());
    }
  }
  return sum;
}

void LlamaModel::reduce_model_parallel_grads(parallel::Communicator* embedding_group) {
  ensure_training_state();
  if (dims_.kv_replicas > 1) {
    // A replicated kv head's k and v rows got part of their gradient on each replica (from its q
    // heads): sum them over the replicas. Per layer they are one block, after the q rows.
    const int64_t kv_rows = 2 * int64_t(dims_.Hkv) * dims_.D * dims_.C;
    const int64_t qkv = int64_t(dims_.QKV()) * dims_.C, q = int64_t(dims_.HD()) * dims_.C;
    for (int64_t l = 0; l < dims_.L; l++) kv_group_->all_reduce(grads_.wqkv + l * qkv + q, size_t(kv_rows));
  }
  if (plan_.sequence_parallel)  // the norm weights' gradients are partial sums over this rank's tokens
    for (const ParamSpec& s : specs_)
      if (!s.decay) tp_->all_reduce(grad_arena_.data() + s.offset, size_t(s.numel));
  if (embedding_group && embedding_group->size() > 1 && config_.tie_embeddings && grads_.wte)
    embedding_group->all_reduce(grads_.wte, size_t(specs_.front().numel));
}

void LlamaModel::optimizer_update(const AdamWConfig& opt, float lr, int step, float norm) {
  CHECK(step >= 1);
  ensure_training_state();
  float scale = 1.0f;
  if (opt.grad_clip > 0 && norm > opt.grad_clip) scale = float(opt.grad_clip / (double(norm) + 1e-6));
  // Each tensor's part inside the optimizer shard (all of it without ZeRO-1); moments are indexed
  // from the shard's start.
  const int64_t lo = shard_begin_, hi = shard_end();
  for (uint32_t id = 0; id < specs_.size(); id++) {
    const ParamSpec& s = specs_[id];
    const int64_t a = std::max(s.offset, lo), b = std::min(s.offset + s.numel, hi);
    if (a >= b) continue;
    const int64_t n = b - a, k = a - lo;
    const float wd = s.decay ? opt.weight_decay : 0.0f;
    float* p = param_arena_.data() + a;
    const float* gr = grad_arena_.data() + a;
    if (precision_ == Precision::bf16_sr) {
      cpu::adamw_update_bf16_sr(param_bf16_.data() + a, m_bf16_.data() + k, v_bf16_.data() + k, p, gr, n, lr,
                                opt.beta1, opt.beta2, opt.eps, wd, step, scale, seed_, uint32_t(s.full_id),
                                uint64_t(a - s.offset));
    } else if (precision_ == Precision::bf16_mixed && float_operands_) {
      cpu::adamw_update_bf16_copy(p, param_f32x_.data() + a, m_f32_.data() + k, v_f32_.data() + k, gr, n, lr,
                                  opt.beta1, opt.beta2, opt.eps, wd, step, scale);
    } else if (precision_ == Precision::bf16_mixed) {
      cpu::adamw_update_bf16_copy(p, param_bf16_.data() + a, m_f32_.data() + k, v_f32_.data() + k, gr, n, lr,
                                  opt.beta1, opt.beta2, opt.eps, wd, step, scale);
    } else {
      cpu::adamw_update(p, m_f32_.data() + k, v_f32_.data() + k, gr, n, lr, opt.beta1, opt.beta2, opt.eps, wd, step,
                        scale);
    }
  }
}

std::vector<std::pair<int64_t, int64_t>> LlamaModel::ready_ranges(int layer) const {
  std::vector<std::pair<int64_t, int64_t>> out;
  const bool head = layer < 0, embedding = layer >= dims_.L;
  for (const ParamSpec& s : specs_) {
    if (plan_.sequence_parallel && !s.decay) continue;  // norm weights: summed over TP after the backward
    if (dims_.kv_replicas > 1 && s.name == "wqkv") continue;  // replicated kv rows: likewise
    const bool stacked = s.name != "wte" && s.name != "wout" && s.name != "norm";
    if (stacked && !head && !embedding) {
      const int64_t per = s.numel / dims_.L;
      out.emplace_back(s.offset + layer * per, s.offset + (layer + 1) * per);
    } else if (head && (s.name == "norm" || s.name == "wout")) {
      out.emplace_back(s.offset, s.offset + s.numel);
    } else if (embedding && s.name == "wte" && !(config_.tie_embeddings && plan_.pp_size > 1)) {
      out.emplace_back(s.offset, s.offset + s.numel);  // a tied embedding: also complete only here
    }
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> LlamaModel::grad_ready_order() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int l = dims_.L; l >= -1; l--) {
    const int layer = l == dims_.L ? -1 : l == -1 ? dims_.L : l;  // head, L-1 .. 0, embedding
    const auto r = ready_ranges(layer);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

std::vector<StateTensor> LlamaModel::state_tensors() {
  ensure_training_state();
  const bool sr = precision_ == Precision::bf16_sr;
  std::vector<StateTensor> out;
  const int64_t lo = shard_begin_, hi = shard_end();
  for (const ParamSpec& s : specs_) {
    // [a, b) of the arena, stored at `at` of the given arrays.
    auto add = [&](const char* kind, ArenaVector<float>& f32, ArenaVector<bf16>& b16, int64_t a, int64_t b,
                   int64_t at) {
      void* data = sr ? static_cast<void*>(b16.data() + at) : static_cast<void*>(f32.data() + at);
      out.push_back({std::string(kind) + "." + s.name, s.name, sr ? StateDType::bf16 : StateDType::f32, s.shape,
                     data, b - a, a - s.offset, s.shard});
    };
    add("weight", param_arena_, param_bf16_, s.offset, s.offset + s.numel, s.offset);
    const int64_t a = std::max(s.offset, lo), b = std::min(s.offset + s.numel, hi);
    if (a >= b) continue;
    add("exp_avg", m_f32_, m_bf16_, a, b, a - lo);
    add("exp_avg_sq", v_f32_, v_bf16_, a, b, a - lo);
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

int64_t LlamaModel::state_bytes(const LlamaConfig& c, const ShardPlan& plan, Precision p, int optimizer_shards,
                                bool float_operands) {
  // fp32 weights (compute copy) and gradients always; fp32 Adam moments, or bf16 weights and moments
  // in bf16-sr; bf16-mixed adds its matmul copy of the weights (bf16, or bf16_in_f32 with float
  // operands). ZeRO-1 keeps 1/shards of the moments.
  const int64_t n = num_params(c, plan);
  const int64_t moments = p == Precision::bf16_sr ? 4 : 8;  // m and v, per parameter
  const int64_t copy = p == Precision::fp32 ? 0 : p == Precision::bf16_mixed && float_operands ? 4 : 2;
  return n * (8 + copy) + (n + optimizer_shards - 1) / optimizer_shards * moments;
}

int64_t LlamaModel::weight_bytes(const LlamaConfig& c, Precision p) {
  return c.num_params() * (p == Precision::fp32 ? 4 : 6);
}

int64_t LlamaModel::state_bytes() const {
  int64_t bytes =
      int64_t(param_arena_.size() + param_f32x_.size() + grad_arena_.size() + m_f32_.size() + v_f32_.size()) * 4;
  bytes += int64_t(param_bf16_.size() + m_bf16_.size() + v_bf16_.size()) * 2;
  return bytes;
}

// ---- decode with a KV cache (generate) ----

void LlamaModel::reset_cache(int max_T) {
  const LlamaConfig& c = config_;
  CHECK(!is_sharded(), "decoding with a model-parallel rank");
  if (max_T > c.max_seq_len) max_T = c.max_seq_len;
  cache_T_ = max_T;
  const int64_t KV = 2 * int64_t(c.n_kv_heads) * c.head_dim();
  kv_cache_.assign(int64_t(c.n_layers) * max_T * KV, 0.0f);
  dec_x_.assign(c.dim, 0.0f);
  dec_ln_.assign(c.dim, 0.0f);
  dec_qkv_.assign(c.qkv_dim(), 0.0f);
  dec_att_.assign(int64_t(c.n_heads) * c.head_dim(), 0.0f);
  dec_h13_.assign(2 * int64_t(c.ffn_dim), 0.0f);
  dec_hmid_.assign(c.ffn_dim, 0.0f);
  dec_tmp_.assign(c.dim, 0.0f);
  dec_scores_.assign(int64_t(c.n_heads) * max_T, 0.0f);
}

void LlamaModel::decode_step(float* logits, int32_t token, int pos) {
  const LlamaConfig& c = config_;
  CHECK(cache_T_ > 0, "decode_step before reset_cache");
  if (pos >= cache_T_)
    fail("generation length: position {} exceeds the context of {} tokens\nhint: lower --max-new-tokens", pos,
         cache_T_);
  if (token < 0 || token >= c.vocab_size) fail("token id: got {}, expected < vocab_size {}", token, c.vocab_size);
  const int C = c.dim, F = c.ffn_dim, H = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim();
  const int HD = H * D, QKV = c.qkv_dim(), KV = 2 * Hkv * D;
  const auto ct = compute_type(precision_);
  const ParameterTensors& w = params_;
  float rstd;
  const int32_t p32 = pos;
  cpu::embedding_forward(dec_x_.data(), &token, w.wte, 1, C);
  for (int l = 0; l < c.n_layers; l++) {
    const float* wqkv = w.wqkv + int64_t(l) * QKV * C;
    const float* wo = w.wo + int64_t(l) * C * HD;
    const float* w13 = w.w13 + int64_t(l) * 2 * F * C;
    const float* w2 = w.w2 + int64_t(l) * C * F;
    float* cache = kv_cache_.data() + int64_t(l) * cache_T_ * KV;  // (max_T, [k heads | v heads])
    cpu::rmsnorm_forward(dec_ln_.data(), &rstd, dec_x_.data(), w.attn_norm + int64_t(l) * C, 1, C, c.norm_eps);
    cpu::matmul_forward(dec_qkv_.data(), dec_ln_.data(), wqkv, bf16_of(wqkv), 1, C, QKV, ct);
    cpu::rope_forward(dec_qkv_.data(), &p32, 1, H + Hkv, QKV, D, c.rope_theta);
    std::memcpy(cache + int64_t(pos) * KV, dec_qkv_.data() + HD, sizeof(float) * KV);
    // Attention of the one query over cached keys 0..pos, per head (softmax in double for stability).
    const int group = H / Hkv;
    const float scale = 1.0f / std::sqrt(float(D));
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
      const float* q = dec_qkv_.data() + h * D;
      const int kvh = h / group;
      float* s = dec_scores_.data() + int64_t(h) * cache_T_;
      float mx = -INFINITY;
      for (int t = 0; t <= pos; t++) {
        const float* k = cache + int64_t(t) * KV + kvh * D;
        float dot = 0;
        for (int d = 0; d < D; d++) dot += q[d] * k[d];
        s[t] = dot * scale;
        mx = std::max(mx, s[t]);
      }
      double sum = 0;
      for (int t = 0; t <= pos; t++) {
        s[t] = std::exp(s[t] - mx);
        sum += s[t];
      }
      float* o = dec_att_.data() + h * D;
      std::fill(o, o + D, 0.0f);
      for (int t = 0; t <= pos; t++) {
        const float* v = cache + int64_t(t) * KV + Hkv * D + kvh * D;
        const float pr = float(s[t] / sum);
        for (int d = 0; d < D; d++) o[d] += pr * v[d];
      }
    }
    cpu::matmul_forward(dec_tmp_.data(), dec_att_.data(), wo, bf16_of(wo), 1, HD, C, ct);
    cpu::residual_forward(dec_x_.data(), dec_x_.data(), dec_tmp_.data(), C);
    cpu::rmsnorm_forward(dec_ln_.data(), &rstd, dec_x_.data(), w.ffn_norm + int64_t(l) * C, 1, C, c.norm_eps);
    cpu::matmul_forward(dec_h13_.data(), dec_ln_.data(), w13, bf16_of(w13), 1, C, 2 * F, ct);
    cpu::swiglu_forward(dec_hmid_.data(), dec_h13_.data(), 1, F);
    cpu::matmul_forward(dec_tmp_.data(), dec_hmid_.data(), w2, bf16_of(w2), 1, F, C, ct);
    cpu::residual_forward(dec_x_.data(), dec_x_.data(), dec_tmp_.data(), C);
  }
  cpu::rmsnorm_forward(dec_ln_.data(), &rstd, dec_x_.data(), w.norm, 1, C, c.norm_eps);
  cpu::matmul_forward(logits, dec_ln_.data(), w.wout, bf16_of(w.wout), 1, C, c.vocab_size, ct);
}

}  // namespace llamatrain::model
