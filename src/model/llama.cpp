// Llama forward / backward / AdamW over the cpu:: kernels. Forward and backward are mirror images:
// backward calls the same layers in exact reverse order, one kernel per line. The residual-stream
// gradient dres_ flows through in place (rmsnorm_backward accumulates into it).
#include "model/llama.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/cpu/ops.h"

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

std::vector<ParamSpec> build_param_specs(const LlamaConfig& c) {
  const int64_t C = c.dim, L = c.n_layers, V = c.vocab_size, F = c.ffn_dim;
  const int64_t HD = int64_t(c.n_heads) * c.head_dim(), QKV = c.qkv_dim();
  std::vector<ParamSpec> specs = {
      {"wte", {V, C}, 0, 0, true},
      {"attn_norm", {L, C}, 0, 0, false},
      {"wqkv", {L, QKV, C}, 0, 0, true},
      {"wo", {L, C, HD}, 0, 0, true},
      {"ffn_norm", {L, C}, 0, 0, false},
      {"w13", {L, 2 * F, C}, 0, 0, true},
      {"w2", {L, C, F}, 0, 0, true},
      {"norm", {C}, 0, 0, false},
  };
  if (!c.tie_embeddings) specs.push_back({"wout", {V, C}, 0, 0, true});
  int64_t offset = 0;
  for (auto& s : specs) {
    s.numel = 1;
    for (int64_t d : s.shape) s.numel *= d;
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
    : config_(config), precision_(precision), seed_(seed) {
  config_.validate("model");
  specs_ = build_param_specs(config_);
  num_params_ = specs_.back().offset + specs_.back().numel;
  param_arena_.assign(num_params_, 0.0f);
  if (precision_ != Precision::fp32) param_bf16_.assign(num_params_, bf16{0});
  params_ = views(param_arena_.data(), specs_, config_.tie_embeddings);
}

void LlamaModel::ensure_training_state() {
  if (!grad_arena_.empty()) return;
  grad_arena_.assign(num_params_, 0.0f);
  if (precision_ == Precision::bf16_sr) {
    m_bf16_.assign(num_params_, bf16{0});
    v_bf16_.assign(num_params_, bf16{0});
  } else {
    m_f32_.assign(num_params_, 0.0f);
    v_f32_.assign(num_params_, 0.0f);
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
  for (uint32_t id = 0; id < specs_.size(); id++) {
    const ParamSpec& s = specs_[id];
    float* p = param_arena_.data() + s.offset;
    const bool is_norm = !s.decay;
    const float sd = output_std > 0 && (s.name == "wo" || s.name == "w2") ? output_std : std;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < s.numel; i++) p[i] = is_norm ? 1.0f : sd * random_normal(seed_, id, uint64_t(i));
  }
  params_changed();
}

void LlamaModel::params_changed() {
  if (precision_ == Precision::fp32) return;
  bf16_from_float(param_bf16_.data(), param_arena_.data(), num_params_);
  if (precision_ == Precision::bf16_sr) float_from_bf16(param_arena_.data(), param_bf16_.data(), num_params_);
}

const bf16* LlamaModel::bf16_of(const float* param) const {
  if (precision_ == Precision::fp32) return nullptr;
  return param_bf16_.data() + (param - param_arena_.data());
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

ActivationLayout activation_layout(const LlamaConfig& c, Recompute r, int R, int B, int T) {
  const int64_t N = int64_t(B) * T, C = c.dim, L = c.n_layers, F = c.ffn_dim;
  const int64_t HD = int64_t(c.n_heads) * c.head_dim(), QKV = c.qkv_dim();
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
  a.x0 = once(a.floats, N * C);
  a.ln1_rstd = layers(a.floats, N, drop_all);
  a.qkv = layers(a.floats, N * QKV, drop_all);
  a.att = layers(a.floats, N * HD, true);
  a.lse = layers(a.floats, int64_t(B) * c.n_heads * T, true);
  a.resid = layers(a.floats, N * C, drop_all);
  a.ln2_rstd = layers(a.floats, N, drop_all);
  a.h13 = layers(a.floats, N * 2 * F, drop_all);
  a.out = layers(a.floats, N * C, false);
  a.lnf = once(a.floats, N * C);
  a.lnf_rstd = once(a.floats, N);
  a.losses = once(a.floats, N);
  a.ln1 = layers(a.inputs, N * C, true);
  a.ln2 = layers(a.inputs, N * C, true);
  a.hmid = layers(a.inputs, N * F, true);
  a.dh13 = once(a.inputs, N * 2 * F);
  return a;
}

// Floats of the backward's one-layer scratch (dres_, dln_, dqkv_, datt_, dhmid_) and tmp_.
int64_t scratch_floats(const LlamaConfig& c, int B, int T) {
  const int64_t N = int64_t(B) * T, C = c.dim, F = c.ffn_dim;
  const int64_t HD = int64_t(c.n_heads) * c.head_dim(), QKV = c.qkv_dim();
  const int64_t widest = std::max({C, QKV, HD, 2 * F});
  return N * C /*dres*/ + N * widest /*dln*/ + N * QKV + N * HD + N * F /*dhmid*/ + N * C /*tmp*/;
}

template <typename T>
PerLayer<T> at(T* arena, Slot s) {
  return PerLayer<T>{arena + s.scratch, arena + s.base, s.stride, s.first_saved};
}

}  // namespace

int64_t LlamaModel::activation_bytes(const LlamaConfig& c, Precision p, int B, int T, Recompute r,
                                     int recompute_layers) {
  const ActivationLayout a = activation_layout(c, r, recompute_layers, B, T);
  const int64_t matmul_input_bytes = p == Precision::fp32 ? 4 : 2;
  return 4 * (a.floats + scratch_floats(c, B, T)) + matmul_input_bytes * a.inputs;
}

void LlamaModel::set_recompute(Recompute r, int layers) {
  const int L = config_.n_layers;
  const int R = r == Recompute::none ? 0 : layers < 0 || layers > L ? L : layers;
  if (r == recompute_ && R == recompute_layers_) return;
  recompute_ = r;
  recompute_layers_ = R;
  B_ = T_ = 0;  // re-laid out at the next forward
}

void LlamaModel::ensure_activations(int B, int T) {
  if (B == B_ && T == T_) return;
  CHECK(B > 0 && T > 0);
  if (T > config_.max_seq_len)
    fail("sequence length: got {}, expected at most max_position_embeddings = {}\nhint: lower the sequence "
         "length or use a model with longer context",
         T, config_.max_seq_len);
  B_ = B;
  T_ = T;
  const LlamaConfig& c = config_;
  const int64_t N = int64_t(B) * T, C = c.dim, F = c.ffn_dim;
  const int64_t HD = int64_t(c.n_heads) * c.head_dim(), QKV = c.qkv_dim();
  const ActivationLayout lay = activation_layout(c, recompute_, recompute_layers_, B, T);
  act_arena_.assign(lay.floats, 0.0f);
  float* f = act_arena_.data();
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
    arena.assign(lay.inputs, {});
    auto* q = arena.data();
    m.ln1 = at(q, lay.ln1);
    m.ln2 = at(q, lay.ln2);
    m.hmid = at(q, lay.hmid);
    m.dh13 = q + lay.dh13.base;
  };
  if (precision_ == Precision::fp32) {
    mm_arena_bf16_.clear();
    take_inputs(mm_arena_f32_, mm_f32_);
  } else {
    mm_arena_f32_.clear();
    take_inputs(mm_arena_bf16_, mm_bf16_);
  }

  pos_.resize(N);
  for (int64_t n = 0; n < N; n++) pos_[n] = int32_t(n % T);
  const int64_t widest = std::max({C, QKV, HD, 2 * F});
  dres_.assign(N * C, 0.0f);
  dln_.assign(N * widest, 0.0f);
  dqkv_.assign(N * QKV, 0.0f);
  datt_.assign(N * HD, 0.0f);
  dhmid_.assign(N * F, 0.0f);
  tmp_.assign(N * C, 0.0f);
}

void LlamaModel::forward_body(const int32_t* tokens, int B, int T) {
  ensure_activations(B, T);
  const LlamaConfig& c = config_;
  const int N = B * T, C = c.dim;
  for (int n = 0; n < N; n++)
    if (tokens[n] < 0 || tokens[n] >= c.vocab_size)
      fail("token id at position {}: got {}, expected 0 <= id < vocab_size {}\nhint: the data was tokenized "
           "with a different tokenizer than the model's",
           n, tokens[n], c.vocab_size);

  cpu::embedding_forward(acts_.x0, tokens, params_.wte, N, C);  // x = embed_tokens(input_ids)
  if (precision_ == Precision::fp32)
    forward_layers(mm_f32_);
  else
    forward_layers(mm_bf16_);
  const float* last = acts_.out[c.n_layers - 1];
  cpu::rmsnorm_forward(acts_.lnf, acts_.lnf_rstd, last, params_.norm, N, C, c.norm_eps);  // final norm
}

template <typename A>
void LlamaModel::forward_layers(const MatmulInputs<A>& m) {
  for (int l = 0; l < config_.n_layers; l++) forward_layer(l, m, false);
}

template <typename A>
void LlamaModel::forward_layer(int l, const MatmulInputs<A>& m, bool for_backward) {
  const LlamaConfig& c = config_;
  const int B = B_, T = T_;
  const int N = B * T, C = c.dim, F = c.ffn_dim, H = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim();
  const int HD = H * D, QKV = c.qkv_dim();
  const auto ct = compute_type(precision_);
  const ParameterTensors& w = params_;
  const ActivationTensors& a = acts_;
  const float* x = l == 0 ? a.x0 : a.out[l - 1];  // (N, C) layer input
  const float* wqkv = w.wqkv + int64_t(l) * QKV * C;
  const float* wo = w.wo + int64_t(l) * C * HD;
  const float* w13 = w.w13 + int64_t(l) * 2 * F * C;
  const float* w2 = w.w2 + int64_t(l) * C * F;

  cpu::rmsnorm_forward(m.ln1[l], a.ln1_rstd[l], x, w.attn_norm + int64_t(l) * C, N, C, c.norm_eps);  // input_ln
  cpu::matmul_forward(a.qkv[l], m.ln1[l], wqkv, bf16_of(wqkv), N, C, QKV, ct);                       // q, k, v
  cpu::rope_forward(a.qkv[l], pos_.data(), N, H + Hkv, QKV, D, c.rope_theta);                        // rotate q, k
  cpu::attention_forward(a.att[l], a.lse[l], a.qkv[l], B, T, H, Hkv, D);                             // causal GQA
  cpu::matmul_forward(tmp_.data(), a.att[l], wo, bf16_of(wo), N, HD, C, ct);                         // o_proj
  cpu::residual_forward(a.resid[l], x, tmp_.data(), int64_t(N) * C);                                 // h = x + attn
  cpu::rmsnorm_forward(m.ln2[l], a.ln2_rstd[l], a.resid[l], w.ffn_norm + int64_t(l) * C, N, C, c.norm_eps);
  cpu::matmul_forward(a.h13[l], m.ln2[l], w13, bf16_of(w13), N, C, 2 * F, ct);                      // gate | up
  cpu::swiglu_forward(m.hmid[l], a.h13[l], N, F);                                                    // silu(g) * u
  if (for_backward) return;  // the backward needs nothing past this point (out is saved)
  cpu::matmul_forward(tmp_.data(), m.hmid[l], w2, bf16_of(w2), N, F, C, ct);                         // down_proj
  cpu::residual_forward(a.out[l], a.resid[l], tmp_.data(), int64_t(N) * C);                          // h + mlp
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
  const LlamaConfig& c = config_;
  const int N = B_ * T_, C = c.dim;
  const ParameterTensors& w = params_;
  const ActivationTensors& a = acts_;
  const float* x = l == 0 ? a.x0 : a.out[l - 1];
  cpu::rmsnorm_forward(m.ln1[l], a.ln1_rstd[l], x, w.attn_norm + int64_t(l) * C, N, C, c.norm_eps);
  cpu::attention_forward(a.att[l], a.lse[l], a.qkv[l], B_, T_, c.n_heads, c.n_kv_heads, c.head_dim());
  cpu::rmsnorm_forward(m.ln2[l], a.ln2_rstd[l], a.resid[l], w.ffn_norm + int64_t(l) * C, N, C, c.norm_eps);
  cpu::swiglu_forward(m.hmid[l], a.h13[l], N, c.ffn_dim);
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
  forward_body(tokens, B, T);
  StepStats stats;
  if (targets == nullptr) return stats;
  stats.num_valid = count_valid(targets);
  cpu::lmhead_ce_fused(acts_.losses, nullptr, nullptr, acts_.lnf, params_.wout, bf16_of(params_.wout), targets,
                       0.0f, B * T, config_.dim, config_.vocab_size, compute_type(precision_));
  stats.loss = mean_loss(stats.num_valid);
  return stats;
}

StepStats LlamaModel::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                                       float grad_scale) {
  forward_body(tokens, B, T);
  StepStats stats;
  stats.num_valid = count_valid(targets);
  const float dloss = stats.num_valid > 0 ? grad_scale / float(stats.num_valid) : 0.0f;
  ensure_training_state();
  backward(tokens, targets, dloss);  // the fused lm head computes the losses on its way
  stats.loss = mean_loss(stats.num_valid);
  return stats;
}

void LlamaModel::backward(const int32_t* tokens, const int32_t* targets, float dloss) {
  const LlamaConfig& c = config_;
  const int N = B_ * T_, C = c.dim;
  const ParameterTensors& w = params_;
  ParameterTensors& g = grads_;
  ActivationTensors& a = acts_;

  // lm head + cross-entropy + their gradient in one pass over row chunks, then the final norm.
  cpu::lmhead_ce_fused(a.losses, dln_.data(), g.wout, a.lnf, w.wout, bf16_of(w.wout), targets, dloss, N, C,
                       c.vocab_size, compute_type(precision_));
  std::fill(dres_.begin(), dres_.end(), 0.0f);
  const float* last = a.out[c.n_layers - 1];
  cpu::rmsnorm_backward(dres_.data(), g.norm, dln_.data(), last, w.norm, a.lnf_rstd, N, C);
  if (precision_ == Precision::fp32)
    backward_layers(mm_f32_);
  else
    backward_layers(mm_bf16_);
  cpu::embedding_backward(g.wte, dres_.data(), tokens, N, C);
}

template <typename A>
void LlamaModel::backward_layers(const MatmulInputs<A>& m) {
  const LlamaConfig& c = config_;
  const int B = B_, T = T_;
  const int N = B * T, C = c.dim, F = c.ffn_dim, H = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim();
  const int HD = H * D, QKV = c.qkv_dim();
  const auto ct = compute_type(precision_);
  const ParameterTensors& w = params_;
  ParameterTensors& g = grads_;
  const ActivationTensors& a = acts_;
  float* dres = dres_.data();  // (N, C) gradient of the residual stream, flowing backward
  float* dln = dln_.data();
  A* dh13 = m.dh13;            // (N, 2F)

  for (int l = c.n_layers - 1; l >= 0; l--) {
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
    cpu::matmul_backward(dhmid_.data(), dw2, dres, m.hmid[l], w2, bf16_of(w2), N, F, C, ct);        // down_proj
    cpu::swiglu_backward(dh13, dhmid_.data(), a.h13[l], N, F);                                     // silu(g) * u
    cpu::matmul_backward(dln, dw13, dh13, m.ln2[l], w13, bf16_of(w13), N, C, 2 * F, ct);           // gate | up
    cpu::rmsnorm_backward(dres, g.ffn_norm + int64_t(l) * C, dln, a.resid[l], w.ffn_norm + int64_t(l) * C,
                          a.ln2_rstd[l], N, C);                                                    // post_attn_ln
    // dres now holds d(resid); resid = x + o_proj(att).
    cpu::matmul_backward(datt_.data(), dwo, dres, a.att[l], wo, bf16_of(wo), N, HD, C, ct);        // o_proj
    cpu::attention_backward(dqkv_.data(), datt_.data(), a.qkv[l], a.att[l], a.lse[l], B, T, H, Hkv, D);
    cpu::rope_backward(dqkv_.data(), pos_.data(), N, H + Hkv, QKV, D, c.rope_theta);               // rotate q, k
    cpu::matmul_backward(dln, dwqkv, dqkv_.data(), m.ln1[l], wqkv, bf16_of(wqkv), N, C, QKV, ct);  // q, k, v
    cpu::rmsnorm_backward(dres, g.attn_norm + int64_t(l) * C, dln, x, w.attn_norm + int64_t(l) * C,
                          a.ln1_rstd[l], N, C);                                                    // input_ln
    // dres now holds d(x), the gradient of this layer's input.
  }
}

void LlamaModel::logits(float* out) {
  CHECK(B_ > 0, "logits() before forward()");
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

float LlamaModel::grad_norm() {
  ensure_training_state();
  return float(std::sqrt(cpu::sum_squares(grad_arena_.data(), num_params_)));
}

void LlamaModel::optimizer_update(const AdamWConfig& opt, float lr, int step, float norm) {
  CHECK(step >= 1);
  ensure_training_state();
  float scale = 1.0f;
  if (opt.grad_clip > 0 && norm > opt.grad_clip) scale = float(opt.grad_clip / (double(norm) + 1e-6));
  for (uint32_t id = 0; id < specs_.size(); id++) {
    const ParamSpec& s = specs_[id];
    const float wd = s.decay ? opt.weight_decay : 0.0f;
    float* p = param_arena_.data() + s.offset;
    const float* gr = grad_arena_.data() + s.offset;
    if (precision_ == Precision::bf16_sr) {
      cpu::adamw_update_bf16_sr(param_bf16_.data() + s.offset, m_bf16_.data() + s.offset, v_bf16_.data() + s.offset,
                                p, gr, s.numel, lr, opt.beta1, opt.beta2, opt.eps, wd, step, scale, seed_, id);
    } else if (precision_ == Precision::bf16_mixed) {
      cpu::adamw_update_bf16_copy(p, param_bf16_.data() + s.offset, m_f32_.data() + s.offset, v_f32_.data() + s.offset,
                                  gr, s.numel, lr, opt.beta1, opt.beta2, opt.eps, wd, step, scale);
    } else {
      cpu::adamw_update(p, m_f32_.data() + s.offset, v_f32_.data() + s.offset, gr, s.numel, lr, opt.beta1,
                        opt.beta2, opt.eps, wd, step, scale);
    }
  }
}

std::vector<StateTensor> LlamaModel::state_tensors() {
  ensure_training_state();
  const bool sr = precision_ == Precision::bf16_sr;
  std::vector<StateTensor> out;
  for (const ParamSpec& s : specs_) {
    auto add = [&](const char* kind, ArenaVector<float>& f32, ArenaVector<bf16>& b16) {
      void* data = sr ? static_cast<void*>(b16.data() + s.offset) : static_cast<void*>(f32.data() + s.offset);
      out.push_back({std::string(kind) + "." + s.name, s.name, sr ? StateDType::bf16 : StateDType::f32, s.shape,
                     data, s.numel});
    };
    add("weight", param_arena_, param_bf16_);
    add("exp_avg", m_f32_, m_bf16_);
    add("exp_avg_sq", v_f32_, v_bf16_);
  }
  return out;
}

int64_t LlamaModel::state_bytes(const LlamaConfig& c, Precision p) {
  // fp32 weights (compute copy) and gradients always; fp32 Adam moments, or bf16 weights and moments
  // in bf16-sr; bf16-mixed adds the bf16 weight copy to fp32's.
  const int64_t per_param = p == Precision::fp32 ? 16 : p == Precision::bf16_mixed ? 18 : 14;
  return c.num_params() * per_param;
}

int64_t LlamaModel::weight_bytes(const LlamaConfig& c, Precision p) {
  return c.num_params() * (p == Precision::fp32 ? 4 : 6);
}

int64_t LlamaModel::state_bytes() const {
  int64_t bytes = int64_t(param_arena_.size() + grad_arena_.size() + m_f32_.size() + v_f32_.size()) * 4;
  bytes += int64_t(param_bf16_.size() + m_bf16_.size() + v_bf16_.size()) * 2;
  return bytes;
}

// ---- decode with a KV cache (generate) ----

void LlamaModel::reset_cache(int max_T) {
  const LlamaConfig& c = config_;
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
