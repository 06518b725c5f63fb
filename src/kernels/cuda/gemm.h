// Internal to kernels/cuda: the one cuBLASLt call behind every matmul (defined in gemm.cpp) and the
// operand conversions around it (matmul.cpp), for matmul.cpp and lmhead_ce.cu.
// Layout: our tensors are row-major; cuBLASLt is column-major. A row-major (R, K) array with row
// stride K is, read column-major, the (K, R) matrix with leading dimension K: its transpose. So a
// row-major product Y = X @ W^T is computed as the column-major Y^T = W' X^T where W' = op(W), and
// each call site below writes down its mapping.
#pragma once

#include <cstdint>

#include "core/bf16.h"

namespace llamatrain::cuda::detail {

enum class GemmType { f32, bf16 };  // the type of both A and B; C is always fp32, accumulation fp32

// Column-major C (m x n, ldc = m) = op(A) (m x k) @ op(B) (k x n) + beta * C, on the module's stream.
// op(A) = A^T when trans_a (A stored k x m, lda >= k), else A (stored m x k, lda >= m); B likewise.
// beta: 0 (overwrite) or 1 (accumulate). The algorithm is chosen once per shape, types and pointer
// alignments, and cached.
void gemm(float* C, const void* A, bool trans_a, int lda, const void* B, bool trans_b, int ldb, int m, int n, int k,
          float beta, GemmType type);

// n values of a matmul operand in the form a gemm of `type` reads: as is when already so, else
// converted into scratch slot `slot`: bf16 (nearest even) for GemmType::bf16; for GemmType::f32,
// floats holding bf16 values when `bf16_values` (a float operand is rounded), else floats as they are.
const void* operand(const float* p, int64_t n, GemmType type, bool bf16_values, int slot);
const void* operand(const bf16* p, int64_t n, GemmType type, bool bf16_values, int slot);
const void* operand(const bf16_in_f32* p, int64_t n, GemmType type, bool bf16_values, int slot);

}  // namespace llamatrain::cuda::detail
