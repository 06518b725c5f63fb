// Reference kernels: plain, single-threaded loops in fp32 (accumulating in fp64 where a sum is
// long), written to be obviously right. They are the oracle for the fast cpu:: kernels (tests/kernels/
// cpu_vs_ref_*_test.cpp) and are themselves checked by fp64 finite differences or against a
// composition of other ref:: kernels (tests/kernels/ref_gradcheck_*_test.cpp). Never optimize.
//
// Dimension glossary: N = B*T rows, C model dim, H heads, Hkv kv heads, D head dim, F ffn dim,
// V vocab. All tensors row-major. Argument order: outputs, inputs, saved state, sizes.
// Accumulation rules (same in every backend):
//   - weight gradients (dweight, dwte, ...) are ACCUMULATED (+=), for gradient accumulation;
//   - input gradients are OVERWRITTEN (=), except rmsnorm_backward's dx, which is ACCUMULATED
//     (+=) because it feeds the residual stream.
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "core/rope.h"

namespace llamatrain::ref {

// out[n, :] = wte[tokens[n], :]
void embedding_forward(float* out /*(N,C)*/, const int32_t* tokens /*(N)*/, const float* wte /*(V,C)*/, int N, int C);
// dwte[tokens[n], :] += dout[n, :]
void embedding_backward(float* dwte /*(V,C)*/, const float* dout /*(N,C)*/, const int32_t* tokens /*(N)*/, int N,
                        int C);

// Vocabulary-parallel embedding (Megatron's VocabParallelEmbedding): this rank's table holds rows
// [vocab_begin, vocab_begin + V) of the full one. out[n] = wte[tokens[n] - vocab_begin] for tokens in
// that range, 0 for the others, so the sum over the ranks is the full embedding_forward. The
// backward adds dout[n] into the rows of the tokens in range, in order of n.
void vocab_parallel_embedding_forward(float* out /*(N,C)*/, const int32_t* tokens /*(N)*/, const float* wte /*(V,C)*/,
                                      int64_t vocab_begin, int V, int N, int C);
void vocab_parallel_embedding_backward(float* dwte /*(V,C)*/, const float* dout /*(N,C)*/,
                                       const int32_t* tokens /*(N)*/, int64_t vocab_begin, int V, int N, int C);

// HF LlamaRMSNorm: rstd = 1/sqrt(mean(x^2) + eps); out = x * rstd * weight.
void rmsnorm_forward(float* out /*(N,C)*/, float* rstd /*(N)*/, const float* x /*(N,C)*/, const float* weight /*(C)*/,
                     int N, int C, float eps);
// dx += d/dx, dweight += sum_n dout * x * rstd.
void rmsnorm_backward(float* dx /*(N,C)*/, float* dweight /*(C)*/, const float* dout /*(N,C)*/,
                      const float* x /*(N,C)*/, const float* weight /*(C)*/, const float* rstd /*(N)*/, int N, int C);

// out = inp @ weight^T (nn.Linear without bias).
void matmul_forward(float* out /*(N,OC)*/, const float* inp /*(N,IC)*/, const float* weight /*(OC,IC)*/, int N, int IC,
                    int OC);
// dinp = dout @ weight (skipped if dinp == nullptr); dweight += dout^T @ inp.
void matmul_backward(float* dinp /*(N,IC)*/, float* dweight /*(OC,IC)*/, const float* dout /*(N,OC)*/,
                     const float* inp /*(N,IC)*/, const float* weight /*(OC,IC)*/, int N, int IC, int OC);

// RoPE, Hugging Face rotate_half layout, in place. Each row of x holds n_heads heads of D values at
// x[n*row_stride + h*D]; heads [0, n_heads) are rotated (q then k heads of a packed qkv row).
// Pair i is (i, i + D/2); angle = pos[n] * inv_freq[i], inv_freq = rope_inv_freq (core/rope.h:
// theta^(-2i/D), or its llama3 rescaling):
//   out[i] = x[i]*cos - x[i+D/2]*sin ; out[i+D/2] = x[i+D/2]*cos + x[i]*sin
void rope_forward(float* x, const int32_t* pos /*(N)*/, int N, int n_heads, int row_stride, int D,
                  const RopeFreqs& rope);
// Backward of the rotation: rotates dx by -angle, in place.
void rope_backward(float* dx, const int32_t* pos /*(N)*/, int N, int n_heads, int row_stride, int D,
                   const RopeFreqs& rope);

// Causal grouped-query attention on a packed qkv tensor (rope already applied):
// row n = b*T + t of qkv holds q heads [0,H), then k heads [0,Hkv), then v heads [0,Hkv), each D
// wide: qkv (B,T,(H+2*Hkv)*D). Query head h uses kv head h / (H/Hkv). Scale 1/sqrt(D).
// out (B,T,H*D); lse (B,H,T) = log-sum-exp of the scaled scores of each query (saved for backward).
// window > 0: a sliding window (Mistral), key u visible to query t iff t - window < u <= t; 0: causal.
// doc_start (B,T) or nullptr: packed documents, doc_start[b, t] the position in its sequence where
// token t's document starts (non-decreasing in t, each value either the previous one or t); key u is
// visible to query t only if doc_start[b, t] <= u, so no document sees another.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv, int D, int window = 0,
                       const int32_t* doc_start = nullptr);
// dqkv (B,T,(H+2*Hkv)*D) is overwritten with the gradient w.r.t. the (post-rope) q, k, v.
void attention_backward(float* dqkv, const float* dout /*(B,T,H*D)*/, const float* qkv, const float* out /*(B,T,H*D)*/,
                        const float* lse /*(B,H,T)*/, int B, int T, int H, int Hkv, int D, int window = 0,
                        const int32_t* doc_start = nullptr);

// The bias of a linear layer (Qwen2's q/k/v): x[n, :] += bias; backward dbias += sum_n dout[n, :]
// (summed in fp64), the input gradient being dout itself.
void bias_forward(float* x /*(N,OC)*/, const float* bias /*(OC)*/, int N, int OC);
void bias_backward(float* dbias /*(OC)*/, const float* dout /*(N,OC)*/, int N, int OC);

// SwiGLU on a packed gate|up tensor: h13 (N,2F) row n = [gate (F) | up (F)];
// out (N,F) = silu(gate) * up, silu(g) = g * sigmoid(g).
void swiglu_forward(float* out /*(N,F)*/, const float* h13 /*(N,2F)*/, int N, int F);
void swiglu_backward(float* dh13 /*(N,2F)*/, const float* dout /*(N,F)*/, const float* h13 /*(N,2F)*/, int N, int F);

// out = a + b (elementwise, n values). out may alias a or b.
void residual_forward(float* out, const float* a, const float* b, int64_t n);

// Decode attention: one query per head at position pos over the cached keys and values of positions
// 0..pos (what attention_forward computes for row pos of a causal sequence; with window > 0, of
// positions pos - window + 1..pos only). q (H*D); cache rows are (T_cache, 2*Hkv*D), each [k heads |
// v heads]; scores (H, pos + 1) is scratch. out (H*D).
void attention_decode(float* out, float* scores, const float* q, const float* kv_cache, int pos, int H, int Hkv, int D,
                      int window = 0);

// Cross-entropy from full logits. losses[n] = logsumexp(logits[n]) - logits[n, targets[n]];
// targets[n] < 0 (ignore index -100) gives losses[n] = 0.
void cross_entropy_forward(float* losses /*(N)*/, const float* logits /*(N,V)*/, const int32_t* targets /*(N)*/, int N,
                           int V);
// dlogits[n] = dloss * (softmax(logits[n]) - onehot(targets[n])), 0 for ignored rows.
// dloss is d(total loss)/d(losses[n]), the same for every row (e.g. 1/num_valid for a mean).
void cross_entropy_backward(float* dlogits /*(N,V)*/, const float* logits /*(N,V)*/, const int32_t* targets /*(N)*/,
                            float dloss, int N, int V);

// The lm head and cross-entropy together: logits = x @ wout^T, then cross_entropy_forward; backward:
// dlogits as cross_entropy_backward, dx = dlogits @ wout (overwritten), dwout += dlogits^T @ x. The
// logits and their gradient are kept in fp64 (never rounded to fp32): the oracle of the fused kernels,
// which never hold the (N,V) logits. The backward writes the losses too (the fused pass computes both).
// V is the count of real rows: a table with padding rows after them (model/shard.h) is passed with
// that count, and nothing past row V of wout or dwout is read or written.
void lmhead_ce_forward(float* losses /*(N)*/, const float* x /*(N,C)*/, const float* wout /*(V,C)*/,
                       const int32_t* targets /*(N)*/, int N, int C, int V);
void lmhead_ce_backward(float* losses /*(N)*/, float* dx /*(N,C)*/, float* dwout /*(V,C)*/, const float* x /*(N,C)*/,
                        const float* wout /*(V,C)*/, const int32_t* targets /*(N)*/, float dloss, int N, int C, int V);

// Vocabulary-parallel cross-entropy (Megatron's): each of P ranks holds the logits of its V
// vocabulary rows [vocab_begin, vocab_begin + V); row maxima, sums of exponentials and target logits
// are combined over the ranks between the steps (by the caller's communication):
//   max:      local_max[n] = max_v logits[n, v]                              -> all-gathered (P,N)
//   partials: global_max[n] = max over the P maxima; logits[n] <- exp(logits[n] - global_max[n]) in
//             place; partials[n] = (sum_v of those, logits[n, target - vocab_begin] or 0 when the
//             target is another rank's or ignored)                          -> summed over the ranks
//   forward:  losses[n] = global_max[n] + log(sum) - target logit (0 for targets < 0)
//   backward: exps (what partials left in logits) <- dloss * (exp / sum - onehot), 0 for ignored rows;
//             with bf16_values each result is rounded to a bf16 value (the bf16 matmul's operand).
// V counts the rank's real rows (its padding rows, model/shard.h, have no logits); V = 0, a rank of
// padding rows only, gives maxima of -inf and partials of 0.
void vocab_parallel_ce_max(float* local_max /*(N)*/, const float* logits /*(N,V)*/, int N, int V);
void vocab_parallel_ce_partials(float* partials /*(N,2)*/, float* global_max /*(N)*/, float* logits /*(N,V)*/,
                                const float* maxima /*(P,N)*/, int P, const int32_t* targets /*(N)*/,
                                int64_t vocab_begin, int N, int V);
void vocab_parallel_ce_forward(float* losses /*(N)*/, const float* global_max /*(N)*/, const float* partials /*(N,2)*/,
                               const int32_t* targets /*(N)*/, int N);
void vocab_parallel_ce_backward(float* exps /*(N,V)*/, const float* partials /*(N,2)*/, const int32_t* targets /*(N)*/,
                                int64_t vocab_begin, float dloss, int N, int V, bool bf16_values);

// Parameter init: out[i] = value; out[i] = std * random_normal(seed, stream, first + i) (core/rng.h),
// so each element's draw depends on its place in the full tensor only.
void fill_constant(float* out, int64_t n, float value);
void fill_normal(float* out, int64_t n, float std, uint64_t seed, uint32_t stream, uint64_t first);

// AdamW (torch.optim.AdamW semantics, decoupled weight decay, bias correction), one tensor:
//   g = grad * grad_scale; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2
//   param -= lr*weight_decay*param; param -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)
// step t is 1-based. grad_scale folds in global-norm clipping.
void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int step, float grad_scale);

// adamw_update, then param_bf16 (n) = each new param rounded to nearest even (bf16-mixed's matmul copy).
void adamw_update_bf16_copy(float* param, bf16* param_bf16, float* m, float* v, const float* grad, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale);
// bf16-sr: param, m and v held in bf16; each is widened, updated by adamw_update in fp32, and rounded
// stochastically (to_bf16_stochastic) with words 0, 1 and 2 of random_u32x4(seed, step, tensor_id,
// first_element + i) (core/rng.h). param_f32 (may be nullptr) receives the new bf16 params widened.
void adamw_update_bf16_sr(bf16* param, bf16* m, bf16* v, float* param_f32, const float* grad, int64_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale,
                          uint64_t seed, uint32_t tensor_id, uint64_t first_element = 0);

// sum of squares of n values, in fp64 (for global grad-norm clipping); sum: their plain sum in fp64
// (a loss total).
double sum_squares(const float* x, int64_t n);
double sum(const float* x, int64_t n);

}  // namespace llamatrain::ref
