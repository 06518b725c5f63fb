// Internal to kernels/cpu: the one oneDNN matmul entry point that matmul.cpp and lmhead_ce.cpp share,
// per-thread scratch buffers, and the bf16-compute helpers: operands holding bf16 values, the gemm
// through either kernel (oneDNN bf16, or fp32 on bf16 values) and its probe. Implemented in
// matmul.cpp (the only file that includes oneDNN). Transposes are expressed through memory-descriptor
// strides (format tags ab / ba), never by copying. Not thread-safe to call from several caller
// threads at once (one shared scratchpad); kernels are called from one thread and parallelize inside.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/arena.h"
#include "core/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/matmul_choice.h"
#include "kernels/cpu/ops.h"

namespace llamatrain::cpu::detail {

// c (M,N) = op(a) @ op(b), or c += ... when accumulate (oneDNN sum post-op); c is always fp32.
// a is stored row-major as (M,K), or as (K,M) when trans_a; b as (K,N), or as (N,K) when trans_b.
// a and b are both float (is_bf16 == false) or both bf16; accumulation is fp32 either way.
// Primitives are created on first use of each (M, N, K, dtype, trans_a, trans_b, accumulate) and cached.
void gemm(float* c, const void* a, bool trans_a, const void* b, bool trans_b, int M, int N, int K, bool is_bf16,
          bool accumulate);

// The name of the oneDNN implementation gemm() runs for these arguments ("brg:avx512_core_bf16",
// "gemm:jit", ...), creating the primitive if needed; "none" for an empty product.
std::string gemm_impl(bool trans_a, bool trans_b, int M, int N, int K, bool is_bf16, bool accumulate);

// A bf16 buffer of at least n elements owned by the calling thread, one per slot (0..3); contents are
// kept until the next call with the same slot. Grows, never shrinks.
bf16* bf16_scratch(int slot, int64_t n);
// Same for fp32 (slot 0..3). Slots 1..3 hold only fp32-kernel operands (see Scratch below).
float* f32_scratch(int slot, int64_t n);

// round_to_bf16_values, convert_operands, bf16_transpose(_from_float): internal.h (CPU variant kernels).

// A matmul operand of the bf16 modes: the values multiplied are bf16, stored as
//   f32:        float, rounded to nearest even bf16 on use;
//   bf16:       bf16;
//   f32_exact:  float already holding bf16 values (converted by an earlier call, or written rounded).
struct Bf16Operand {
  enum class Form { f32, bf16, f32_exact };
  const void* data;
  Form form;
};
inline Bf16Operand bf16_operand(const float* x) { return {x, Bf16Operand::Form::f32}; }
inline Bf16Operand bf16_operand(const bf16* x) { return {x, Bf16Operand::Form::bf16}; }
inline Bf16Operand bf16_operand(const bf16_in_f32* x) { return {x, Bf16Operand::Form::f32_exact}; }
inline Bf16Operand bf16_operand(Bf16Weight w) {
  return {w.data, w.is_bf16 ? Bf16Operand::Form::bf16 : Bf16Operand::Form::f32_exact};
}
const char* form_name(Bf16Operand::Form f);  // "f32" | "bf16" | "f32exact"

// Which per-thread scratch an operand is converted into: the same slot numbers as the bf16 kernel
// has always used (act0: bf16 slot 0, act1: bf16 slot 1), and fp32 slots 1..3 for the fp32 kernel.
enum class Scratch { act0, act1, weight };

// x (n elements) in the form kernel k multiplies: bf16 (the bf16 kernel) or float holding bf16
// values (the fp32 kernel); x itself when it already is in that form, else converted into scratch s.
const void* kernel_operand(MatmulKernel k, Bf16Operand x, int64_t n, Scratch s);

// Several kernel_operand conversions in one OpenMP region (one fork/join per matmul call instead of
// one per operand; each join waits for every thread, which costs most on a shared machine). add()
// returns where the operand will be (the operand itself when it needs no conversion), valid after
// run(). Each add of a batch must use its own scratch (kernel, Scratch) pair.
class OperandBatch {
 public:
  const void* add(MatmulKernel k, Bf16Operand x, int64_t n, Scratch s);
  void run();

 private:
  OperandConversion jobs_[4];
  int count_ = 0;
};

// c (M,N) [+]= op(a) @ op(b) for operands holding bf16 values, through kernel k (shapes as gemm).
// The bf16 kernel reads a float `a` that is transposed through a plain bf16 copy (bf16 slot 2): oneDNN
// 2.6 runs the dweight-style gemm 5-10% faster with a plain A. b_kernel is b already in k's form.
void gemm_bf16_values(MatmulKernel k, float* c, Bf16Operand a, bool trans_a, const void* b_kernel, bool trans_b, int M,
                      int N, int K, bool accumulate, Scratch a_scratch);

// Probe of one gemm_bf16_values call c (M,N) [+]= op(a) @ op(b): built once, then seconds(k) runs
// kernel k on a slice of Mp <= max_rows rows of op(a) (probe_rows) into its own output, and returns
// the estimated seconds of the whole call: converting b (once per call, timed whole) plus converting
// a's rows and the gemm, scaled by M / Mp. a.data == nullptr gives synthetic operand values (for
// operands that do not exist yet); a transposed a is copied out (Mp of its columns) at construction.
// Never writes the caller's tensors; holds probe-sized buffers only.
class GemmProbe {
 public:
  GemmProbe(Bf16Operand a, bool trans_a, Bf16Operand b, bool trans_b, int M, int N, int K, bool accumulate,
            Scratch a_scratch, Scratch b_scratch, int max_rows);
  // b_kernel: b already in k's form (its conversion is then not timed), instead of converting b.
  double seconds(MatmulKernel k, const void* b_kernel = nullptr);
  int rows() const { return Mp_; }

 private:
  Bf16Operand a_, b_;
  bool trans_a_, trans_b_, accumulate_;
  int M_, N_, K_, Mp_;
  Scratch a_scratch_, b_scratch_;
  ArenaVector<float> a_f32_, c_;  // (Mp,K) or (K,Mp) slice of a when copied; (Mp,N) output
  ArenaVector<bf16> a_bf16_;
};

// Rows of a probe slice of an (M,N,K) gemm: all M when 2*M*N*K fits the probe budget (2 GFLOP per
// OpenMP thread), else fewer: a multiple of 16, at least min(M, 128).
int probe_rows(int M, int N, int K);

// The kernel for a bf16-compute call of `shape` (M,N,K: its largest gemm): fp32 when the CPU has no
// bf16 kernel (MatmulChooser::bf16_available); the policy's when forced;
// `small` without probing when 2*M*N*K is below 1e8 (too small to matter: the kernel that reads the
// call's weight without converting it); else matmul_chooser()'s choice, probing with time_call on
// first use (after which fp32-kernel scratch is released again if no shape chose fp32).
MatmulKernel choose_kernel(const std::string& shape, int M, int N, int K,
                           const std::function<double(MatmulKernel)>& time_call,
                           MatmulKernel small = MatmulKernel::bf16);
// The kernel choose_kernel would return without probing, if known.
std::optional<MatmulKernel> known_kernel(const std::string& shape, int M, int N, int K,
                                         MatmulKernel small = MatmulKernel::bf16);

}  // namespace llamatrain::cpu::detail
