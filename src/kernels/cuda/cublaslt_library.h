// Internal to kernels/cuda: libcublasLt opened on the first matmul rather than at program start.
// Loading it costs every process about 200 MB of memory and a tenth of a second (measured with a
// program that only links it), which `plan`, `diagnose`, `preprocess` and the other commands that never
// touch the GPU would pay in the CUDA build, inside a batch script's memory limit too. The functions
// are the header's, resolved by name, so the calls read as cuBLASLt's own.
#pragma once

#include <cublasLt.h>

#include <string>
#include <vector>

namespace llamatrain::cuda::detail {

struct CublasLt {
  void* handle = nullptr;  // dlopen's
  std::string path;        // the name that opened it
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set_attribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute = nullptr;
};

// The library's names to try, in order: its soname (found as the loader would have: LD_LIBRARY_PATH,
// the program's run path, the system's cache), then the file this build was linked against.
std::vector<std::string> cublaslt_candidates();

// Opens the first candidate that loads and resolves every function above; throws Error naming each
// candidate tried, why it failed and how to fix it. The library stays open.
CublasLt open_cublaslt(const std::vector<std::string>& candidates);

// The process's one copy, opened on first use (thread-safe).
const CublasLt& cublaslt();

}  // namespace llamatrain::cuda::detail
