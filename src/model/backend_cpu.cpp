// The CPU backend: model::Kernels over kernels/cpu. Its memory is the host's (core/arena.h: 2 MiB
// aligned, huge-page hinted). In the bf16 modes it keeps matmul operands and the weights' matmul copy
// as bf16, or as bf16 values held in floats where oneDNN's fp32 kernel is the faster one for the
// model's widest gemm (cpu::bf16_operands_as_floats): the form's storage and its choice are this
// file's alone.
#include <cstring>

#include "core/arena.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "model/machine.h"
#include "model/backend.h"
#include "model/backend_direct.h"
#include "model/memory.h"

namespace llamatrain::model {

namespace {

class CpuKernels final : public DirectKernels {
 public:
  explicit CpuKernels(Precision p)
      : DirectKernels(p, LLAMATRAIN_DIRECT_OPS(cpu)), ct_(compute_type(p)), copy_bf16_(this), copy_f32x_(this) {
    form_ = p == Precision::fp32 ? OperandForm::f32 : OperandForm::bf16;
  }

  Device device() const override { return Device::cpu; }
  bool host_memory() const override { return true; }

  void* allocate(size_t bytes) override { return arena_allocate(bytes); }
  void release(void* p, size_t bytes) noexcept override { arena_free(p, bytes); }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* host, const void* src, size_t bytes) override { std::memcpy(host, src, bytes); }
  void copy_from_host(void* dst, const void* host, size_t bytes) override { std::memcpy(dst, host, bytes); }
  const int32_t* input_ids(int32_t*, const int32_t* host, int64_t) override { return host; }

  OperandForm preferred_operand_form(int M, int N, int K) override {
    if (precision_ == Precision::fp32) return OperandForm::f32;
    return cpu::bf16_operands_as_floats(M, N, K) ? OperandForm::bf16_in_f32 : OperandForm::bf16;
  }
  void use_operand_form(OperandForm f) override {
    CHECK(precision_ == Precision::fp32 ? f == OperandForm::f32 : f != OperandForm::f32);
    if (f == form_) return;
    form_ = f;
    allocate_copy();
    weights_changed();
  }
  void weights_bound() override {
    allocate_copy();
    weights_changed();
  }
  void weights_changed() override {
    if (precision_ == Precision::bf16_mixed && form_ == OperandForm::bf16_in_f32) {
      bf16_from_float(copy_f32x_.data(), f32_, n_);
    } else if (precision_ == Precision::bf16_mixed) {
      bf16_from_float(copy_bf16_.data(), f32_, n_);
    } else if (precision_ == Precision::bf16_sr) {
      bf16_from_float(master_, f32_, n_);
      float_from_bf16(f32_, master_, n_);
    }
  }
  int64_t weight_copy_bytes() const override { return int64_t(copy_bf16_.size()) * 2 + int64_t(copy_f32x_.size()) * 4; }

  void rmsnorm_forward(Operand out, float* rstd, const float* x, const float* weight, int N, int C,
                       float eps) override {
    switch (form_) {
      case OperandForm::f32: cpu::rmsnorm_forward(static_cast<float*>(out.p), rstd, x, weight, N, C, eps); break;
      case OperandForm::bf16: cpu::rmsnorm_forward(static_cast<bf16*>(out.p), rstd, x, weight, N, C, eps); break;
      case OperandForm::bf16_in_f32:
        cpu::rmsnorm_forward(static_cast<bf16_in_f32*>(out.p), rstd, x, weight, N, C, eps);
        break;
    }
  }
  void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                        const float* rstd, int N, int C) override {
    cpu::rmsnorm_backward(dx, dweight, dout, x, weight, rstd, N, C);
  }

  void matmul_forward(float* out, MatIn inp, const float* weight, int N, int IC, int OC) override {
    const cpu::Bf16Weight w = weight_copy(weight);
    switch (type_of(inp)) {
      case Type::f32: cpu::matmul_forward(out, static_cast<const float*>(inp.p), weight, w, N, IC, OC, ct_); break;
      case Type::bf16: cpu::matmul_forward(out, static_cast<const bf16*>(inp.p), weight, w, N, IC, OC, ct_); break;
      case Type::bf16x:
        cpu::matmul_forward(out, static_cast<const bf16_in_f32*>(inp.p), weight, w, N, IC, OC, ct_);
        break;
    }
  }
  void matmul_backward(float* dinp, float* dweight, MatIn dout, MatIn inp, const float* weight, int N, int IC,
                       int OC) override {
    const cpu::Bf16Weight w = weight_copy(weight);
    const Type td = type_of(dout), ti = type_of(inp);
    auto as = [](MatIn m, auto* type) { return static_cast<decltype(type)>(m.p); };
    const float* f = nullptr;
    const bf16* h = nullptr;
    const bf16_in_f32* x = nullptr;
    // The operand pairs the passes produce (kernels/cpu/matmul.cpp instantiates these).
    if (td == Type::f32 && ti == Type::f32)
      cpu::matmul_backward(dinp, dweight, as(dout, f), as(inp, f), weight, w, N, IC, OC, ct_);
    else if (td == Type::f32 && ti == Type::bf16)
      cpu::matmul_backward(dinp, dweight, as(dout, f), as(inp, h), weight, w, N, IC, OC, ct_);
    else if (td == Type::bf16 && ti == Type::bf16)
      cpu::matmul_backward(dinp, dweight, as(dout, h), as(inp, h), weight, w, N, IC, OC, ct_);
    else if (td == Type::f32 && ti == Type::bf16x)
      cpu::matmul_backward(dinp, dweight, as(dout, f), as(inp, x), weight, w, N, IC, OC, ct_);
    else if (td == Type::bf16x && ti == Type::bf16x)
      cpu::matmul_backward(dinp, dweight, as(dout, x), as(inp, x), weight, w, N, IC, OC, ct_);
    else
      fail("matmul_backward: no CPU kernel for these operand forms");
  }

  void rope_backward(float* dx, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope,
                     bool for_matmul) override {
    // With float operands, a gradient whose only use is a matmul is rounded in RoPE's own pass, so the
    // fp32 kernel reads it as is (MatIn::prepared).
    cpu::rope_backward(dx, pos, N, n_heads, row_stride, D, rope, for_matmul && form_ == OperandForm::bf16_in_f32);
  }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv, int D, int window,
                         const int32_t* doc_start) override {
    cpu::attention_forward(out, lse, qkv, B, T, H, Hkv, D, window, doc_start);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                          int T, int H, int Hkv, int D, int window, const int32_t* doc_start) override {
    cpu::attention_backward(dqkv, dout, qkv, out, lse, B, T, H, Hkv, D, window, doc_start);
  }
  void swiglu_forward(Operand out, const float* h13, int N, int F) override {
    switch (form_) {
      case OperandForm::f32: cpu::swiglu_forward(static_cast<float*>(out.p), h13, N, F); break;
      case OperandForm::bf16: cpu::swiglu_forward(static_cast<bf16*>(out.p), h13, N, F); break;
      case OperandForm::bf16_in_f32: cpu::swiglu_forward(static_cast<bf16_in_f32*>(out.p), h13, N, F); break;
    }
  }
  void swiglu_backward(Operand dh13, const float* dout, const float* h13, int N, int F) override {
    switch (form_) {
      case OperandForm::f32: cpu::swiglu_backward(static_cast<float*>(dh13.p), dout, h13, N, F); break;
      case OperandForm::bf16: cpu::swiglu_backward(static_cast<bf16*>(dh13.p), dout, h13, N, F); break;
      case OperandForm::bf16_in_f32: cpu::swiglu_backward(static_cast<bf16_in_f32*>(dh13.p), dout, h13, N, F); break;
    }
  }
  void lmhead_ce_forward(float* losses, const float* x, const float* wout, const int32_t* targets, int N, int C,
                         int V) override {
    cpu::lmhead_ce_forward(losses, x, wout, weight_copy(wout), targets, N, C, V, ct_);
  }
  void lmhead_ce_backward(float* losses, float* dx, float* dwout, const float* x, const float* wout,
                          const int32_t* targets, float dloss, int N, int C, int V) override {
    cpu::lmhead_ce_backward(losses, dx, dwout, x, wout, weight_copy(wout), targets, dloss, N, C, V, ct_);
  }

  void adamw_update_bf16_copy(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1,
                              float beta2, float eps, float weight_decay, int step, float grad_scale) override {
    const int64_t i = weight_offset(param);
    if (form_ == OperandForm::bf16_in_f32)
      cpu::adamw_update_bf16_copy(param, copy_f32x_.data() + i, m, v, grad, n, lr, beta1, beta2, eps, weight_decay,
                                  step, grad_scale);
    else
      cpu::adamw_update_bf16_copy(param, copy_bf16_.data() + i, m, v, grad, n, lr, beta1, beta2, eps, weight_decay,
                                  step, grad_scale);
  }

 private:
  enum class Type { f32, bf16, bf16x };
  // How a kernel reads a matmul input: floats, or the operand form's storage (prepared floats hold
  // bf16 values only with float operands; otherwise they are plain floats).
  Type type_of(MatIn m) const {
    if (m.kind == MatIn::Kind::f32 || form_ == OperandForm::f32) return Type::f32;
    if (form_ == OperandForm::bf16_in_f32) return Type::bf16x;
    return m.kind == MatIn::Kind::operand ? Type::bf16 : Type::f32;
  }
  // The bf16 values bf16 compute multiplies for a weight: the bf16 copy or master, a float copy of
  // them, or (bf16-sr with float operands) the compute copy itself, which holds bf16 values.
  cpu::Bf16Weight weight_copy(const float* param) const {
    if (precision_ == Precision::fp32) return nullptr;
    const int64_t i = weight_offset(param);
    if (precision_ == Precision::bf16_sr)
      return form_ == OperandForm::bf16_in_f32 ? cpu::Bf16Weight::rounded_floats(param) : cpu::Bf16Weight(master_ + i);
    if (form_ == OperandForm::bf16_in_f32) return copy_f32x_.data() + i;
    return copy_bf16_.data() + i;
  }
  void allocate_copy() {
    copy_bf16_.clear();
    copy_f32x_.clear();
    if (precision_ != Precision::bf16_mixed) return;  // bf16-sr multiplies its master or compute copy
    if (form_ == OperandForm::bf16_in_f32)
      copy_f32x_.assign_zero(n_);
    else
      copy_bf16_.assign_zero(n_);
  }

  cpu::ComputeType ct_;
  Buffer<bf16> copy_bf16_;
  Buffer<bf16_in_f32> copy_f32x_;
};

}  // namespace

std::unique_ptr<Kernels> make_cpu_kernels(Precision p) { return std::make_unique<CpuKernels>(p); }

// The CPU backend's sizing: the operand form its kernel probe chooses, oneDNN's lm head scratch, no
// runtime of a device's (plan measures this process).
const BackendSizing& cpu_sizing() {
  static const BackendSizing sizing{[](int M, int N, int K, bool probe) {
                                      return probe ? cpu::bf16_operands_as_floats(M, N, K)
                                                   : cpu::bf16_operands_as_floats_known(M, N, K).value_or(true);
                                    },
                                    [](int N, int C, int V, Precision p, bool float_operands) {
                                      return cpu::lmhead_ce_scratch_bytes(N, C, V, compute_type(p), float_operands);
                                    },
                                    [](const LocalDims&, int, int, Precision) { return int64_t(0); }};
  return sizing;
}

}  // namespace llamatrain::model
