// Where a micro-batch's activations live (ActivationLayout: one layout both sizes the arenas and
// answers activation_bytes(), so the analytic figure is the allocation), the arenas' allocation per
// (B, T), recompute and pipeline slots, and MemoryPlan (model/memory.h).
#include <algorithm>

#include <vector>

#include "core/error.h"
#include "model/machine.h"
#include "model/llama.h"
#include "model/memory.h"

namespace llamatrain::model {

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
// tensor parallelism, the sequence-parallel and vocabulary-parallel scratch (the norm output before
// its all-gather is held as floats, the widest form, whichever form it is in).
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

int64_t LlamaModel::activation_bytes(const LlamaConfig& c, Precision p, int B, int T, Recompute r, int recompute_layers,
                                     bool float_operands) {
  return activation_bytes(c, ShardPlan::single(c), p, B, T, r, recompute_layers, 1, float_operands);
}

int64_t LlamaModel::activation_bytes(const LlamaConfig& c, const ShardPlan& plan, Precision p, int B, int T,
                                     Recompute r, int recompute_layers, int slots, bool float_operands) {
  const LocalDims d = local_dims(c, plan);
  const int64_t N = int64_t(B) * T, Nl = plan.sequence_parallel ? N / plan.tp_size : N;
  const ActivationLayout a = activation_layout(d, r, recompute_layers, B, T, Nl);
  const int64_t matmul_input_bytes = p == Precision::fp32 || float_operands ? 4 : 2;
  return 4 * (a.floats * slots + scratch_floats(d, B, T, Nl, plan.tp_size > 1)) + matmul_input_bytes * a.inputs * slots;
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

namespace {

// (B, T) positions 0..T-1 of every sequence: a micro-batch of one document per sequence.
std::vector<int32_t> sequence_positions(int B, int T) {
  std::vector<int32_t> pos(static_cast<size_t>(B) * size_t(T));
  for (size_t n = 0; n < pos.size(); n++) pos[n] = int32_t(n % size_t(T));
  return pos;
}

}  // namespace

void LlamaModel::ensure_activations(int B, int T) {
  if (B == B_ && T == T_) return;
  CHECK(B > 0 && T > 0);
  config_.check_seq_len(T);
  plan_.check_micro_batch(B, T);
  const int64_t N = int64_t(B) * T;
  B_ = B;
  T_ = T;
  const LocalDims& d = dims_;
  const int64_t Nl = stage_tokens(B, T), C = d.C, F = d.F;
  const int64_t HD = d.HD(), QKV = d.QKV();
  const ActivationLayout lay = activation_layout(d, recompute_, recompute_layers_, B, T, Nl);
  slot_floats_ = lay.floats;
  slot_inputs_ = lay.inputs;
  act_arena_.assign_zero(lay.floats * slots_);
  choose_operand_form(N);
  mm_arena_.assign_zero(lay.inputs * slots_ * int64_t(k_.operand_bytes()));
  use_slot(0);

  // Every slot starts with one document per sequence at positions 0..T-1 (set_documents changes a slot).
  const std::vector<int32_t> pos = sequence_positions(B, T);
  pos_.assign_zero(N * slots_);
  doc_.assign_zero(N * slots_);
  for (int s = 0; s < slots_; s++) k_.copy_from_host(pos_.data() + s * N, pos.data(), sizeof(int32_t) * size_t(N));
  slot_layout_.assign(size_t(slots_), SlotLayout{});
  const int64_t widest = std::max({C, QKV, HD, 2 * F});
  dres_.assign_zero(Nl * C);
  dln_.assign_zero(N * widest);
  dqkv_.assign_zero(N * QKV);
  datt_.assign_zero(N * HD);
  dhmid_.assign_zero(N * F);
  tmp_.assign_zero(N * C);
  if (plan_.tp_size > 1) {
    sp_ln_.assign_zero(Nl * C * int64_t(sizeof(float)));  // a norm output as floats or operands
    sp_tmp_.assign_zero(Nl * C);
    logits_.assign_zero(N * d.V);
    row_max_.assign_zero(N * plan_.tp_size);
    row_stats_.assign_zero(3 * N);
  }
}

void LlamaModel::set_documents(int slot, const Documents& docs) {
  const int B = B_, T = T_;
  const int64_t N = int64_t(B) * T;
  // Both checked before anything changes: a refused micro-batch leaves the slot as it was.
  if (docs.positions != nullptr)
    for (int64_t n = 0; n < N; n++)
      if (docs.positions[n] < 0 || docs.positions[n] >= T)
        fail("position id {} at token {} of a micro-batch: expected 0 <= position < seq_length {}", docs.positions[n],
             n, T);
  if (docs.doc_start != nullptr)
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        const int32_t d = docs.doc_start[int64_t(b) * T + t];
        if (d != t && (t == 0 || d != docs.doc_start[int64_t(b) * T + t - 1]))
          fail("document start {} at token {} of sequence {}: expected {} (a new document) or the previous token's "
               "document start",
               d, t, b, t);
      }
  SlotLayout& lay = slot_layout_[size_t(slot)];
  if (docs.positions != nullptr) {
    k_.copy_from_host(pos_.data() + slot * N, docs.positions, sizeof(int32_t) * size_t(N));
  } else if (lay.positions) {  // back to 0..T-1
    k_.copy_from_host(pos_.data() + slot * N, sequence_positions(B, T).data(), sizeof(int32_t) * size_t(N));
  }
  if (docs.doc_start != nullptr) k_.copy_from_host(doc_.data() + slot * N, docs.doc_start, sizeof(int32_t) * size_t(N));
  lay.positions = docs.positions != nullptr;
  lay.documents = docs.doc_start != nullptr;
}

const int32_t* LlamaModel::positions() const { return pos_.data() + int64_t(slot_) * B_ * T_; }

const int32_t* LlamaModel::doc_start() const {
  return slot_layout_[size_t(slot_)].documents ? doc_.data() + int64_t(slot_) * B_ * T_ : nullptr;
}

void LlamaModel::use_slot(int slot) {
  CHECK(slot >= 0 && slot < slots_ && B_ > 0, "activation slot {} of {}", slot, slots_);
  slot_ = slot;
  const ActivationLayout lay = activation_layout(dims_, recompute_, recompute_layers_, B_, T_, stage_tokens(B_, T_));
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
  // The matmul-only tensors, in the backend's operand form: the layout's elements scaled to its bytes.
  const int64_t ob = int64_t(k_.operand_bytes());
  std::byte* q = mm_arena_.data() + int64_t(slot) * slot_inputs_ * ob;
  auto operands = [&](Slot s) {
    return OperandLayers{PerLayer<std::byte>{q + s.scratch * ob, q + s.base * ob, s.stride * ob, s.first_saved}};
  };
  mm_.ln1 = operands(lay.ln1);
  mm_.ln2 = operands(lay.ln2);
  mm_.hmid = operands(lay.hmid);
  mm_.dh13 = Operand{q + lay.dh13.base * ob};
}

const float* LlamaModel::stage_output(int slot) const {
  CHECK(B_ > 0 && slot >= 0 && slot < slots_);
  const ActivationLayout lay = activation_layout(dims_, recompute_, recompute_layers_, B_, T_, stage_tokens(B_, T_));
  return at(const_cast<float*>(act_arena_.data()) + int64_t(slot) * slot_floats_, lay.out)[dims_.L - 1];
}

MemoryPlan MemoryPlan::of(const LlamaConfig& c, const ShardPlan& plan, const TrainingShape& s, bool float_operands) {
  MemoryPlan m;
  m.float_operands = float_operands;
  const LlamaModel::StateBytes st = LlamaModel::state_parts(c, plan, s.precision, s.optimizer_shards, float_operands);
  m.weights = st.weights;
  m.gradients = st.gradients;
  m.optimizer = st.optimizer;
  m.state = st.total();
  m.activations = LlamaModel::activation_bytes(c, plan, s.precision, s.B, s.T, s.recompute, s.recompute_layers, s.slots,
                                               float_operands);
  const BackendSizing& backend = backend_sizing(s.device);
  if (plan.last_stage() && plan.tp_size == 1)  // the vocabulary-parallel head's scratch is in the arenas
    m.activations += backend.lmhead_scratch_bytes(s.B * s.T, c.dim, c.vocab_size, s.precision, float_operands);
  m.runtime = backend.runtime_bytes(local_dims(c, plan), s.B, s.T, s.precision);
  return m;
}

MemoryPlan MemoryPlan::for_check(const LlamaConfig& c, const ShardPlan& plan, const TrainingShape& s, int64_t avail) {
  const int64_t N = int64_t(s.B) * s.T;
  bool floats = LlamaModel::float_operands_at(c, plan, s.precision, N, false, s.device);
  if (floats && avail >= 0 && of(c, plan, s, true).total() > avail && of(c, plan, s, false).total() <= avail)
    floats = LlamaModel::float_operands_at(c, plan, s.precision, N, true, s.device);  // the form decides: probe
  return of(c, plan, s, floats);
}

}  // namespace llamatrain::model
