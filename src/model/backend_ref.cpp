// The reference backend: model::Kernels over kernels/ref, the plain single-threaded oracle, so the
// whole model (every layout, recompute, freezing, decoding) runs on it and a test compares the fast
// backend's passes with it. Host memory. In the bf16 modes it keeps operands and the weights' matmul
// copy as bf16 values held in floats (OperandForm::bf16_in_f32): each rounded to nearest even where
// the mode rounds it, then multiplied by the fp32 reference matmul, which is bf16 compute with a
// wider accumulator.
#include <cstring>
#include <vector>

#include "core/arena.h"
#include "core/error.h"
#include "kernels/ref/ops.h"
#include "model/backend.h"
#include "model/backend_direct.h"
#include "model/memory.h"

namespace llamatrain::model {

namespace {

void round_to_bf16_values(float* x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = to_float(to_bf16(x[i]));
}

class RefKernels final : public DirectKernels {
 public:
  explicit RefKernels(Precision p) : DirectKernels(p, LLAMATRAIN_DIRECT_OPS(ref)), copy_(this) {
    form_ = p == Precision::fp32 ? OperandForm::f32 : OperandForm::bf16_in_f32;
  }

  Device device() const override { return Device::ref; }
  bool host_memory() const override { return true; }

  void* allocate(size_t bytes) override { return arena_allocate(bytes); }
  void release(void* p, size_t bytes) noexcept override { arena_free(p, bytes); }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void copy_to_host(void* host, const void* src, size_t bytes) override { std::memcpy(host, src, bytes); }
  void copy_from_host(void* dst, const void* host, size_t bytes) override { std::memcpy(dst, host, bytes); }
  const int32_t* input_ids(int32_t*, const int32_t* host, int64_t) override { return host; }

  OperandForm preferred_operand_form(int, int, int) override { return form_; }
  void use_operand_form(OperandForm f) override {
    CHECK(f == form_, "the reference backend keeps operands in one form");
  }
  void weights_bound() override {
    copy_.clear();
    if (precision_ == Precision::bf16_mixed) copy_.assign_zero(n_);
    weights_changed();
  }
  void weights_changed() override {
    if (precision_ == Precision::bf16_mixed) {
      std::memcpy(copy_.data(), f32_, sizeof(float) * size_t(n_));
      round_to_bf16_values(copy_.data(), n_);
    } else if (precision_ == Precision::bf16_sr) {
      for (int64_t i = 0; i < n_; i++) {
        master_[i] = to_bf16(f32_[i]);
        f32_[i] = to_float(master_[i]);
      }
    }
  }
  int64_t weight_copy_bytes() const override { return int64_t(copy_.size()) * 4; }

  void rmsnorm_forward(Operand out, float* rstd, const float* x, const float* weight, int N, int C,
                       float eps) override {
    float* o = static_cast<float*>(out.p);
    ref::rmsnorm_forward(o, rstd, x, weight, N, C, eps);
    rounded(o, int64_t(N) * C);
  }
  void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                        const float* rstd, int N, int C) override {
    if (dweight) {
      ref::rmsnorm_backward(dx, dweight, dout, x, weight, rstd, N, C);
      return;
    }
    std::vector<float> unused(size_t(C), 0.0f);  // a frozen weight: its gradient is dropped
    ref::rmsnorm_backward(dx, unused.data(), dout, x, weight, rstd, N, C);
  }

  void matmul_forward(float* out, MatIn inp, const float* weight, int N, int IC, int OC) override {
    std::vector<float> in_tmp;
    ref::matmul_forward(out, input(inp, int64_t(N) * IC, in_tmp), weight_values(weight), N, IC, OC);
  }
  void matmul_backward(float* dinp, float* dweight, MatIn dout, MatIn inp, const float* weight, int N, int IC,
                       int OC) override {
    std::vector<float> d_tmp, in_tmp;
    const float* d = input(dout, int64_t(N) * OC, d_tmp);
    const float* w = weight_values(weight);
    if (dweight) {
      ref::matmul_backward(dinp, dweight, d, input(inp, int64_t(N) * IC, in_tmp), w, N, IC, OC);
    } else if (dinp) {  // a frozen weight: its gradient is dropped
      std::vector<float> unused(size_t(OC) * IC, 0.0f);
      ref::matmul_backward(dinp, unused.data(), d, input(inp, int64_t(N) * IC, in_tmp), w, N, IC, OC);
    }
  }

  void rope_backward(float* dx, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope,
                     bool for_matmul) override {
    ref::rope_backward(dx, pos, N, n_heads, row_stride, D, rope);
    if (for_matmul) rounded(dx, int64_t(N) * row_stride);
  }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv, int D, int window,
                         const int32_t* doc_start) override {
    ref::attention_forward(out, lse, qkv, B, T, H, Hkv, D, window, doc_start);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                          int T, int H, int Hkv, int D, int window, const int32_t* doc_start) override {
    ref::attention_backward(dqkv, dout, qkv, out, lse, B, T, H, Hkv, D, window, doc_start);
  }
  void swiglu_forward(Operand out, const float* h13, int N, int F) override {
    float* o = static_cast<float*>(out.p);
    ref::swiglu_forward(o, h13, N, F);
    rounded(o, int64_t(N) * F);
  }
  void swiglu_backward(Operand dh13, const float* dout, const float* h13, int N, int F) override {
    float* d = static_cast<float*>(dh13.p);
    ref::swiglu_backward(d, dout, h13, N, F);
    rounded(d, int64_t(N) * 2 * F);
  }
  void lmhead_ce_forward(float* losses, const float* x, const float* wout, const int32_t* targets, int N, int C,
                         int V) override {
    std::vector<float> x_tmp;
    ref::lmhead_ce_forward(losses, input(MatIn(x), int64_t(N) * C, x_tmp), weight_values(wout), targets, N, C, V);
  }
  void lmhead_ce_backward(float* losses, float* dx, float* dwout, const float* x, const float* wout,
                          const int32_t* targets, float dloss, int N, int C, int V) override {
    std::vector<float> x_tmp, unused;
    if (!dwout) {  // a frozen lm head: its gradient is dropped
      unused.assign(size_t(V) * C, 0.0f);
      dwout = unused.data();
    }
    ref::lmhead_ce_backward(losses, dx, dwout, input(MatIn(x), int64_t(N) * C, x_tmp), weight_values(wout), targets,
                            dloss, N, C, V);
  }

  void adamw_update_bf16_copy(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1,
                              float beta2, float eps, float weight_decay, int step, float grad_scale) override {
    ref::adamw_update(param, m, v, grad, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    float* c = copy_.data() + weight_offset(param);
    std::memcpy(c, param, sizeof(float) * size_t(n));
    round_to_bf16_values(c, n);
  }

 private:
  bool bf16_compute() const { return precision_ != Precision::fp32; }
  void rounded(float* x, int64_t n) const {
    if (bf16_compute()) round_to_bf16_values(x, n);
  }
  // A matmul input as the values bf16 compute multiplies: operands and prepared floats already hold
  // them; fp32 values are rounded into tmp.
  const float* input(MatIn m, int64_t n, std::vector<float>& tmp) const {
    const float* x = static_cast<const float*>(m.p);
    if (!bf16_compute() || m.kind != MatIn::Kind::f32) return x;
    tmp.assign(x, x + n);
    round_to_bf16_values(tmp.data(), n);
    return tmp.data();
  }
  // bf16-mixed: the rounded copy; bf16-sr: the compute copy, which holds the master's bf16 values.
  const float* weight_values(const float* param) const {
    if (precision_ != Precision::bf16_mixed) return param;
    return copy_.data() + weight_offset(param);
  }

  Buffer<float> copy_;
};

}  // namespace

std::unique_ptr<Kernels> make_ref_kernels(Precision p) { return std::make_unique<RefKernels>(p); }

// The reference backend keeps bf16 values in floats, and its lm head holds the (N, V) logits whole.
const BackendSizing& ref_sizing() {
  static const BackendSizing sizing{[](int, int, int, bool) { return true; },
                                    [](int N, int, int V, Precision, bool) { return int64_t(N) * V * 4; },
                                    [](const LocalDims&, int, int, Precision) { return int64_t(0); }};
  return sizing;
}

}  // namespace llamatrain::model
