// detail::gemm (gemm.h) on cuBLASLt: CUBLAS_COMPUTE_32F (fp32 accumulation, no TF32, so fp32 results
// are checked against fp32 references) on fp32 or bf16 A and B, fp32 C. One handle, one 32 MiB
// workspace; per shape, types and pointer alignments the heuristic's first algorithm is cached with
// its descriptors. cuBLASLt itself is opened on the first matmul (cublaslt_library.h).
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cublaslt_library.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/sizes.h"
#include "kernels/cuda/ops.h"  // fill_zero

#define CUBLAS_CHECK(call)                                                                                  \
  do {                                                                                                      \
    cublasStatus_t cublas_check_status_ = (call);                                                           \
    if (cublas_check_status_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::llamatrain::cuda::detail::raise_cublas_error(int(cublas_check_status_), #call, __FILE__, __LINE__); \
  } while (0)

namespace llamatrain::cuda {

namespace detail {

namespace {

constexpr size_t kWorkspaceBytes = size_t(sizes::kGemmWorkspaceBytes);

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
  const CublasLt& lt = cublaslt();
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<PlanKey, Plan> plans;

  Gemms() {
    CUBLAS_CHECK(lt.create(&handle));
    CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  }
};

Gemms& gemms() {
  static Gemms* g = new Gemms();  // never destroyed: kernels may run during static destruction
  return *g;
}

Plan make_plan(const CublasLt& lt, cublasLtHandle_t handle, bool trans_a, int lda, bool trans_b, int ldb, int m, int n,
               int k, GemmType type, int align_a, int align_b, int align_c) {
  Plan p;
  const cudaDataType_t ab = type == GemmType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  CUBLAS_CHECK(lt.desc_create(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(lt.desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(lt.desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  // Stored shapes: A is (k x m) when transposed, else (m x k); B is (n x k) when transposed, else (k x n).
  CUBLAS_CHECK(lt.layout_create(&p.a, ab, trans_a ? k : m, trans_a ? m : k, lda));
  CUBLAS_CHECK(lt.layout_create(&p.b, ab, trans_b ? n : k, trans_b ? k : n, ldb));
  CUBLAS_CHECK(lt.layout_create(&p.c, CUDA_R_32F, m, n, m));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(lt.preference_create(&pref));
  const size_t ws = kWorkspaceBytes;
  const uint32_t aa = uint32_t(align_a), ba = uint32_t(align_b), ca = uint32_t(align_c);
  CUBLAS_CHECK(lt.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  CUBLAS_CHECK(lt.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
  CUBLAS_CHECK(lt.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ba, sizeof(ba)));
  CUBLAS_CHECK(lt.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ca, sizeof(ca)));
  CUBLAS_CHECK(lt.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ca, sizeof(ca)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = lt.algo_get_heuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  lt.preference_destroy(pref);
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
    it = g.plans
             .emplace(key,
                      make_plan(g.lt, g.handle, trans_a, lda, trans_b, ldb, m, n, k, type, align_a, align_b, align_c))
             .first;
  const Plan& p = it->second;
  const float alpha = 1.0f;
  CUBLAS_CHECK(g.lt.matmul(g.handle, p.desc, &alpha, A, p.a, B, p.b, &beta, C, p.c, C, p.c, &p.algo, g.workspace,
                           kWorkspaceBytes, cuda_stream()));
  CUDA_CHECK_LAUNCH("cublasLtMatmul");
}

}  // namespace detail

}  // namespace llamatrain::cuda
