// Matmuls on cuBLASLt: matmul_forward / matmul_backward as kernels/ref's (out = inp @ W^T;
// dinp = dout @ W; dweight += dout^T @ inp), fp32 accumulation always: ComputeType::f32 on fp32
// operands with CUBLAS_COMPUTE_32F (no TF32, so results are checked against fp32 references),
// ComputeType::bf16 on bf16 operands (or, for a weight held as bf16 values in floats, the fp32 gemm on
// those values). One handle, one 32 MiB workspace; per shape the heuristic's first algorithm is
// cached with its descriptors.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

#define CUBLAS_CHECK(call)                                                                           \
  do {                                                                                               \
    cublasStatus_t cublas_check_status_ = (call);                                                    \
    if (cublas_check_status_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::llamatrain::cuda::detail::raise_cublas_error(int(cublas_check_status_), #call, __FILE__, __LINE__); \
  } while (0)

namespace llamatrain::cuda {

namespace detail {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// Largest power of two (at most 256) dividing the address: what the algorithm may assume.
int alignment_of(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && u % uintptr_t(a) != 0) a /= 2;
  return a;
}

using PlanKey = std::tuple<int, int, int, int, int, bool, bool, int, int, int, int, bool>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

struct Gemms {
  std::mutex mutex;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<PlanKey, Plan> plans;

  Gemms() {
    CUBLAS_CHECK(cublasLtCreate(&handle));
    CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  }
};

Gemms& gemms() {
  static Gemms* g = new Gemms();  // never destroyed: kernels may run during static destruction
  return *g;
}

Plan make_plan(cublasLtHandle_t handle, bool trans_a, int lda, bool trans_b, int ldb, int m, int n, int k,
               GemmType type, int align_a, int align_b, int align_c) {
  Plan p;
  const cudaDataType_t ab = type == GemmType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  // Stored shapes: A is (k x m) when transposed, else (m x k); B is (n x k) when transposed, else (k x n).
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, trans_a ? k : m, trans_a ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, trans_b ? n : k, trans_b ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, m, n, m));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  const uint32_t aa = uint32_t(align_a), ba = uint32_t(align_b), ca = uint32_t(align_c);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ba, sizeof(ba)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ca, sizeof(ca)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ca, sizeof(ca)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    fail("cuBLASLt has no algorithm for the {} gemm m={} n={} k={} (trans_a={}, trans_b={}, lda={}, ldb={}; status "
         "{}); hint: check the shapes and that the GPU supports this type",
         type == GemmType::bf16 ? "bf16" : "fp32", m, n, k, trans_a, trans_b, lda, ldb, int(st));
  p.algo = result.algo;
  return p;
}

}  // namespace

void gemm(float* C, const void* A, bool trans_a, int lda, const void* B, bool trans_b, int ldb, int m, int n, int k,
          float beta, GemmType type) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // an empty sum: C = beta * C
    if (beta == 0.0f) fill_zero(C, size_t(m) * n * sizeof(float));
    return;
  }
  Gemms& g = gemms();
  std::lock_guard<std::mutex> lock(g.mutex);
  const int align_a = alignment_of(A), align_b = alignment_of(B), align_c = alignment_of(C);
  const PlanKey key{m, n, k, lda, ldb, trans_a, trans_b, int(type), align_a, align_b, align_c, beta != 0.0f};
  auto it = g.plans.find(key);
  if (it == g.plans.end())
    it = g.plans.emplace(key, make_plan(g.handle, trans_a, lda, trans_b, ldb, m, n, k, type, align_a, align_b, align_c))
             .first;
  const Plan& p = it->second;
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(g.handle, p.desc, &alpha, A, p.a, B, p.b, &beta, C, p.c, C, p.c, &p.algo, g.workspace,
                              kWorkspaceBytes, cuda_stream()));
}

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
template void matmul_forward(float*, const float*, const float*, Bf16Weight, int, int, int, ComputeType);
template void matmul_forward(float*, const bf16*, const float*, Bf16Weight, int, int, int, ComputeType);
template void matmul_forward(float*, const bf16_in_f32*, const float*, Bf16Weight, int, int, int, ComputeType);

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
#define INSTANTIATE_MATMUL_BACKWARD(TD, TI)                                                                   \
  template void matmul_backward(float*, float*, const TD*, const TI*, const float*, Bf16Weight, int, int, int, \
                                ComputeType);
INSTANTIATE_MATMUL_BACKWARD(float, float)
INSTANTIATE_MATMUL_BACKWARD(float, bf16)
INSTANTIATE_MATMUL_BACKWARD(float, bf16_in_f32)
INSTANTIATE_MATMUL_BACKWARD(bf16, float)
INSTANTIATE_MATMUL_BACKWARD(bf16, bf16)
INSTANTIATE_MATMUL_BACKWARD(bf16, bf16_in_f32)
INSTANTIATE_MATMUL_BACKWARD(bf16_in_f32, float)
INSTANTIATE_MATMUL_BACKWARD(bf16_in_f32, bf16)
INSTANTIATE_MATMUL_BACKWARD(bf16_in_f32, bf16_in_f32)

}  // namespace llamatrain::cuda
