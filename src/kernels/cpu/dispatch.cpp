// The llamatrain::cpu kernels of ops_list.inc and the detail ones of internal_list.inc: each call goes
// to the CPU variant chosen once for this CPU (variant.h). The portable x86-64 build has two,
// avx2 and avx512 (LLAMATRAIN_CPU_DUAL); a build with one variant (-march=native, or not x86-64)
// calls it directly (LLAMATRAIN_CPU_SINGLE names its namespace). The choice costs one predictable
// branch per kernel call.
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/operand_types.h"
#include "kernels/cpu/ops.h"

#if defined(LLAMATRAIN_CPU_DUAL)
namespace llamatrain::cpu::avx2 {
#include "kernels/cpu/ops_list.inc"
namespace detail {
#include "kernels/cpu/internal_list.inc"
}  // namespace detail
}  // namespace llamatrain::cpu::avx2
namespace llamatrain::cpu::avx512 {
#include "kernels/cpu/ops_list.inc"
namespace detail {
#include "kernels/cpu/internal_list.inc"
}  // namespace detail
}  // namespace llamatrain::cpu::avx512
#elif defined(LLAMATRAIN_CPU_SINGLE)
namespace llamatrain::cpu::LLAMATRAIN_CPU_SINGLE {
#include "kernels/cpu/ops_list.inc"
namespace detail {
#include "kernels/cpu/internal_list.inc"
}  // namespace detail
}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_SINGLE
#else
#error "kernels/cpu/dispatch.cpp: define LLAMATRAIN_CPU_DUAL or LLAMATRAIN_CPU_SINGLE (see CMakeLists.txt)"
#endif

namespace llamatrain::cpu {

namespace {

#define LLAMATRAIN_STR2(x) #x
#define LLAMATRAIN_STR(x) LLAMATRAIN_STR2(x)

std::string requested_variant() {
  const char* v = std::getenv("LLAMATRAIN_CPU_KERNELS");
  return v != nullptr && *v != '\0' ? std::string(v) : std::string("auto");
}

#if defined(LLAMATRAIN_CPU_DUAL)
// AVX-512 F, CD, BW, DQ and VL (x86-64-v4), with the OS saving their registers (libgcc checks XCR0).
bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

bool choose_avx512() {
  const std::string want = requested_variant();
  if (want == "auto") return cpu_has_avx512();
  if (want == "avx2") return false;
  if (want == "avx512") {
    if (!cpu_has_avx512())
      fail("LLAMATRAIN_CPU_KERNELS=avx512, but this CPU lacks AVX-512 (F, CD, BW, DQ and VL)\nhint: unset "
           "LLAMATRAIN_CPU_KERNELS, or set it to auto or avx2");
    return true;
  }
  fail("LLAMATRAIN_CPU_KERNELS={}: expected auto, avx2 or avx512\nhint: unset it to use the widest this CPU has", want);
}

bool use_avx512() {
  static const bool avx512 = choose_avx512();
  return avx512;
}

#define CALL(fn, ...) (use_avx512() ? avx512::fn(__VA_ARGS__) : avx2::fn(__VA_ARGS__))
#else
const char* single_variant() {
  static const char* name = [] {
    const std::string want = requested_variant();
    const char* own = LLAMATRAIN_STR(LLAMATRAIN_CPU_SINGLE);
    if (want != "auto" && want != own)
      fail("LLAMATRAIN_CPU_KERNELS={}: this build has only the {} kernels\nhint: unset it, or configure the "
           "portable x86-64 build (without -DLLAMATRAIN_NATIVE=ON) for the avx2 and avx512 variants",
           want, own);
    return own;
  }();
  return name;
}

#define CALL(fn, ...) (single_variant(), LLAMATRAIN_CPU_SINGLE::fn(__VA_ARGS__))
#endif

}  // namespace

const char* cpu_kernels_variant() {
#if defined(LLAMATRAIN_CPU_DUAL)
  return use_avx512() ? "avx512" : "avx2";
#else
  return single_variant();
#endif
}

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C) {
  CALL(embedding_forward, out, tokens, wte, N, C);
}
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C) {
  CALL(embedding_backward, dwte, dout, tokens, N, C);
}
void vocab_parallel_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin, int V,
                                      int N, int C) {
  CALL(vocab_parallel_embedding_forward, out, tokens, wte, vocab_begin, V, N, C);
}
void vocab_parallel_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t vocab_begin,
                                       int V, int N, int C) {
  CALL(vocab_parallel_embedding_backward, dwte, dout, tokens, vocab_begin, V, N, C);
}

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const float* x, const float* weight, int N, int C, float eps) {
  CALL(rmsnorm_forward, out, rstd, x, weight, N, C, eps);
}
LLAMATRAIN_CPU_FOR_EACH_OPERAND(LLAMATRAIN_CPU_INSTANTIATE_RMSNORM_FORWARD)
void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rstd, int N, int C) {
  CALL(rmsnorm_backward, dx, dweight, dout, x, weight, rstd, N, C);
}

void rope_forward(float* x, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope) {
  CALL(rope_forward, x, pos, N, n_heads, row_stride, D, rope);
}
void rope_backward(float* dx, const int32_t* pos, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope,
                   bool round_rows) {
  CALL(rope_backward, dx, pos, N, n_heads, row_stride, D, rope, round_rows);
}

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv, int D, int window,
                       const int32_t* doc_start) {
  CALL(attention_forward, out, lse, qkv, B, T, H, Hkv, D, window, doc_start);
}
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                        int T, int H, int Hkv, int D, int window, const int32_t* doc_start) {
  CALL(attention_backward, dqkv, dout, qkv, out, lse, B, T, H, Hkv, D, window, doc_start);
}
void attention_decode(float* out, float* scores, const float* q, const float* kv_cache, int pos, int H, int Hkv, int D,
                      int window) {
  CALL(attention_decode, out, scores, q, kv_cache, pos, H, Hkv, D, window);
}

void bias_forward(float* x, const float* bias, int N, int OC) { CALL(bias_forward, x, bias, N, OC); }
void bias_backward(float* dbias, const float* dout, int N, int OC) { CALL(bias_backward, dbias, dout, N, OC); }

template <typename T>
void swiglu_forward(T* out, const float* h13, int N, int F) {
  CALL(swiglu_forward, out, h13, N, F);
}
template <typename T>
void swiglu_backward(T* dh13, const float* dout, const float* h13, int N, int F) {
  CALL(swiglu_backward, dh13, dout, h13, N, F);
}
LLAMATRAIN_CPU_FOR_EACH_OPERAND(LLAMATRAIN_CPU_INSTANTIATE_SWIGLU)

void residual_forward(float* out, const float* a, const float* b, int64_t n) { CALL(residual_forward, out, a, b, n); }

void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int step, float grad_scale) {
  CALL(adamw_update, param, m, v, grad, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
}
template <typename T>
void adamw_update_bf16_copy(float* param, T* param_bf16, float* m, float* v, const float* grad, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale) {
  CALL(adamw_update_bf16_copy, param, param_bf16, m, v, grad, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
}
LLAMATRAIN_CPU_FOR_EACH_BF16_COPY(LLAMATRAIN_CPU_INSTANTIATE_ADAMW_UPDATE_BF16_COPY)
void adamw_update_bf16_sr(bf16* param, bf16* m, bf16* v, float* param_f32, const float* grad, int64_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale,
                          uint64_t seed, uint32_t tensor_id, uint64_t first_element) {
  CALL(adamw_update_bf16_sr, param, m, v, param_f32, grad, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale,
       seed, tensor_id, first_element);
}

double sum_squares(const float* x, int64_t n) { return CALL(sum_squares, x, n); }
double sum(const float* x, int64_t n) { return CALL(sum, x, n); }

void vocab_parallel_ce_max(float* local_max, const float* logits, int N, int V) {
  CALL(vocab_parallel_ce_max, local_max, logits, N, V);
}
void vocab_parallel_ce_partials(float* partials, float* global_max, float* logits, const float* maxima, int P,
                                const int32_t* targets, int64_t vocab_begin, int N, int V) {
  CALL(vocab_parallel_ce_partials, partials, global_max, logits, maxima, P, targets, vocab_begin, N, V);
}
void vocab_parallel_ce_forward(float* losses, const float* global_max, const float* partials, const int32_t* targets,
                               int N) {
  CALL(vocab_parallel_ce_forward, losses, global_max, partials, targets, N);
}
void vocab_parallel_ce_backward(float* exps, const float* partials, const int32_t* targets, int64_t vocab_begin,
                                float dloss, int N, int V, bool bf16_values) {
  CALL(vocab_parallel_ce_backward, exps, partials, targets, vocab_begin, dloss, N, V, bf16_values);
}

void fill_constant(float* out, int64_t n, float value) { CALL(fill_constant, out, n, value); }
void fill_normal(float* out, int64_t n, float std, uint64_t seed, uint32_t stream, uint64_t first) {
  CALL(fill_normal, out, n, std, seed, stream, first);
}

namespace detail {

void lmhead_ce_rows(float* losses, float* lc, bf16* dlog_bf16, const int32_t* targets, int n0, int rows, int V,
                    float dloss, bool backward, bool round_values) {
  CALL(detail::lmhead_ce_rows, losses, lc, dlog_bf16, targets, n0, rows, V, dloss, backward, round_values);
}
void convert_operands(const OperandConversion* jobs, int count) { CALL(detail::convert_operands, jobs, count); }
void bf16_transpose_from_float(bf16* xt, const float* x, int R, int C) {
  CALL(detail::bf16_transpose_from_float, xt, x, R, C);
}
void bf16_transpose(bf16* xt, const bf16* x, int R, int C) { CALL(detail::bf16_transpose, xt, x, R, C); }
void round_to_bf16_values(float* out, const float* x, int64_t n) { CALL(detail::round_to_bf16_values, out, x, n); }

}  // namespace detail

}  // namespace llamatrain::cpu
