// The emulator's stand-ins for runtime.cpp and gemm.cpp: host memory for device memory, copies as
// memcpy, one emulated device, and detail::gemm as a plain fp64 loop over the column-major operands
// (so matmul.cpp's and lmhead_ce.cu's row-major to column-major mapping is checked against ref::).
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include "core/error.h"
#include "core/bf16.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
namespace llamatrain::cuda {
namespace detail {
void raise_cuda_error(cudaError_t err, const char* call, const char* file, int line) { throw Error(std::string("emu cuda error ") + call); }
void raise_cublas_error(int status, const char* call, const char* file, int line) { throw Error("emu cublas"); }
void raise_error(const std::string& m) { throw Error(m); }
cudaStream_t cuda_stream() { return nullptr; }
void* scratch(int slot, size_t bytes) {
  static void* blocks[kScratchSlots] = {};
  static size_t sizes[kScratchSlots] = {};
  if (bytes > sizes[slot]) { std::free(blocks[slot]); blocks[slot] = std::aligned_alloc(256, (bytes + 255) / 256 * 256); std::memset(blocks[slot], 0xff, (bytes + 255) / 256 * 256); sizes[slot] = bytes; }
  return blocks[slot];
}
// Column-major C (m x n) = op(A) op(B) + beta C, naively in fp64.
void gemm(float* C, const void* A, bool ta, int lda, const void* B, bool tb, int ldb, int m, int n, int k, float beta, GemmType type) {
  auto get = [&](const void* p, size_t i) -> double {
    return type == GemmType::bf16 ? double(to_float(static_cast<const bf16*>(p)[i])) : double(static_cast<const float*>(p)[i]);
  };
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int l = 0; l < k; l++) {
        const size_t ia = ta ? size_t(l) + size_t(i) * lda : size_t(i) + size_t(l) * lda;
        const size_t ib = tb ? size_t(j) + size_t(l) * ldb : size_t(l) + size_t(j) * ldb;
        s += get(A, ia) * get(B, ib);
      }
      float& c = C[size_t(i) + size_t(j) * m];
      c = float(s + (beta != 0.0f ? double(beta) * c : 0.0));
    }
}
}  // namespace detail
int device_count() { return 1; }
bool available() { return true; }
std::string no_device_reason() { return ""; }
std::string device_name() { return "emulator"; }
void* stream() { return reinterpret_cast<void*>(1); }
void* device_alloc(size_t bytes) {
  if (bytes > (size_t(1) << 40)) throw Error("emu: out of memory");
  return std::aligned_alloc(256, (bytes + 255) / 256 * 256);
}
void device_free(void* p) { std::free(p); }
void copy_to_device(void* d, const void* s, size_t b) { std::memcpy(d, s, b); }
void copy_to_host(void* d, const void* s, size_t b) { std::memcpy(d, s, b); }
void copy_device(void* d, const void* s, size_t b) { std::memmove(d, s, b); }
void fill_zero(void* p, size_t b) { std::memset(p, 0, b); }
void synchronize() {}
int64_t device_memory_used() { return 0; }  // host memory stands in for the device's
int64_t device_memory_total() { return 0; }
}  // namespace llamatrain::cuda
