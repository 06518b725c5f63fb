// Internal to model/backend_*.cpp: the ops every backend hands to its kernels as they are (the same
// name and arguments in ref::, cpu:: and cuda::), written once. A backend's table, DirectOps, holds
// its kernels' functions (LLAMATRAIN_DIRECT_OPS(ns): each entry must have ref::'s signature, which
// the compiler checks), and DirectKernels forwards each of these Kernels ops to its entry, so a
// backend writes only the ops where it adds something of its own (operand forms, the weights' matmul
// copy, a choice of kernel, host or device memory).
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "core/rope.h"
#include "kernels/ref/ops.h"
#include "model/backend.h"

namespace llamatrain::model {

// X(ns, op) for each op a backend takes straight from namespace ns.
// (rmsnorm_forward and swiglu_forward: their float outputs; a backend writes the Operand ones.)
// clang-format off
#define LLAMATRAIN_FOR_EACH_DIRECT_OP(X, ns) \
  X(ns, embedding_forward) \
  X(ns, embedding_backward) \
  X(ns, vocab_parallel_embedding_forward) \
  X(ns, vocab_parallel_embedding_backward) \
  X(ns, rmsnorm_forward) \
  X(ns, rope_forward) \
  X(ns, attention_decode) \
  X(ns, bias_forward) \
  X(ns, bias_backward) \
  X(ns, swiglu_forward) \
  X(ns, residual_forward) \
  X(ns, vocab_parallel_ce_max) \
  X(ns, vocab_parallel_ce_partials) \
  X(ns, vocab_parallel_ce_forward) \
  X(ns, vocab_parallel_ce_backward) \
  X(ns, adamw_update) \
  X(ns, adamw_update_bf16_sr) \
  X(ns, sum_squares) \
  X(ns, sum) \
  X(ns, fill_constant) \
  X(ns, fill_normal)
// clang-format on

struct DirectOps {
#define LLAMATRAIN_DIRECT_OP_FIELD(ns, op) decltype(&ns::op) op;
  LLAMATRAIN_FOR_EACH_DIRECT_OP(LLAMATRAIN_DIRECT_OP_FIELD, ref)
#undef LLAMATRAIN_DIRECT_OP_FIELD
};

// The table of namespace ns's kernels (ref, cpu or cuda).
#define LLAMATRAIN_DIRECT_OP_ENTRY(ns, op) &ns::op,
#define LLAMATRAIN_DIRECT_OPS(ns) \
  DirectOps { LLAMATRAIN_FOR_EACH_DIRECT_OP(LLAMATRAIN_DIRECT_OP_ENTRY, ns) }

class DirectKernels : public Kernels {
 public:
  DirectKernels(Precision p, const DirectOps& ops) : Kernels(p), ops_(ops) {}

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C) override {
    ops_.embedding_forward(out, tokens, wte, N, C);
  }
  void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C) override {
    ops_.embedding_backward(dwte, dout, tokens, N, C);
  }
  void vocab_parallel_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin, int V,
                                        int N, int C) override {
    ops_.vocab_parallel_embedding_forward(out, tokens, wte, vocab_begin, V, N, C);
  }
  void vocab_parallel_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t vocab_begin,
                                         int V, int N, int C) override {
    ops_.vocab_parallel_embedding_backward(dwte, dout, tokens, vocab_begin, V, N, C);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int N, int C, float eps) override {
    ops_.rmsnorm_forward(out, rstd, x, weight, N, C, eps);
  }
  void rope_forward(float* x, const int32_t* pos, int N, int n_heads, int row_stride, int D,
                    const RopeFreqs& rope) override {
    ops_.rope_forward(x, pos, N, n_heads, row_stride, D, rope);
  }
  void attention_decode(float* out, float* scores, const float* q, const float* kv_cache, int pos, int H, int Hkv,
                        int D, int window) override {
    ops_.attention_decode(out, scores, q, kv_cache, pos, H, Hkv, D, window);
  }
  void bias_forward(float* x, const float* bias, int N, int OC) override { ops_.bias_forward(x, bias, N, OC); }
  void bias_backward(float* dbias, const float* dout, int N, int OC) override {
    ops_.bias_backward(dbias, dout, N, OC);
  }
  void swiglu_forward(float* out, const float* h13, int N, int F) override { ops_.swiglu_forward(out, h13, N, F); }
  void residual_forward(float* out, const float* a, const float* b, int64_t n) override {
    ops_.residual_forward(out, a, b, n);
  }
  void vocab_parallel_ce_max(float* local_max, const float* logits, int N, int V) override {
    ops_.vocab_parallel_ce_max(local_max, logits, N, V);
  }
  void vocab_parallel_ce_partials(float* partials, float* global_max, float* logits, const float* maxima, int P,
                                  const int32_t* targets, int64_t vocab_begin, int N, int V) override {
    ops_.vocab_parallel_ce_partials(partials, global_max, logits, maxima, P, targets, vocab_begin, N, V);
  }
  void vocab_parallel_ce_forward(float* losses, const float* global_max, const float* partials, const int32_t* targets,
                                 int N) override {
    ops_.vocab_parallel_ce_forward(losses, global_max, partials, targets, N);
  }
  // In the bf16 modes dlogits are rounded to the bf16 values the matmul after it multiplies.
  void vocab_parallel_ce_backward(float* exps, const float* partials, const int32_t* targets, int64_t vocab_begin,
                                  float dloss, int N, int V) override {
    ops_.vocab_parallel_ce_backward(exps, partials, targets, vocab_begin, dloss, N, V, precision_ != Precision::fp32);
  }
  void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int step, float grad_scale) override {
    ops_.adamw_update(param, m, v, grad, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
  }
  void adamw_update_bf16_sr(bf16* param, bf16* m, bf16* v, float* param_f32, const float* grad, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale,
                            uint64_t seed, uint32_t tensor_id, uint64_t first_element) override {
    ops_.adamw_update_bf16_sr(param, m, v, param_f32, grad, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale,
                              seed, tensor_id, first_element);
  }
  double sum_squares(const float* x, int64_t n) override { return ops_.sum_squares(x, n); }
  double sum(const float* x, int64_t n) override { return ops_.sum(x, n); }
  void fill_constant(float* out, int64_t n, float value) override { ops_.fill_constant(out, n, value); }
  void fill_normal(float* out, int64_t n, float std, uint64_t seed, uint32_t stream, uint64_t first) override {
    ops_.fill_normal(out, n, std, seed, stream, first);
  }

 private:
  const DirectOps ops_;
};

}  // namespace llamatrain::model
