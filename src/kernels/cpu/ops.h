// Fast CPU kernels: the same ops as kernels/ref/ops.h, same names, same argument order and the same
// accumulation rules, plus a ComputeType for matmuls. Each is tested against its ref:: twin on
// awkward sizes (tests/kernels/cpu_vs_ref_*_test.cpp). OpenMP inside; callers never spawn threads.
// This is the folder's only public header: the rest of kernels/cpu is internal to it, its tests and
// benches, except matmul_choice.h and matmul_peak.h, which model/backend.h alone wraps.
//   - matmuls go through oneDNN; ComputeType::bf16 multiplies bf16 values and accumulates in fp32,
//     through oneDNN's bf16 kernel (AMX / AVX512-BF16 when the CPU has them) or its fp32 kernel on
//     the same values, whichever a probe found faster for the shape on this CPU (matmul_choice.h;
//     LLAMATRAIN_BF16_MATMUL=auto|bf16|fp32); primitives are created once per shape and reused;
//   - attention is tiled with an online softmax and never materializes (B,H,T,T) scores;
//     backward recomputes scores from q, k and the saved lse;
//   - lmhead_ce_forward / lmhead_ce_backward compute the lm head and cross-entropy in row chunks, so
//     the (N,V) fp32 logits never exist whole; the backward keeps a bounded block of dlogits (bf16 in
//     bf16 mode).
//   - matmul operands (inp, dout) may be float, bf16 or bf16_in_f32 (template T, instantiated for
//     each). In the bf16 modes the kernels that produce them (rmsnorm_forward, swiglu_forward/backward)
//     write the form the matmul's kernel reads (bf16 for the bf16 kernel, bf16_in_f32 for the fp32
//     kernel), so no separate conversion pass runs; float operands are rounded per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/bf16.h"
#include "core/rope.h"

namespace llamatrain::cpu {

enum class ComputeType { f32, bf16 };

// The bf16 values of a weight that bf16 compute multiplies (core/bf16.h); the fp32 kernel reads a
// float copy of them as is.
using Bf16Weight = llamatrain::Bf16Weight;

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C);
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C);
void vocab_parallel_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin, int V,
                                      int N, int C);
void vocab_parallel_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t vocab_begin,
                                       int V, int N, int C);

// out: float, or bf16 (rounded to nearest even) when it only feeds bf16 matmuls.
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const float* x, const float* weight, int N, int C, float eps);
// dweight may be nullptr (a frozen weight): dx only.
void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rstd, int N, int C);

// out (N,OC) = inp (N,IC) @ weight (OC,IC)^T. With ComputeType::bf16, weight_bf16 must hold the bf16
// values of weight (the model keeps them in sync); a float inp is rounded to bf16 values internally,
// a bf16 or bf16_in_f32 inp is used as is (converted only when the kernel reads the other form).
// With f32, weight_bf16 may be nullptr and inp must be float.
template <typename TI>
void matmul_forward(float* out, const TI* inp, const float* weight, Bf16Weight weight_bf16, int N, int IC, int OC,
                    ComputeType ct);
// dinp (N,IC) = dout @ weight (skipped if nullptr); dweight (OC,IC) += dout^T @ inp.
// dout and inp: float, or bf16 / bf16_in_f32 with ComputeType::bf16 (as inp above). dinp or dweight
// may be nullptr (dweight: a frozen weight, whose gradient gemm is skipped).
template <typename TD, typename TI>
void matmul_backward(float* dinp, float* dweight, const TD* dout, const TI* inp, const float* weight,
                     Bf16Weight weight_bf16, int N, int IC, int OC, ComputeType ct);

// In bf16 compute, whether the model should keep its matmul operands (weight copies, matmul-only
// activations) as bf16_in_f32 rather than bf16: true when the fp32 kernel runs an (M,N,K) gemm
// (M = tokens, K = inputs, N = outputs of the model's widest matmul) faster than the bf16 kernel,
// each on operands in its own form (synthetic values), so neither pays a conversion. Forced by the
// policy (LLAMATRAIN_BF16_MATMUL), else probed once per shape and cached like every other choice;
// false for gemms too small to probe.
bool bf16_operands_as_floats(int M, int N, int K);
// The same without probing: the answer when known (forced, cached or too small), else nothing.
std::optional<bool> bf16_operands_as_floats_known(int M, int N, int K);

void rope_forward(float* x, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope);
// round_rows: then rounds each whole row (row_stride floats, the heads not rotated too) to bf16
// values, for a gradient whose only use is as a bf16 matmul operand.
void rope_backward(float* dx, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope,
                   bool round_rows = false);

// window > 0: sliding-window attention (key u visible to query t iff t - window < u <= t).
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv, int D,
                       int window = 0);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int B, int T, int H, int Hkv, int D, int window = 0);
void attention_decode(float* out, float* scores, const float* q, const float* kv_cache, int pos, int H, int Hkv,
                      int D, int window = 0);

// x[n, :] += bias; dbias += sum_n dout[n, :] (OpenMP over columns, each column summed in fp64 in
// row order, as ref::bias_*).
void bias_forward(float* x /*(N,OC)*/, const float* bias /*(OC)*/, int N, int OC);
void bias_backward(float* dbias /*(OC)*/, const float* dout /*(N,OC)*/, int N, int OC);

// out and dh13: float, or bf16 (rounded to nearest even) when they only feed bf16 matmuls.
template <typename T>
void swiglu_forward(T* out, const float* h13, int N, int F);
template <typename T>
void swiglu_backward(T* dh13, const float* dout, const float* h13, int N, int F);

void residual_forward(float* out, const float* a, const float* b, int64_t n);

// Fused lm head + cross-entropy, as ref::lmhead_ce_forward / lmhead_ce_backward:
//   logits = x @ wout^T (chunk of rows at a time); losses[n] as ref::cross_entropy_forward;
//   backward: also dlogits = dloss * (softmax - onehot) (0 for targets < 0),
//   dx (N,C) = dlogits @ wout (overwritten); dwout (V,C) += dlogits^T @ x (skipped when dwout is
//   nullptr: a frozen lm head).
// wout_bf16 as in matmul_forward.
void lmhead_ce_forward(float* losses /*(N)*/, const float* x /*(N,C)*/, const float* wout /*(V,C)*/,
                       Bf16Weight wout_bf16, const int32_t* targets /*(N)*/, int N, int C, int V, ComputeType ct);
void lmhead_ce_backward(float* losses /*(N)*/, float* dx /*(N,C)*/, float* dwout /*(V,C)*/, const float* x /*(N,C)*/,
                        const float* wout /*(V,C)*/, Bf16Weight wout_bf16, const int32_t* targets /*(N)*/, float dloss,
                        int N, int C, int V, ComputeType ct);
// Bytes of scratch that lmhead_ce_backward at these sizes allocates and keeps for reuse
// (per calling thread): bounded by 128 MiB of dlogits plus one chunk of fp32 logits, whatever N; the
// fp32 kernel in bf16 compute adds a float copy of wout_bf16 (V,C) and of an x block. In bf16 compute,
// the figure of the kernel chosen for these sizes when it is known (forced or cached), else the larger.
// float_weight: wout_bf16 is bf16_in_f32 (read as is by the fp32 kernel, narrowed for the bf16 one).
// lmhead_ce_forward needs only the chunk.
int64_t lmhead_ce_scratch_bytes(int N, int C, int V, ComputeType ct, bool float_weight = false);

void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int step, float grad_scale);
// adamw_update, and param_bf16 (n) receives the new params rounded to nearest even in the same pass
// (bf16-mixed: the matmul copy of the fp32 master weights).
// T = bf16, or bf16_in_f32 when the model keeps its matmul copy in that form.
template <typename T>
void adamw_update_bf16_copy(float* param, T* param_bf16, float* m, float* v, const float* grad, int64_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                            float grad_scale);
// bf16-sr: param, m and v are bf16; the update is computed in fp32 and each result is rounded
// stochastically with bits from random_u32(seed, step, tensor_id, element) (core/rng.h), so the
// result does not depend on thread count. param_f32 (may be nullptr) receives the exact fp32 value
// of the new bf16 param (the model's compute copy). The arrays hold elements first_element ..
// first_element + n - 1 of the tensor (a ZeRO-1 shard), which key the random bits, so a tensor
// updated in pieces rounds exactly as in one call.
void adamw_update_bf16_sr(bf16* param, bf16* m, bf16* v, float* param_f32, const float* grad, int64_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale,
                          uint64_t seed, uint32_t tensor_id, uint64_t first_element = 0);

double sum_squares(const float* x, int64_t n);

void vocab_parallel_ce_max(float* local_max, const float* logits, int N, int V);
void vocab_parallel_ce_partials(float* partials, float* global_max, float* logits, const float* maxima, int P,
                                const int32_t* targets, int64_t vocab_begin, int N, int V);
void vocab_parallel_ce_forward(float* losses, const float* global_max, const float* partials, const int32_t* targets,
                               int N);
void vocab_parallel_ce_backward(float* exps, const float* partials, const int32_t* targets, int64_t vocab_begin,
                                float dloss, int N, int V, bool bf16_values);

void fill_constant(float* out, int64_t n, float value);
void fill_normal(float* out, int64_t n, float std, uint64_t seed, uint32_t stream, uint64_t first);

}  // namespace llamatrain::cpu
