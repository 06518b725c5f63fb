// Matmuls: matmul_forward / matmul_backward as kernels/ref's (out = inp @ W^T; dinp = dout @ W;
// dweight += dout^T @ inp) on detail::gemm (gemm.cpp, cuBLASLt), fp32 accumulation always:
// ComputeType::f32 on fp32 operands, ComputeType::bf16 on bf16 operands (or, for a weight held as
// bf16 values in floats, the fp32 gemm on those values); operands of another form are converted
// into scratch first (detail::operand).
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/operand_types.h"

namespace llamatrain::cuda {

namespace detail {

namespace {

template <typename T>
const void* operand_of(const T* p, int64_t n, GemmType type, bool bf16_values, int slot) {
  if (type == GemmType::bf16) {
    if constexpr (std::is_same_v<T, bf16>) return p;
    auto* out = static_cast<bf16*>(scratch(slot, size_t(n) * sizeof(bf16)));
    cuda::bf16_from_float(out, reinterpret_cast<const float*>(p), n);  // bf16_in_f32 values round exactly
    return out;
  }
  if constexpr (std::is_same_v<T, bf16>) {
    auto* out = static_cast<float*>(scratch(slot, size_t(n) * sizeof(float)));
    cuda::float_from_bf16(out, p, n);
    return out;
  } else if constexpr (std::is_same_v<T, float>) {
    if (!bf16_values) return p;
    auto* out = static_cast<bf16_in_f32*>(scratch(slot, size_t(n) * sizeof(float)));
    cuda::bf16_from_float(out, p, n);
    return out;
  } else {
    return p;  // bf16_in_f32: already bf16 values in floats
  }
}

}  // namespace

const void* operand(const float* p, int64_t n, GemmType type, bool bf16_values, int slot) {
  return operand_of(p, n, type, bf16_values, slot);
}
const void* operand(const bf16* p, int64_t n, GemmType type, bool bf16_values, int slot) {
  return operand_of(p, n, type, bf16_values, slot);
}
const void* operand(const bf16_in_f32* p, int64_t n, GemmType type, bool bf16_values, int slot) {
  return operand_of(p, n, type, bf16_values, slot);
}

}  // namespace detail

namespace {

using detail::GemmType;

// The gemm type and the weight operand of a call: fp32 on the fp32 weight, bf16 on a bf16 copy, or
// fp32 on bf16 values held in floats.
struct WeightOperand {
  GemmType type;
  const void* data;
  bool bf16_values;  // the other operands must be rounded to bf16 values too
};

WeightOperand weight_operand(const float* weight, Bf16Weight weight_bf16, ComputeType ct, const char* op) {
  if (ct == ComputeType::f32) return {GemmType::f32, weight, false};
  if (!weight_bf16.data) fail("cuda::{}: bf16 compute without the weight's bf16 copy; hint: pass weight_bf16", op);
  if (weight_bf16.is_bf16) return {GemmType::bf16, weight_bf16.data, true};
  return {GemmType::f32, weight_bf16.data, true};
}

}  // namespace

template <typename TI>
void matmul_forward(float* out, const TI* inp, const float* weight, Bf16Weight weight_bf16, int N, int IC, int OC,
                    ComputeType ct) {
  const WeightOperand w = weight_operand(weight, weight_bf16, ct, "matmul_forward");
  const void* x = detail::operand(inp, int64_t(N) * IC, w.type, w.bf16_values, detail::kScratchInpBf16);
  // Row-major out (N,OC) = inp (N,IC) @ W (OC,IC)^T, as column-major out^T (OC x N) = W^T' ... :
  // A = W stored (IC x OC) column-major, op T -> (OC x IC); B = inp stored (IC x N), op N.
  // m = OC, n = N, k = IC, lda = ldb = IC.
  detail::gemm(out, w.data, true, IC, x, false, IC, OC, N, IC, 0.0f, w.type);
}
LLAMATRAIN_CUDA_FOR_EACH_OPERAND(LLAMATRAIN_CUDA_INSTANTIATE_MATMUL_FORWARD)

template <typename TD, typename TI>
void matmul_backward(float* dinp, float* dweight, const TD* dout, const TI* inp, const float* weight,
                     Bf16Weight weight_bf16, int N, int IC, int OC, ComputeType ct) {
  if (!dinp && !dweight) return;
  const WeightOperand w = weight_operand(weight, weight_bf16, ct, "matmul_backward");
  const void* dy = detail::operand(dout, int64_t(N) * OC, w.type, w.bf16_values, detail::kScratchDoutBf16);
  if (dinp) {
    // Row-major dinp (N,IC) = dout (N,OC) @ W (OC,IC): column-major dinp^T (IC x N) = W^T (IC x OC) @ dout^T (OC x N).
    // A = W stored (IC x OC), op N; B = dout stored (OC x N), op N. m = IC, n = N, k = OC, lda = IC, ldb = OC.
    detail::gemm(dinp, w.data, false, IC, dy, false, OC, IC, N, OC, 0.0f, w.type);
  }
  if (dweight) {
    const void* x = detail::operand(inp, int64_t(N) * IC, w.type, w.bf16_values, detail::kScratchInpBf16);
    // Row-major dW (OC,IC) += dout^T (OC,N) @ inp (N,IC): column-major dW^T (IC x OC) += inp^T (IC x N) @ dout (N x OC).
    // A = inp stored (IC x N), op N; B = dout stored (OC x N), op T -> (N x OC). m = IC, n = OC, k = N,
    // lda = IC, ldb = OC, beta = 1.
    detail::gemm(dweight, x, false, IC, dy, true, OC, IC, OC, N, 1.0f, w.type);
  }
}
LLAMATRAIN_CUDA_FOR_EACH_OPERAND_PAIR(LLAMATRAIN_CUDA_INSTANTIATE_MATMUL_BACKWARD)

bool bf16_operands_as_floats(int, int, int) { return false; }
std::optional<bool> bf16_operands_as_floats_known(int, int, int) { return false; }

}  // namespace llamatrain::cuda
