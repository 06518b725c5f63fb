// The CUDA runtime side of the backend: device queries that never throw, the module's stream,
// allocation and copies, the growing scratch slots, and the errors every CUDA / cuBLASLt failure
// becomes (llamatrain::Error: the call, the CUDA error name and string, file and line).
// cudart is linked statically; it loads the driver (libcuda) at the first call, so a machine without
// one runs everything else and device_count() says 0 with the reason.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/sizes.h"

namespace llamatrain::cuda {

namespace detail {

// The failure's kind, for the error event and diagnose: the GPU's memory, a kernel's fault (sticky:
// the context is unusable after it), a GPU that stopped answering, or another CUDA error.
const char* cuda_error_code(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation: return "gpu_oom";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorHardwareStackError:
    case cudaErrorInvalidPc:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorAssert: return "gpu_fault";
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorLaunchTimeout:
    case cudaErrorUnknown: return "gpu_lost";
    default: return "gpu";
  }
}

void raise_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  std::string hint;
  if (err == cudaErrorMemoryAllocation) hint = "; hint: the GPU is out of memory: use a smaller batch or model";
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
    hint = "; hint: check the NVIDIA driver with nvidia-smi";
  if (std::string(cuda_error_code(err)) == "gpu_fault")
    hint = "; hint: a kernel faulted (the call that reports it may come after the kernel): rerun with "
           "LLAMATRAIN_CUDA_SYNC=1 to name the kernel";
  throw Error(fmt::format("CUDA call {} failed: {} ({}) at {}:{}{}", call, cudaGetErrorString(err),
                          cudaGetErrorName(err), file, line, hint),
              cuda_error_code(err));
}

void raise_cublas_error(int status, const char* call, const char* file, int line) {
  throw Error(fmt::format("cuBLASLt call {} failed with status {} at {}:{}; hint: the shape or data types may "
                          "have no cuBLASLt kernel on this GPU",
                          call, status, file, line));
}

void raise_error(const std::string& message) { throw Error(message); }

bool sync_each_kernel() {
  static const bool on = [] {
    const char* v = std::getenv("LLAMATRAIN_CUDA_SYNC");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

cudaStream_t cuda_stream() {
  device_count();  // the device is chosen before the stream is made on it
  static std::once_flag once;
  static cudaStream_t s = nullptr;
  std::call_once(once, [] { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); });
  return s;
}

void* scratch(int slot, size_t bytes) {
  static std::mutex mutex;
  static void* blocks[kScratchSlots] = {};
  static size_t sizes[kScratchSlots] = {};
  CHECK(slot >= 0 && slot < kScratchSlots, "scratch slot {}", slot);
  std::lock_guard<std::mutex> lock(mutex);
  if (bytes > sizes[slot]) {
    if (blocks[slot]) CUDA_CHECK(cudaFree(blocks[slot]));  // waits for the work that used it
    blocks[slot] = nullptr;
    sizes[slot] = 0;
    const size_t want = size_t(sizes::grown(int64_t(bytes)));  // room to grow a little before the next reallocation
    CUDA_CHECK(cudaMalloc(&blocks[slot], want));
    sizes[slot] = want;
  }
  return blocks[slot];
}

}  // namespace detail

namespace {

// The first device query's answer, kept: (count, reason), and the device this process chose.
struct DeviceState {
  int count = 0;
  int index = 0;
  std::string reason;
};

// This process's rank among the processes of its node, as the launcher tells it (Open MPI, SLURM,
// MPICH / Intel MPI, torchrun), or 0.
int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char* v = std::getenv(name); v && *v) return std::max(0, std::atoi(v));
  return 0;
}

const DeviceState& device_state() {
  static const DeviceState state = [] {
    DeviceState s;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaErrorInsufficientDriver) {
      // Either no driver at all or one too old for this runtime: libcuda's presence tells which.
      void* libcuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
      if (!libcuda) libcuda = dlopen("libcuda.so.1", RTLD_LAZY);
      if (!libcuda) {
        s.reason = "no NVIDIA driver (libcuda) on this machine";
      } else {
        dlclose(libcuda);
        s.reason = "the NVIDIA driver is too old for CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
                   std::to_string(CUDART_VERSION % 1000 / 10) + "; hint: update the driver";
      }
    } else if (err == cudaErrorNoDevice || (err == cudaSuccess && n == 0)) {
      s.reason = "no CUDA device";
    } else if (err != cudaSuccess) {
      s.reason = std::string("CUDA: ") + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")";
    }
    if (err == cudaSuccess && n > 0) s.count = n;
    cudaGetLastError();  // a failed query must not stay as the sticky last error
    if (s.count > 0) {   // one GPU per rank of a node: the local rank's, modulo the visible devices
      s.index = local_rank() % s.count;
      if (cudaError_t e = cudaSetDevice(s.index); e != cudaSuccess) {
        s.reason = std::string("cudaSetDevice(") + std::to_string(s.index) + "): " + cudaGetErrorString(e);
        s.count = 0;
        cudaGetLastError();
      }
    }
    return s;
  }();
  return state;
}

}  // namespace

int device_count() { return device_state().count; }

int device_index() { return device_state().index; }

bool available() { return device_count() > 0; }

std::string no_device_reason() { return device_state().reason; }

std::string device_name() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  return prop.name;
}

std::string device_pci_bus_id() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  char id[64] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, dev));
  return id;
}

namespace {

std::string version_text(int v) { return v > 0 ? fmt::format("{}.{}", v / 1000, v % 1000 / 10) : ""; }

}  // namespace

std::string driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) cudaGetLastError();
  return version_text(v);
}

std::string runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) cudaGetLastError();
  return version_text(v);
}

void* stream() { return detail::cuda_stream(); }

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    throw Error(fmt::format("cudaMalloc of {} bytes failed: {} ({} of {} bytes free); hint: use a smaller batch, "
                            "sequence or model",
                            bytes, cudaGetErrorString(err), free_bytes, total),
                detail::cuda_error_code(err));
  }
  return p;
}

void device_free(void* p) {
  if (p) CUDA_CHECK(cudaFree(p));
}

int64_t device_memory_used() {
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return int64_t(total - free_bytes);
}

int64_t device_memory_total() {
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return int64_t(total);
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, detail::cuda_stream()));
  CUDA_CHECK(cudaStreamSynchronize(detail::cuda_stream()));  // src may be freed once this returns
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, detail::cuda_stream()));
  CUDA_CHECK(cudaStreamSynchronize(detail::cuda_stream()));
}

void copy_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, detail::cuda_stream()));
}

void fill_zero(void* p, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, detail::cuda_stream()));
}

void synchronize() { CUDA_CHECK(cudaStreamSynchronize(detail::cuda_stream())); }

}  // namespace llamatrain::cuda
