// The CUDA backend: model::Kernels over kernels/cuda, on the device of this process. Its Buffers are
// device memory; token ids are copied to the device per micro-batch, and the loss sum and the
// gradient norm come back to the host (a step's only round trips). In the bf16 modes operands and the
// weights' matmul copy are bf16 (the GPU's bf16 gemm is always the faster one). Where llamatrain was
// built without CUDA the cuda:: functions are stubs: device_count() is 0 and device_usable says why.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/sizes.h"
#include "model/backend.h"
#include "model/backend_direct.h"
#include "model/memory.h"

namespace llamatrain::model {

namespace {

class CudaKernels final : public DirectKernels {
 public:
  explicit CudaKernels(Precision p)
      : DirectKernels(p, LLAMATRAIN_DIRECT_OPS(cuda)),
        ct_(p == Precision::fp32 ? cuda::ComputeType::f32 : cuda::ComputeType::bf16),
        copy_(this) {
    form_ = p == Precision::fp32 ? OperandForm::f32 : OperandForm::bf16;
    if (!attention_choice_.empty() && attention_choice_ != "auto" && attention_choice_ != "plain" &&
        attention_choice_ != "flash")
      fail("LLAMATRAIN_CUDA_ATTENTION={} is not a choice\nhint: plain (the fp32 kernels), flash (tensor cores) or "
           "auto (flash in the bf16 modes, the default)",
           attention_choice_);
  }

  Device device() const override { return Device::cuda; }
  bool host_memory() const override { return false; }
  void synchronize() override { cuda::synchronize(); }

  void* allocate(size_t bytes) override { return cuda::device_alloc(bytes); }
  void release(void* p, size_t) noexcept override {
    try {
      cuda::device_free(p);
    } catch (...) {  // a failing free at exit: nothing left to do with the memory
    }
  }
  void zero(void* p, size_t bytes) override { cuda::fill_zero(p, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { cuda::copy_device(dst, src, bytes); }
  void copy_to_host(void* host, const void* src, size_t bytes) override { cuda::copy_to_host(host, src, bytes); }
  void copy_from_host(void* dst, const void* host, size_t bytes) override { cuda::copy_to_device(dst, host, bytes); }
  const int32_t* input_ids(int32_t* staging, const int32_t* host, int64_t n) override {
    cuda::copy_to_device(staging, host, sizeof(int32_t) * size_t(n));
    return staging;
  }

  OperandForm preferred_operand_form(int, int, int) override { return form_; }
  void use_operand_form(OperandForm f) override { CHECK(f == form_, "the CUDA backend keeps bf16 operands as bf16"); }
  void weights_bound() override {
    copy_.clear();
    if (precision_ == Precision::bf16_mixed) copy_.assign_zero(n_);
    weights_changed();
  }
  void weights_changed() override {
    if (precision_ == Precision::bf16_mixed) {
      cuda::bf16_from_float(copy_.data(), f32_, n_);
    } else if (precision_ == Precision::bf16_sr) {
      cuda::bf16_from_float(master_, f32_, n_);
      cuda::float_from_bf16(f32_, master_, n_);
    }
  }
  int64_t weight_copy_bytes() const override { return int64_t(copy_.size()) * 2; }

  void rmsnorm_forward(Operand out, float* rstd, const float* x, const float* weight, int N, int C,
                       float eps) override {
    if (form_ == OperandForm::bf16)
      cuda::rmsnorm_forward(static_cast<bf16*>(out.p), rstd, x, weight, N, C, eps);
    else
      cuda::rmsnorm_forward(static_cast<float*>(out.p), rstd, x, weight, N, C, eps);
  }
  void residual_rmsnorm_forward(float* resid, Operand normed, float* rstd, const float* a, const float* b,
                                const float* weight, int N, int C, float eps) override {
    if (form_ == OperandForm::bf16)
      cuda::residual_rmsnorm_forward(resid, static_cast<bf16*>(normed.p), rstd, a, b, weight, N, C, eps);
    else
      cuda::residual_rmsnorm_forward(resid, static_cast<float*>(normed.p), rstd, a, b, weight, N, C, eps);
  }
  void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                        const float* rstd, int N, int C) override {
    cuda::rmsnorm_backward(dx, dweight, dout, x, weight, rstd, N, C);
  }

  void matmul_forward(float* out, MatIn inp, const float* weight, int N, int IC, int OC) override {
    const cuda::Bf16Weight w = weight_copy(weight);
    if (is_bf16(inp))
      cuda::matmul_forward(out, static_cast<const bf16*>(inp.p), weight, w, N, IC, OC, ct_);
    else
      cuda::matmul_forward(out, static_cast<const float*>(inp.p), weight, w, N, IC, OC, ct_);
  }
  void matmul_backward(float* dinp, float* dweight, MatIn dout, MatIn inp, const float* weight, int N, int IC,
                       int OC) override {
    const cuda::Bf16Weight w = weight_copy(weight);
    const auto* df = static_cast<const float*>(dout.p);
    const auto* dh = static_cast<const bf16*>(dout.p);
    const auto* xf = static_cast<const float*>(inp.p);
    const auto* xh = static_cast<const bf16*>(inp.p);
    if (is_bf16(dout) && is_bf16(inp))
      cuda::matmul_backward(dinp, dweight, dh, xh, weight, w, N, IC, OC, ct_);
    else if (is_bf16(dout))
      cuda::matmul_backward(dinp, dweight, dh, xf, weight, w, N, IC, OC, ct_);
    else if (is_bf16(inp))
      cuda::matmul_backward(dinp, dweight, df, xh, weight, w, N, IC, OC, ct_);
    else
      cuda::matmul_backward(dinp, dweight, df, xf, weight, w, N, IC, OC, ct_);
  }

  void rope_backward(float* dx, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope,
                     bool) override {
    cuda::rope_backward(dx, pos, N, n_heads, row_stride, D, rope);  // bf16 operands: the matmul rounds dx
  }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv, int D, int window,
                         const int32_t* doc_start) override {
    if (tensor_core_attention(D))
      cuda::flash_attention_forward(out, lse, qkv, B, T, H, Hkv, D, window, doc_start);
    else
      cuda::attention_forward(out, lse, qkv, B, T, H, Hkv, D, window, doc_start);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                          int T, int H, int Hkv, int D, int window, const int32_t* doc_start) override {
    if (tensor_core_attention(D))
      cuda::flash_attention_backward(dqkv, dout, qkv, out, lse, B, T, H, Hkv, D, window, doc_start);
    else
      cuda::attention_backward(dqkv, dout, qkv, out, lse, B, T, H, Hkv, D, window, doc_start);
  }
  void swiglu_forward(Operand out, const float* h13, int N, int F) override {
    if (form_ == OperandForm::bf16)
      cuda::swiglu_forward(static_cast<bf16*>(out.p), h13, N, F);
    else
      cuda::swiglu_forward(static_cast<float*>(out.p), h13, N, F);
  }
  void swiglu_backward(Operand dh13, const float* dout, const float* h13, int N, int F) override {
    if (form_ == OperandForm::bf16)
      cuda::swiglu_backward(static_cast<bf16*>(dh13.p), dout, h13, N, F);
    else
      cuda::swiglu_backward(static_cast<float*>(dh13.p), dout, h13, N, F);
  }
  void lmhead_ce_forward(float* losses, const float* x, const float* wout, const int32_t* targets, int N, int C,
                         int V) override {
    cuda::lmhead_ce_forward(losses, x, wout, weight_copy(wout), targets, N, C, V, ct_);
  }
  void lmhead_ce_backward(float* losses, float* dx, float* dwout, const float* x, const float* wout,
                          const int32_t* targets, float dloss, int N, int C, int V) override {
    cuda::lmhead_ce_backward(losses, dx, dwout, x, wout, weight_copy(wout), targets, dloss, N, C, V, ct_);
  }

  void adamw_update_bf16_copy(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1,
                              float beta2, float eps, float weight_decay, int step, float grad_scale) override {
    cuda::adamw_update_bf16_copy(param, copy_.data() + weight_offset(param), m, v, grad, n, lr, beta1, beta2, eps,
                                 weight_decay, step, grad_scale);
  }

 private:
  // The bf16 modes take the tensor-core attention where the head dimension allows; fp32 keeps the
  // plain fp32 kernels. LLAMATRAIN_CUDA_ATTENTION=plain or =flash overrides the choice (for
  // comparing the two on a GPU).
  bool tensor_core_attention(int D) const {
    if (!cuda::flash_attention_supports(D)) return false;
    if (attention_choice_ == "plain") return false;
    return attention_choice_ == "flash" || precision_ != Precision::fp32;
  }
  bool is_bf16(MatIn m) const { return m.kind == MatIn::Kind::operand && form_ == OperandForm::bf16; }
  cuda::Bf16Weight weight_copy(const float* param) const {
    if (precision_ == Precision::fp32) return nullptr;
    const int64_t i = weight_offset(param);
    if (precision_ == Precision::bf16_sr) return cuda::Bf16Weight(master_ + i);
    return cuda::Bf16Weight(copy_.data() + i);
  }

  cuda::ComputeType ct_;
  Buffer<bf16> copy_;
  std::string attention_choice_ = [] {
    const char* v = std::getenv("LLAMATRAIN_CUDA_ATTENTION");
    return std::string(v != nullptr ? v : "");
  }();
};

}  // namespace

std::unique_ptr<Kernels> make_cuda_kernels(Precision p) { return std::make_unique<CudaKernels>(p); }

// The CUDA backend's sizing, from kernels/cuda/sizes.h's formulas (plain arithmetic: a machine
// without a GPU or a CUDA build plans for one): bf16 operands as bf16 always, the lm head's chunk of
// logits, the runtime's context, workspace and scratch.
const BackendSizing& cuda_sizing() {
  static const BackendSizing sizing{[](int, int, int, bool) { return false; },
                                    [](int N, int C, int V, Precision p, bool) {
                                      return cuda::sizes::lmhead_scratch_bytes(N, C, V, p != Precision::fp32);
                                    },
                                    [](const LocalDims& d, int B, int T, Precision p) {
                                      const int64_t widest = std::max<int64_t>({d.C, d.QKV(), 2 * int64_t(d.F)});
                                      return cuda::sizes::runtime_bytes(B, T, widest, d.H, p != Precision::fp32);
                                    }};
  return sizing;
}

bool cuda_device_usable(std::string* why) {
  if (cuda::device_count() > 0) return true;
  if (why) *why = cuda::no_device_reason();
  return false;
}

}  // namespace llamatrain::model
