// The lm head and cross-entropy in row chunks, as ref::lmhead_ce_forward / lmhead_ce_backward:
// for each chunk of R rows (R * V fp32 logits within kLogitsBytes, whatever N):
//   logits (R,V) = x_chunk @ wout^T                     (cuBLASLt, fp32 accumulation)
//   one block per row: lse = max + log(sum exp(logit - max)) (sum in fp64), loss = lse - logit[target]
//     (0 for target < 0); backward: dlogits = dloss * (softmax - onehot) (0 rows for ignored targets),
//     written in place, or as bf16 for the bf16 gemms
//   dx_chunk (R,C) = dlogits @ wout                      (overwritten)
//   dwout (V,C) += dlogits^T @ x_chunk                  (skipped for a frozen head: dwout == nullptr)
// The (N,V) logits never exist whole.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/bf16.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/rng_device.cuh"
#include "kernels/cuda/sizes.h"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::GemmType;

namespace {

constexpr int64_t kLogitsBytes = sizes::kLogitsBytes;
constexpr int kCeThreads = 512;

enum class Grad { none, f32, bf16_values, bf16 };

int chunk_rows(int N, int V) { return int(sizes::lmhead_chunk_rows(N, V, kLogitsBytes)); }

// One block per row of the chunk: the loss, and with kGrad the row's dlogits.
template <Grad kGrad>
__global__ void cross_entropy_rows_kernel(float* losses, float* logits, bf16* dlogits_bf16, const int32_t* targets,
                                          float dloss, int V) {
  __shared__ float red_f[32];
  __shared__ double red_d[32];
  const int64_t r = blockIdx.x;
  float* row = logits + r * V;
  const int t = targets[r];
  // Read before any thread overwrites the row with its gradient (the barriers below order it).
  const float target_logit = t >= 0 ? row[t] : 0.0f;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, row[v]);
  mx = detail::block_max(mx, red_f);
  double sum = 0.0;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += double(expf(row[v] - mx));
  sum = detail::block_sum(sum, red_d);
  const float lse = mx + float(log(sum));
  if (threadIdx.x == 0) losses[r] = t < 0 ? 0.0f : lse - target_logit;
  if constexpr (kGrad != Grad::none) {
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
      const float d = t < 0 ? 0.0f : dloss * (expf(row[v] - lse) - (v == t ? 1.0f : 0.0f));
      if constexpr (kGrad == Grad::bf16)
        dlogits_bf16[r * V + v].bits = rng::bf16_bits_rne(d);
      else if constexpr (kGrad == Grad::bf16_values)
        row[v] = rng::bf16_bits_to_float(rng::bf16_bits_rne(d));
      else
        row[v] = d;
    }
  }
}

struct HeadOperand {
  GemmType type;
  const void* data;
  bool bf16_values;
};

HeadOperand head_operand(const float* wout, Bf16Weight wout_bf16, ComputeType ct) {
  if (ct == ComputeType::f32) return {GemmType::f32, wout, false};
  if (!wout_bf16.data)
    detail::raise_error("cuda::lmhead_ce: bf16 compute without the lm head's bf16 copy; hint: pass wout_bf16");
  return {wout_bf16.is_bf16 ? GemmType::bf16 : GemmType::f32, wout_bf16.data, true};
}

void lmhead_ce(float* losses, float* dx, float* dwout, const float* x, const float* wout, Bf16Weight wout_bf16,
               const int32_t* targets, float dloss, int N, int C, int V, ComputeType ct) {
  if (N <= 0) return;
  const HeadOperand w = head_operand(wout, wout_bf16, ct);
  const int R = chunk_rows(N, V);
  auto* logits = static_cast<float*>(detail::scratch(detail::kScratchLogits, size_t(R) * V * sizeof(float)));
  const bool backward = dx != nullptr;
  const Grad grad = !backward                  ? Grad::none
                    : w.type == GemmType::bf16 ? Grad::bf16
                    : w.bf16_values            ? Grad::bf16_values
                                               : Grad::f32;
  bf16* dl_bf16 = grad == Grad::bf16
                      ? static_cast<bf16*>(detail::scratch(detail::kScratchDlogits, size_t(R) * V * sizeof(bf16)))
                      : nullptr;
  for (int r0 = 0; r0 < N; r0 += R) {
    const int rows = std::min(R, N - r0);
    const void* xc =
        detail::operand(x + int64_t(r0) * C, int64_t(rows) * C, w.type, w.bf16_values, detail::kScratchInpBf16);
    // logits (rows,V) = x_chunk (rows,C) @ wout (V,C)^T: column-major logits^T (V x rows) = op_T(wout stored C x V)
    // @ x_chunk^T (C x rows). m = V, n = rows, k = C, lda = ldb = C.
    detail::gemm(logits, w.data, true, C, xc, false, C, V, rows, C, 0.0f, w.type);
    switch (grad) {
      case Grad::none:
        cross_entropy_rows_kernel<Grad::none>
            <<<rows, kCeThreads, 0, cuda_stream()>>>(losses + r0, logits, nullptr, targets + r0, dloss, V);
        break;
      case Grad::f32:
        cross_entropy_rows_kernel<Grad::f32>
            <<<rows, kCeThreads, 0, cuda_stream()>>>(losses + r0, logits, nullptr, targets + r0, dloss, V);
        break;
      case Grad::bf16_values:
        cross_entropy_rows_kernel<Grad::bf16_values>
            <<<rows, kCeThreads, 0, cuda_stream()>>>(losses + r0, logits, nullptr, targets + r0, dloss, V);
        break;
      case Grad::bf16:
        cross_entropy_rows_kernel<Grad::bf16>
            <<<rows, kCeThreads, 0, cuda_stream()>>>(losses + r0, logits, dl_bf16, targets + r0, dloss, V);
        break;
    }
    CUDA_CHECK_LAUNCH("cross_entropy_rows_kernel");
    if (!backward) continue;
    const void* dl = grad == Grad::bf16 ? static_cast<const void*>(dl_bf16) : logits;
    // dx_chunk (rows,C) = dlogits (rows,V) @ wout (V,C): column-major dx^T (C x rows) = wout stored (C x V), op N,
    // @ dlogits stored (V x rows), op N. m = C, n = rows, k = V, lda = C, ldb = V.
    detail::gemm(dx + int64_t(r0) * C, w.data, false, C, dl, false, V, C, rows, V, 0.0f, w.type);
    // dwout (V,C) += dlogits^T (V,rows) @ x_chunk (rows,C): column-major dwout^T (C x V) += x_chunk stored (C x rows),
    // op N, @ dlogits stored (V x rows), op T -> (rows x V). m = C, n = V, k = rows, lda = C, ldb = V.
    if (dwout) detail::gemm(dwout, xc, false, C, dl, true, V, C, V, rows, 1.0f, w.type);
  }
}

}  // namespace

void lmhead_ce_forward(float* losses, const float* x, const float* wout, Bf16Weight wout_bf16, const int32_t* targets,
                       int N, int C, int V, ComputeType ct) {
  lmhead_ce(losses, nullptr, nullptr, x, wout, wout_bf16, targets, 0.0f, N, C, V, ct);
}

void lmhead_ce_backward(float* losses, float* dx, float* dwout, const float* x, const float* wout, Bf16Weight wout_bf16,
                        const int32_t* targets, float dloss, int N, int C, int V, ComputeType ct) {
  if (!dx) detail::raise_error("cuda::lmhead_ce_backward: dx is nullptr; hint: pass the (N,C) gradient buffer");
  lmhead_ce(losses, dx, dwout, x, wout, wout_bf16, targets, dloss, N, C, V, ct);
}

int64_t lmhead_ce_scratch_bytes(int N, int C, int V, ComputeType ct, bool float_weight) {
  return sizes::lmhead_scratch_bytes(N, C, V, ct == ComputeType::bf16, float_weight, kLogitsBytes);
}

}  // namespace llamatrain::cuda
