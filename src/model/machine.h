// What the model's kernels do on this machine, for the layers above the model (train, cli): the
// matmul rate MFU is measured against, which kernel each matmul shape runs on, and the compute type
// a precision means. The only model header that names the CPU backend's types; everything above
// reaches kernels/ through it, never directly (tests/architecture/check_layers.sh).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/backend.h"
#include "model/modes.h"
#include "parallel/data_parallel.h"

namespace llamatrain::cpu {
enum class ComputeType;
}
namespace llamatrain::parallel {
class Communicator;
}

namespace llamatrain::model {

// The kernels' compute type of a precision: fp32, or bf16 operands with fp32 accumulation.
cpu::ComputeType compute_type(Precision p);

// GFLOP/s (2*M*N*K flop per call) of an (M,N,K) matmul in the precision's compute type, timed for
// about `seconds` of wall time (the fastest of at least 3 calls), on the CPU or on a device's kernels.
double matmul_gflops(Precision p, int M, int N, int K, double seconds);
double matmul_gflops(Device d, Precision p, int M, int N, int K, double seconds);

// The device's matmul rate that MFU is taken against (GFLOP/s in the precision's compute type): on
// the CPU a 1024^3 product, on a GPU a square product grown until one call takes over 2 ms (8192^3
// at most), each timed for about `seconds`.
double peak_matmul_gflops(Device d, Precision p, double seconds);

// FLOP/s (causal: obs::step_flops's attention term) of the attention kernel's forward and backward
// on B sequences of T tokens with H query and Hkv key/value heads of D, timed for about `seconds`.
double attention_flops_per_s(int B, int T, int H, int Hkv, int D, double seconds);

// Seconds of one call of a small elementwise kernel: the fixed cost (a parallel region's start and
// end) every kernel call pays, which dominates a small model's step.
double kernel_call_seconds(double seconds);
// The device a model of Device d runs on here, for the run's first line and its start event: "cpu",
// or "cuda:0 (NVIDIA H200, 143.8 GB)" (the GPU this process uses, its name and memory).
std::string device_description(Device d);
// The GPU this process uses (its index among the visible ones), or -1 for a host device.
int device_index(Device d);
// Data-parallel collectives on GPU memory through NCCL, for the ranks of `group`: a group made from
// an id rank 0 draws and broadcasts over the group's communicator (collective: every rank of the job
// makes its group at the same time). nullptr, with why_not set (the end of a sentence: " (this build
// has no NCCL)"), where this build has no NCCL, where ranks of the group share a GPU (NCCL refuses
// that), or where LLAMATRAIN_GPU_COLLECTIVES=host asks for the host-staged sums; every rank of the
// group gets the same answer.
class GpuCollectives {
 public:
  virtual ~GpuCollectives() = default;
  // data (n floats, device) becomes the mean over the group: the sum, then times 1/size, as the
  // host-staged path computes it.
  virtual void mean(float* data, int64_t n) = 0;
  // data (size x shard floats, device): every member's shard gathered on every member.
  virtual void all_gather(float* data, int64_t shard) = 0;
  virtual std::string describe() const = 0;  // "NCCL 2.28.3"
};
std::unique_ptr<GpuCollectives> make_gpu_collectives(parallel::Communicator& group, std::string* why_not);
// n floats of k's memory at p as the host-staged collectives (parallel::StagedArena) read and write
// them: through k's copies.
parallel::StagedArena staged_arena(Kernels& k, float* p, size_t n);
// What doctor says of this process's GPU.
struct GpuInfo {
  bool usable = false;
  std::string why_not;                // when not usable: the cause (no driver, no device, no CUDA build)
  int index = -1, count = 0;          // this process's GPU, of the visible ones
  std::string name, driver, runtime;  // "NVIDIA H200", CUDA versions "13.0"
  int64_t total_bytes = 0, free_bytes = 0;
};
GpuInfo gpu_info();
// Bytes a job on device d may use: the host's available memory (core/memory.h: MemAvailable and the
// cgroup limit) for the host devices; for a GPU its free memory plus this process's own context (the
// query creates it, and MemoryPlan::runtime counts it already). -1 when unknown.
int64_t available_bytes(Device d);
// core/memory.h's check_memory_fits against the device's memory: an Error naming the need, the
// device and what it has, with the hint.
void check_device_memory_fits(Device d, int64_t need_bytes, const std::string& what, const std::string& detail,
                              const std::string& hint);
// Bytes of the device's memory in use now by every process (cuda), or -1 where the device's memory
// is the host's.
int64_t device_memory_used(Device d);
// The threads the kernels run on in this process (OpenMP's).
int compute_threads();

// Bytes per second the AdamW kernel moves (its reads and writes) over arrays far larger than the
// caches: the rate of the memory-bound kernels, timed for about `seconds` (the fastest of 3 calls).
double memory_bytes_per_s(double seconds);

// The kernel chosen for each matmul shape so far: lines under a summary line, each starting with
// indent ("" when nothing was chosen); or as one JSON object.
std::string matmul_choices_text(const std::string& indent);
std::string matmul_choices_json();
// Whether the matmul library has a bf16 kernel on this CPU (else bf16 compute runs on fp32 kernels).
bool bf16_matmul_available();
// The CPU variant the CPU backend's kernels run: "avx512" or "avx2" (chosen for this CPU at run time,
// or by LLAMATRAIN_CPU_KERNELS), "native" or "generic" (a build with one variant).
const char* cpu_kernels_variant();

}  // namespace llamatrain::model
