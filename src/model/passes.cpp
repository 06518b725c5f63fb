// Llama forward / backward over the model's backend (k_, model/backend.h), one kernel call per
// line. Forward and backward are mirror images: backward calls the same layers in exact reverse
// order. The residual-stream gradient dres_ flows through in place (rmsnorm_backward accumulates
// into it). Tensor and sequence parallelism enter only through the steps at the top (identity on one
// rank), at the points Megatron puts its communication pairs (parallel/comm_pairs.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/llama.h"
#include "parallel/comm_pairs.h"
#include "parallel/communicator.h"

namespace llamatrain::model {

// ---- tensor / sequence parallel steps (identity on a single rank) ----

void LlamaModel::norm_for_matmul(Operand out, float* rstd, const float* x, const float* weight) {
  const int64_t N = int64_t(B_) * T_, Nl = stage_tokens(B_, T_);
  const int C = dims_.C;
  if (!plan_.sequence_parallel) {  // copy_to_tp: the replicated norm output feeds the column-parallel matmul
    k_.rmsnorm_forward(out, rstd, x, weight, int(N), C, config_.norm_eps);
    return;
  }
  k_.rmsnorm_forward(Operand{sp_ln_.data()}, rstd, x, weight, int(Nl), C, config_.norm_eps);
  gather_norm_output(out.p, k_.operand_bytes());
}

void LlamaModel::norm_for_matmul(float* out, float* rstd, const float* x, const float* weight) {
  const int64_t N = int64_t(B_) * T_, Nl = stage_tokens(B_, T_);
  const int C = dims_.C;
  if (!plan_.sequence_parallel) {
    k_.rmsnorm_forward(out, rstd, x, weight, int(N), C, config_.norm_eps);
    return;
  }
  k_.rmsnorm_forward(reinterpret_cast<float*>(sp_ln_.data()), rstd, x, weight, int(Nl), C, config_.norm_eps);
  gather_norm_output(out, sizeof(float));
}

void LlamaModel::gather_norm_output(void* out, size_t bytes) {
  // gather_from_sp: this rank's tokens, then all of them. A gather moves bits only, so any operand
  // form travels as floats (bf16 as pairs packed in floats: C is even).
  const int64_t Nl = stage_tokens(B_, T_), C = dims_.C;
  parallel::gather_from_sp_forward(static_cast<float*>(out), reinterpret_cast<const float*>(sp_ln_.data()), size_t(Nl),
                                   size_t(C) * bytes / sizeof(float), *tp_);
}

void LlamaModel::add_to_residual(float* out, const float* x, float* partial) {
  const int64_t N = int64_t(B_) * T_, Nl = stage_tokens(B_, T_), C = dims_.C;
  if (plan_.tp_size == 1) {
    k_.residual_forward(out, x, partial, N * C);
  } else if (plan_.sequence_parallel) {
    parallel::reduce_scatter_to_sp_forward(sp_tmp_.data(), partial, size_t(Nl), size_t(C), *tp_);
    k_.residual_forward(out, x, sp_tmp_.data(), Nl * C);
  } else {
    parallel::reduce_from_tp_forward(partial, partial, size_t(N * C), *tp_);
    k_.residual_forward(out, x, partial, N * C);
  }
}

void LlamaModel::add_to_residual_and_norm(float* out, Operand normed, float* rstd, const float* x, float* partial,
                                          const float* weight) {
  if (plan_.tp_size == 1) {  // one pass where the backend fuses them
    k_.residual_rmsnorm_forward(out, normed, rstd, x, partial, weight, B_ * T_, dims_.C, config_.norm_eps);
    return;
  }
  add_to_residual(out, x, partial);
  norm_for_matmul(normed, rstd, out, weight);
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
    k_.copy_from_host(acts_.x0, input, sizeof(float) * size_t(Nl * C));  // the previous stage's output
  } else {
    check_tokens(tokens);
    tokens = device_ids(tokens_, tokens);
    if (plan_.tp_size == 1) {
      k_.embedding_forward(acts_.x0, tokens, params_.wte, int(N), int(C));  // x = embed_tokens(input_ids)
    } else {
      // Vocabulary-parallel embedding: this rank's rows, zeros for the others' tokens, summed over TP.
      float* part = tmp_.data();
      k_.vocab_parallel_embedding_forward(part, tokens, params_.wte, dims_.vocab_begin, dims_.V_valid, int(N), int(C));
      if (plan_.sequence_parallel)
        parallel::reduce_scatter_to_sp_forward(acts_.x0, part, size_t(Nl), size_t(C), *tp_);
      else
        parallel::reduce_from_tp_forward(acts_.x0, part, size_t(N * C), *tp_);
    }
  }
  for (int l = 0; l < dims_.L; l++) forward_layer(l, false);
  if (!plan_.last_stage()) return;
  const float* last = acts_.out[dims_.L - 1];
  norm_for_matmul(acts_.lnf, acts_.lnf_rstd, last, params_.norm);  // final norm (all tokens: the lm head's input)
}

const int32_t* LlamaModel::device_ids(Buffer<int32_t>& staging, const int32_t* host) {
  const int64_t N = int64_t(B_) * T_;
  if (!k_.host_memory() && int64_t(staging.size()) < N) staging.assign_zero(N);
  return k_.input_ids(staging.data(), host, N);
}

void LlamaModel::forward_layer(int l, bool for_backward) {
  const LocalDims& d = dims_;
  const int B = B_, T = T_;
  const int N = B * T, C = d.C, F = d.F, H = d.H, Hkv = d.Hkv, D = d.D;
  const int HD = d.HD(), QKV = d.QKV();
  const ParameterTensors& w = params_;
  const ActivationTensors& a = acts_;
  const MatmulInputs& m = mm_;
  const float* x = l == 0 ? a.x0 : a.out[l - 1];  // (Nl, C) layer input
  const float* wqkv = w.wqkv + int64_t(l) * QKV * C;
  const float* wo = w.wo + int64_t(l) * C * HD;
  const float* w13 = w.w13 + int64_t(l) * 2 * F * C;
  const float* w2 = w.w2 + int64_t(l) * C * F;

  // On one rank the forward's residual adds carry the next norm with them (fused where the backend can).
  const bool fused = plan_.tp_size == 1 && !for_backward;
  if (!fused || l == 0) norm_for_matmul(m.ln1[l], a.ln1_rstd[l], x, w.attn_norm + int64_t(l) * C);  // input_ln
  k_.matmul_forward(a.qkv[l], m.ln1[l], wqkv, N, C, QKV);                                           // q, k, v
  if (w.bqkv) k_.bias_forward(a.qkv[l], w.bqkv + int64_t(l) * QKV, N, QKV);                         // + q, k, v biases
  k_.rope_forward(a.qkv[l], positions(), N, H + Hkv, QKV, D, config_.rope_freqs());                 // rotate q, k
  k_.attention_forward(a.att[l], a.lse[l], a.qkv[l], B, T, H, Hkv, D, config_.sliding_window,
                       doc_start());                       // causal GQA
  k_.matmul_forward(tmp_.data(), a.att[l], wo, N, HD, C);  // o_proj
  add_to_residual_and_norm(a.resid[l], m.ln2[l], a.ln2_rstd[l], x, tmp_.data(),
                           w.ffn_norm + int64_t(l) * C);    // h = x + attn; post_attn_ln
  k_.matmul_forward(a.h13[l], m.ln2[l], w13, N, C, 2 * F);  // gate | up
  k_.swiglu_forward(m.hmid[l], a.h13[l], N, F);             // silu(g) * u
  if (for_backward) return;                                 // the backward needs nothing past this point (out is saved)
  k_.matmul_forward(tmp_.data(), m.hmid[l], w2, N, F, C);   // down_proj
  if (fused && l + 1 < d.L)                                 // h + mlp; the next layer's input_ln
    add_to_residual_and_norm(a.out[l], m.ln1[l + 1], a.ln1_rstd[l + 1], a.resid[l], tmp_.data(),
                             w.attn_norm + int64_t(l + 1) * C);
  else
    add_to_residual(a.out[l], a.resid[l], tmp_.data());  // h + mlp
}

void LlamaModel::recompute_layer(int l) {
  if (l >= recompute_layers_) return;
  if (recompute_ == Recompute::full) {
    forward_layer(l, true);
    return;
  }
  if (recompute_ != Recompute::selective) return;
  // The saved matmul outputs (qkv with RoPE, resid, h13) feed the same kernels as in the forward.
  const LocalDims& d = dims_;
  const int N = B_ * T_, C = d.C;
  const ParameterTensors& w = params_;
  const ActivationTensors& a = acts_;
  const MatmulInputs& m = mm_;
  const float* x = l == 0 ? a.x0 : a.out[l - 1];
  norm_for_matmul(m.ln1[l], a.ln1_rstd[l], x, w.attn_norm + int64_t(l) * C);
  k_.attention_forward(a.att[l], a.lse[l], a.qkv[l], B_, T_, d.H, d.Hkv, d.D, config_.sliding_window, doc_start());
  norm_for_matmul(m.ln2[l], a.ln2_rstd[l], a.resid[l], w.ffn_norm + int64_t(l) * C);
  k_.swiglu_forward(m.hmid[l], a.h13[l], N, d.F);
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
  const double sum = k_.sum(acts_.losses, int64_t(B_) * T_);
  return num_valid > 0 ? float(sum / double(num_valid)) : 0.0f;
}

StepStats LlamaModel::forward(const int32_t* tokens, const int32_t* targets, int B, int T, const Documents& docs) {
  CHECK(plan_.pp_size == 1, "forward() on a pipeline stage: use stage_forward / stage_loss");
  ensure_activations(B, T);
  use_slot(0);
  set_documents(0, docs);
  forward_body(tokens, nullptr, B, T);
  StepStats stats;
  if (targets == nullptr) return stats;
  return stage_loss(0, targets);
}

StepStats LlamaModel::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float grad_scale,
                                       const Documents& docs) {
  CHECK(plan_.pp_size == 1, "forward_backward() on a pipeline stage: use stage_forward / stage_backward");
  stage_forward(0, tokens, nullptr, B, T, docs);
  return stage_backward(0, tokens, targets, nullptr, grad_scale);
}

void LlamaModel::stage_forward(int slot, const int32_t* tokens, const float* input, int B, int T,
                               const Documents& docs) {
  CHECK(plan_.first_stage() ? tokens != nullptr : input != nullptr);
  ensure_activations(B, T);
  use_slot(slot);
  set_documents(slot, docs);
  forward_body(tokens, input, B, T);
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
  targets = device_ids(targets_, targets);
  if (plan_.tp_size > 1) {
    vocab_parallel_lmhead_ce(targets, dloss, backward);
    return;
  }
  // lm head + cross-entropy (+ their gradient) in one pass over row chunks, over the vocab_size real
  // rows of wout: the padding rows after them get no logit and no gradient.
  if (backward)
    k_.lmhead_ce_backward(acts_.losses, dln_.data(), grads_.wout, acts_.lnf, params_.wout, targets, dloss, N,
                          config_.dim, config_.vocab_size);
  else
    k_.lmhead_ce_forward(acts_.losses, acts_.lnf, params_.wout, targets, N, config_.dim, config_.vocab_size);
}

void LlamaModel::vocab_parallel_lmhead_ce(const int32_t* targets, float dloss, bool backward) {
  // Megatron's vocab-parallel cross-entropy: each rank has the logits of its real vocabulary rows
  // (V_valid of its padded V/TP; the padding rows after them get no logit, so they are in no max
  // and no sum, and no gradient); the row maxima, the sums of exponentials and the target logits are
  // combined over TP (kernels: ref::vocab_parallel_ce_*). A rank of padding rows only has maxima of
  // -inf and sums of 0.
  const int N = B_ * T_, V = dims_.V_valid, C = dims_.C;
  const int64_t v0 = dims_.vocab_begin;
  float* logits = logits_.data();  // (N, V), then their exponentials, then dlogits
  if (V > 0) k_.matmul_forward(logits, acts_.lnf, params_.wout, N, C, V);
  float* local_max = row_max_.data() + int64_t(tp_->rank()) * N;
  k_.vocab_parallel_ce_max(local_max, logits, N, V);
  tp_->all_gather(row_max_.data(), local_max, size_t(N));  // in place: (TP, N)
  float* partials = row_stats_.data();                     // (N, 2) sum of exponentials, target logit
  float* global_max = row_stats_.data() + 2 * int64_t(N);  // (N)
  k_.vocab_parallel_ce_partials(partials, global_max, logits, row_max_.data(), plan_.tp_size, targets, v0, N, V);
  tp_->all_reduce(partials, size_t(2 * N));
  k_.vocab_parallel_ce_forward(acts_.losses, global_max, partials, targets, N);
  if (!backward) return;
  // dlogits in place of the exponentials (bf16 values in bf16 compute, as the fused kernel's); then the
  // lm head's backward, whose input gradient is this rank's part of the sum over the vocabulary
  // (own_tokens reduces it).
  k_.vocab_parallel_ce_backward(logits, partials, targets, v0, dloss, N, V);
  if (V == 0) {
    k_.zero(dln_.data(), sizeof(float) * size_t(N) * C);
    return;
  }
  k_.matmul_backward(dln_.data(), grads_.wout, logits, acts_.lnf, params_.wout, N, C, V);
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
    k_.zero(dres_.data(), dres_.size() * sizeof(float));
    const float* last = a.out[dims_.L - 1];
    const float* dlnf = own_tokens(dln_.data());
    k_.rmsnorm_backward(dres_.data(), g.norm, dlnf, last, w.norm, a.lnf_rstd, int(Nl), C);
    report_ready(-1);
  } else {
    k_.copy_from_host(dres_.data(), doutput, sizeof(float) * size_t(Nl * C));  // from the next stage
  }
  // The embedding and every layer tensor frozen (model.freeze): nothing before the head trains, and
  // a first stage has no earlier stage to pass the gradient to.
  if (plan_.first_stage() && !g.wte && !g.attn_norm && !g.wqkv && !g.bqkv && !g.wo && !g.ffn_norm && !g.w13 && !g.w2)
    return;
  backward_layers();
  if (!plan_.first_stage()) return;  // dres_ holds the gradient of the stage's input
  if (g.wte == nullptr) return;      // a frozen embedding
  tokens = device_ids(tokens_, tokens);
  if (plan_.tp_size == 1) {
    k_.embedding_backward(g.wte, dres_.data(), tokens, int(N), C);
    report_ready(dims_.L);
    return;
  }
  const float* dx = all_tokens(dres_.data());  // this rank's vocabulary rows of the embedding
  k_.vocab_parallel_embedding_backward(g.wte, dx, tokens, dims_.vocab_begin, dims_.V_valid, int(N), C);
  report_ready(dims_.L);
}

void LlamaModel::backward_layers() {
  const LocalDims& d = dims_;
  const int B = B_, T = T_;
  const int N = B * T, Nl = int(stage_tokens(B, T)), C = d.C, F = d.F, H = d.H, Hkv = d.Hkv, D = d.D;
  const int HD = d.HD(), QKV = d.QKV();
  const ParameterTensors& w = params_;
  ParameterTensors& g = grads_;
  const ActivationTensors& a = acts_;
  const MatmulInputs& m = mm_;
  float* dres = dres_.data();  // (Nl, C) gradient of the residual stream, flowing backward
  float* dln = dln_.data();
  const Operand dh13 = m.dh13;  // (N, 2F)

  for (int l = d.L - 1; l >= 0; l--) {
    recompute_layer(l);
    const float* x = l == 0 ? a.x0 : a.out[l - 1];
    const float* wqkv = w.wqkv + int64_t(l) * QKV * C;
    const float* wo = w.wo + int64_t(l) * C * HD;
    const float* w13 = w.w13 + int64_t(l) * 2 * F * C;
    const float* w2 = w.w2 + int64_t(l) * C * F;
    // Frozen tensors have no gradient (nullptr), and a frozen layer of a trainable one gets none:
    // their kernels compute the input gradient only (the layer's gradient stays zero).
    auto layer_grad = [&](float* base, int64_t per_layer, const char* name) {
      return base && !layer_frozen(name, l) ? base + l * per_layer : nullptr;
    };
    float* dwqkv = layer_grad(g.wqkv, int64_t(QKV) * C, "wqkv");
    float* dbqkv = layer_grad(g.bqkv, QKV, "bqkv");
    float* dwo = layer_grad(g.wo, int64_t(C) * HD, "wo");
    float* dw13 = layer_grad(g.w13, int64_t(2) * F * C, "w13");
    float* dw2 = layer_grad(g.w2, int64_t(C) * F, "w2");
    float* dffn_norm = layer_grad(g.ffn_norm, C, "ffn_norm");
    float* dattn_norm = layer_grad(g.attn_norm, C, "attn_norm");

    // dres holds d(out); out = resid + down(hmid), so d(resid) = dres + (MLP branch gradient).
    k_.matmul_backward(dhmid_.data(), dw2, all_tokens(dres), m.hmid[l], w2, N, F, C);  // down_proj
    k_.swiglu_backward(dh13, dhmid_.data(), a.h13[l], N, F);                           // silu(g) * u
    k_.matmul_backward(dln, dw13, dh13, m.ln2[l], w13, N, C, 2 * F);                   // gate | up
    k_.rmsnorm_backward(dres, dffn_norm, own_tokens(dln), a.resid[l], w.ffn_norm + int64_t(l) * C, a.ln2_rstd[l], Nl,
                        C);  // post_attn_ln
    // dres now holds d(resid); resid = x + o_proj(att).
    k_.matmul_backward(datt_.data(), dwo, all_tokens(dres), a.att[l], wo, N, HD, C);  // o_proj
    k_.attention_backward(dqkv_.data(), datt_.data(), a.qkv[l], a.att[l], a.lse[l], B, T, H, Hkv, D,
                          config_.sliding_window, doc_start());
    // Without a bias gradient, dqkv's only use is the next matmul: RoPE's pass may leave it in the
    // operand form's values. The bias (added before RoPE) takes the gradient of the pre-RoPE qkv.
    k_.rope_backward(dqkv_.data(), positions(), N, H + Hkv, QKV, D, config_.rope_freqs(), !dbqkv);  // rotate q, k
    if (dbqkv) k_.bias_backward(dbqkv, dqkv_.data(), N, QKV);                                       // q, k, v biases
    const MatIn dqkv = dbqkv ? MatIn(dqkv_.data()) : MatIn::prepared(dqkv_.data());
    k_.matmul_backward(dln, dwqkv, dqkv, m.ln1[l], wqkv, N, C, QKV);  // q, k, v
    k_.rmsnorm_backward(dres, dattn_norm, own_tokens(dln), x, w.attn_norm + int64_t(l) * C, a.ln1_rstd[l], Nl,
                        C);  // input_ln
    // dres now holds d(x), the gradient of this layer's input.
    report_ready(l);
  }
}

void LlamaModel::sequence_loss_sums(double* out) const {
  CHECK(B_ > 0 && plan_.last_stage(), "sequence_loss_sums() before a loss, or off the last stage");
  for (int b = 0; b < B_; b++) out[b] = k_.sum(acts_.losses + int64_t(b) * T_, T_);
}

void LlamaModel::logits(float* out) {
  CHECK(B_ > 0, "logits() before forward()");
  CHECK(!is_sharded(), "logits() of a model-parallel rank");
  const int N = B_ * T_, V = config_.vocab_size;
  if (k_.host_memory()) {
    k_.matmul_forward(out, acts_.lnf, params_.wout, N, config_.dim, V);
    return;
  }
  Buffer<float> dev(&k_);
  dev.assign_zero(int64_t(N) * V);
  k_.matmul_forward(dev.data(), acts_.lnf, params_.wout, N, config_.dim, V);
  k_.copy_to_host(out, dev.data(), sizeof(float) * size_t(N) * V);
}

void LlamaModel::logits_rows(float* out, const int64_t* rows, int n) {
  CHECK(B_ > 0, "logits_rows() before forward()");
  CHECK(!is_sharded(), "logits_rows() of a model-parallel rank");
  const int C = config_.dim, V = config_.vocab_size;
  // Gather the rows' final-norm outputs (n, C), then one lm-head matmul over them.
  Buffer<float> x(&k_), logits(&k_);
  x.assign_zero(int64_t(n) * C);
  for (int i = 0; i < n; i++) {
    CHECK(rows[i] >= 0 && rows[i] < int64_t(B_) * T_, "logits_rows(): row {} outside the batch", rows[i]);
    k_.copy(x.data() + int64_t(i) * C, acts_.lnf + rows[i] * C, sizeof(float) * size_t(C));
  }
  logits.assign_zero(int64_t(n) * V);
  k_.matmul_forward(logits.data(), x.data(), params_.wout, n, C, V);
  k_.copy_to_host(out, logits.data(), sizeof(float) * size_t(n) * V);
}

}  // namespace llamatrain::model
