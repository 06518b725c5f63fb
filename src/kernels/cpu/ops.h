// Fast CPU kernels: the same ops as kernels/ref/ops.h, same names, same argument order and the same
// accumulation rules, plus a ComputeType for matmuls. Each is tested against its ref:: twin on
// awkward sizes (tests/kernels/cpu_vs_ref_*_test.cpp). OpenMP inside; callers never spawn threads.
// This is the folder's only public header: the rest of kernels/cpu is internal to it, its tests and
// benches, except matmul_choice.h and matmul_peak.h, which model/machine.h alone wraps.
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
//   - one binary serves every x86-64 CPU with AVX2: the loops of the kernels (everything but the
//     matmuls, which oneDNN dispatches itself) are compiled once per CPU variant, AVX2 and AVX-512,
//     and each call goes to the one chosen for this CPU at run time (variant.h, dispatch.cpp).
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

// The kernels compiled once per CPU variant, dispatched at run time (kernels/cpu/variant.h).
#include "kernels/cpu/ops_list.inc"

// Compiled once: oneDNN dispatches its kernels itself; the work around them (operand
// conversions, the softmax rows of the lm head) goes through the variant kernels above.
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

// The CPU variant the kernels of ops_list.inc run on this CPU: "avx512" (x86-64 with AVX-512 F, CD,
// BW, DQ and VL) or "avx2" (AVX2 and FMA) in the portable x86-64 build, the widest this CPU has;
// "native" or "generic" in a build with one variant (-march=native, or not x86-64).
// LLAMATRAIN_CPU_KERNELS=avx2|avx512|auto picks one; an Error names a variant this CPU or build lacks.
// Chosen once, on first use.
const char* cpu_kernels_variant();

}  // namespace llamatrain::cpu
