// The emulator's stand-ins for src/kernels/cuda/runtime.cpp and gemm.cpp: one emulated device
// ("CUDA emulator") whose memory is emu_memory.h's, copies that open device memory for their
// duration, a stream on which everything has finished by the time a call returns, and detail::gemm
// as a plain loop in fp64 over the column-major operands (so matmul.cpp's and lmhead_ce.cu's
// row-major to column-major mapping is checked against ref::). Errors are the real runtime's
// llamatrain::Error messages.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/bf16.h"
#include "core/error.h"
#include "emu_memory.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

namespace llamatrain::cuda {

namespace detail {

void raise_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw Error(fmt::format("CUDA call {} failed: {} ({}) at {}:{}", call, cudaGetErrorString(err),
                          cudaGetErrorName(err), file, line),
              err == cudaErrorMemoryAllocation                                  ? "gpu_oom"
              : err == cudaErrorLaunchFailure || err == cudaErrorIllegalAddress ? "gpu_fault"
                                                                                : "gpu");
}

void raise_cublas_error(int status, const char* call, const char* file, int line) {
  throw Error(fmt::format("cuBLASLt call {} failed with status {} at {}:{}", call, status, file, line));
}

void raise_error(const std::string& message) { throw Error(message); }

cudaStream_t cuda_stream() { return reinterpret_cast<cudaStream_t>(uintptr_t(1)); }
bool sync_each_kernel() { return false; }  // (every launch has finished when it returns)

void* scratch(int slot, size_t bytes) {
  static void* blocks[kScratchSlots] = {};
  static size_t sizes[kScratchSlots] = {};
  CHECK(slot >= 0 && slot < kScratchSlots, "scratch slot {}", slot);
  if (bytes > sizes[slot]) {
    emu::device_release(blocks[slot]);
    const size_t want = bytes + bytes / 8;
    blocks[slot] = emu::device_malloc(want);
    if (!blocks[slot]) throw Error(fmt::format("cudaMalloc of {} bytes of scratch failed: out of memory", want), "gpu_oom");
    sizes[slot] = want;
  }
  return blocks[slot];
}

// Column-major C (m x n) = op(A) op(B) + beta C, in fp64.
void gemm(float* C, const void* A, bool ta, int lda, const void* B, bool tb, int ldb, int m, int n, int k, float beta,
          GemmType type) {
  emu::DeviceAccess access;
  auto get = [&](const void* p, size_t i) -> double {
    return type == GemmType::bf16 ? double(to_float(static_cast<const bf16*>(p)[i]))
                                  : double(static_cast<const float*>(p)[i]);
  };
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int l = 0; l < k; l++) {
        const size_t ia = ta ? size_t(l) + size_t(i) * size_t(lda) : size_t(i) + size_t(l) * size_t(lda);
        const size_t ib = tb ? size_t(j) + size_t(l) * size_t(ldb) : size_t(l) + size_t(j) * size_t(ldb);
        s += get(A, ia) * get(B, ib);
      }
      float& c = C[size_t(i) + size_t(j) * size_t(m)];
      c = float(s + (beta != 0.0f ? double(beta) * double(c) : 0.0));
    }
}

}  // namespace detail

namespace {

void check_device(const void* p, size_t bytes, const char* what) {
  if (!emu::is_device_range(p, bytes))
    throw Error(fmt::format("{}: {} bytes at {} are not inside one device allocation (cudaErrorInvalidValue)", what,
                            bytes, p));
}

}  // namespace

namespace {

// One emulated GPU per process of the node, as a job runs one rank per GPU: the local rank's.
int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char* v = std::getenv(name); v && *v) return std::max(0, std::atoi(v));
  return 0;
}
int local_size() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "LOCAL_WORLD_SIZE"})
    if (const char* v = std::getenv(name); v && *v) return std::max(1, std::atoi(v));
  return 1;
}

}  // namespace

// LLAMATRAIN_EMU_DEVICES=N: the node has N emulated GPUs, so ranks beyond N share them.
int emulated_devices() {
  const char* v = std::getenv("LLAMATRAIN_EMU_DEVICES");
  return v && std::atoi(v) > 0 ? std::atoi(v) : std::max(local_size(), local_rank() + 1);
}

int device_count() { return emulated_devices(); }
int device_index() { return local_rank() % emulated_devices(); }
std::string device_pci_bus_id() { return fmt::format("emulated:{}", device_index()); }
bool available() { return true; }
std::string no_device_reason() { return ""; }
std::string device_name() { return "CUDA emulator"; }
std::string driver_version() { return ""; }
std::string runtime_version() { return ""; }
void* stream() { return detail::cuda_stream(); }

void* device_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = emu::device_malloc(bytes);
  if (!p)
    throw Error(fmt::format("cudaMalloc of {} bytes failed: out of memory ({} of {} bytes free); hint: use a smaller "
                            "batch, sequence or model",
                            bytes, emu::device_bytes_total() - emu::device_bytes_in_use(), emu::device_bytes_total()),
                "gpu_oom");
  return p;
}

void device_free(void* p) { emu::device_release(p); }

int64_t device_memory_used() { return int64_t(emu::device_bytes_in_use()); }
int64_t device_memory_total() { return int64_t(emu::device_bytes_total()); }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  check_device(dst, bytes, "cudaMemcpy to the device");
  emu::DeviceAccess access;
  std::memcpy(dst, src, bytes);
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  check_device(src, bytes, "cudaMemcpy to the host");
  emu::DeviceAccess access;
  std::memcpy(dst, src, bytes);
}

void copy_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  check_device(dst, bytes, "cudaMemcpy on the device");
  check_device(src, bytes, "cudaMemcpy on the device");
  emu::DeviceAccess access;
  std::memmove(dst, src, bytes);
}

void fill_zero(void* p, size_t bytes) {
  if (bytes == 0) return;
  check_device(p, bytes, "cudaMemset");
  emu::DeviceAccess access;
  std::memset(p, 0, bytes);
}

void synchronize() {}

}  // namespace llamatrain::cuda
