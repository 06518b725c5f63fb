// CUDA kernels: the ops of kernels/cpu/ops.h with the same names, argument order and accumulation
// rules (weight grads +=, input grads =, rmsnorm_backward's dx +=), on device pointers. Plain C++:
// no CUDA type appears here, so the model includes it with g++. With sizes.h, the folder's public headers.
//   - every call queues its work on the module's one stream (stream()) and returns without waiting;
//     copy_to_host and sum_squares wait for it; synchronize() waits for everything;
//   - a failed CUDA / cuBLASLt call throws llamatrain::Error naming the call and the CUDA error string;
//   - matmuls go through cuBLASLt with fp32 accumulation: ComputeType::f32 multiplies fp32 values
//     (CUBLAS_COMPUTE_32F, never TF32), ComputeType::bf16 bf16 values; one algorithm per shape is
//     chosen by the heuristic once and cached, with one workspace shared by every call;
//   - attention: the plain kernels (one thread block per (b, h, query row), fp32) and the tensor-core
//     ones (flash_attention.cu); both an online softmax with lse saved for the backward, which
//     recomputes the scores (no (B,H,T,T) tensor anywhere);
//   - lmhead_ce_*: logits of a bounded chunk of rows at a time (cuBLASLt), never the whole (N,V);
//   - adamw_update_bf16_sr and fill_normal draw from core/rng.h's Philox stream
//     (kernels/cuda/rng_device.cuh), so both backends round and initialize bit for bit alike.
// One host thread at a time (the kernels share scratch buffers). Call the conversions as
// cuda::bf16_from_float / cuda::float_from_bf16: core/bf16.h's host ones are found by their arguments.
// Built only where nvcc is found (LLAMATRAIN_CUDA); elsewhere no_cuda.cpp defines these functions:
// device_count() is 0 and every other call throws. (sizes.h, the device memory the backend holds
// besides the arenas, is plain arithmetic for the planner, in every build.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/bf16.h"
#include "core/rope.h"

namespace llamatrain::cuda {

// ---- runtime ----

// GPUs visible to this process; 0 where there is no driver, no device or no CUDA build. Never throws.
int device_count();
bool available();  // device_count() > 0
// Why device_count() is 0, in plain words ("no NVIDIA driver (libcuda) on this machine", "no CUDA
// device", the CUDA error string, "llamatrain was built without CUDA"); "" when there is a device.
std::string no_device_reason();
// The device this process runs on: its local rank on the node (OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID, MPI_LOCALRANKID or LOCAL_RANK; 0 without one) modulo device_count(), made current
// at the first query. 0 without a device.
int device_index();
// The current device's name ("NVIDIA H200"), and its PCI bus id ("0000:9D:00.0"): which GPU it is
// whatever the process's CUDA_VISIBLE_DEVICES numbering.
std::string device_name();
std::string device_pci_bus_id();
// The NVIDIA driver's CUDA version and this build's runtime's, as "13.0" (cudaDriverGetVersion,
// cudaRuntimeGetVersion); "" where unknown.
std::string driver_version();
std::string runtime_version();
// The module's stream (a cudaStream_t); every kernel and copy below is queued on it.
void* stream();

void* device_alloc(size_t bytes);  // cudaMalloc; throws on failure (out of memory names the size)
void device_free(void* p);         // nullptr is fine
void copy_to_device(void* dst, const void* src, size_t bytes);  // host -> device, then waits
void copy_to_host(void* dst, const void* src, size_t bytes);    // device -> host, waits for the stream
void copy_device(void* dst, const void* src, size_t bytes);     // device -> device, queued
void fill_zero(void* p, size_t bytes);                          // queued
void synchronize();                                             // waits for the stream
// The current device's memory: bytes in use by every process (total less free, cudaMemGetInfo), and
// its total.
int64_t device_memory_used();
int64_t device_memory_total();

enum class ComputeType { f32, bf16 };

// The bf16 values of a weight that bf16 compute multiplies (core/bf16.h), in device memory: a bf16
// copy, or a float array holding bf16 values (multiplied by the fp32 gemm, which gives the same
// products).
using Bf16Weight = llamatrain::Bf16Weight;

// ---- kernels (all pointers device pointers; shapes as kernels/ref/ops.h) ----

void embedding_forward(float* out /*(N,C)*/, const int32_t* tokens /*(N)*/, const float* wte /*(V,C)*/, int N, int C);
// dwte[tokens[n]] += dout[n] (atomic adds: rows of a repeated token sum in any order).
void embedding_backward(float* dwte /*(V,C)*/, const float* dout /*(N,C)*/, const int32_t* tokens /*(N)*/, int N,
                        int C);
// This rank's rows [vocab_begin, vocab_begin + V) of the table (ref::vocab_parallel_embedding_*).
void vocab_parallel_embedding_forward(float* out /*(N,C)*/, const int32_t* tokens /*(N)*/, const float* wte /*(V,C)*/,
                                      int64_t vocab_begin, int V, int N, int C);
void vocab_parallel_embedding_backward(float* dwte /*(V,C)*/, const float* dout /*(N,C)*/,
                                       const int32_t* tokens /*(N)*/, int64_t vocab_begin, int V, int N, int C);

// out: float, bf16 or bf16_in_f32 (rounded to nearest even).
template <typename T>
void rmsnorm_forward(T* out /*(N,C)*/, float* rstd /*(N)*/, const float* x /*(N,C)*/, const float* weight /*(C)*/,
                     int N, int C, float eps);
// resid = a + b, then out = rmsnorm(resid): residual_forward and rmsnorm_forward in one pass (resid
// may be a).
template <typename T>
void residual_rmsnorm_forward(float* resid /*(N,C)*/, T* out /*(N,C)*/, float* rstd /*(N)*/, const float* a,
                              const float* b, const float* weight /*(C)*/, int N, int C, float eps);
// dx += ..., dweight += ... (dweight may be nullptr: a frozen weight).
void rmsnorm_backward(float* dx /*(N,C)*/, float* dweight /*(C)*/, const float* dout /*(N,C)*/,
                      const float* x /*(N,C)*/, const float* weight /*(C)*/, const float* rstd /*(N)*/, int N, int C);

// out (N,OC) = inp (N,IC) @ weight (OC,IC)^T. f32: weight and a float inp; bf16: weight_bf16's values
// and inp's (a float inp is rounded to bf16 first).
template <typename TI>
void matmul_forward(float* out, const TI* inp, const float* weight, Bf16Weight weight_bf16, int N, int IC, int OC,
                    ComputeType ct);
// dinp (N,IC) = dout @ weight (skipped if nullptr); dweight (OC,IC) += dout^T @ inp (skipped if nullptr).
template <typename TD, typename TI>
void matmul_backward(float* dinp, float* dweight, const TD* dout, const TI* inp, const float* weight,
                     Bf16Weight weight_bf16, int N, int IC, int OC, ComputeType ct);

void rope_forward(float* x, const int32_t* pos /*(N)*/, int N, int n_heads, int row_stride, int D,
                  const RopeFreqs& rope);
void rope_backward(float* dx, const int32_t* pos /*(N)*/, int N, int n_heads, int row_stride, int D,
                   const RopeFreqs& rope, bool round_rows = false);

// window > 0: sliding-window attention (key u visible to query t iff t - window < u <= t).
// doc_start (B,T), on the device, or nullptr: packed documents, each token's document starting at
// position doc_start[b, t] of its sequence (non-decreasing along t); key u is visible to query t only
// if doc_start[b, t] <= u, so no document attends to another.
void attention_forward(float* out /*(B,T,H*D)*/, float* lse /*(B,H,T)*/, const float* qkv /*(B,T,(H+2Hkv)*D)*/, int B,
                       int T, int H, int Hkv, int D, int window = 0, const int32_t* doc_start = nullptr);
void attention_backward(float* dqkv /*(B,T,(H+2Hkv)*D)*/, const float* dout /*(B,T,H*D)*/, const float* qkv,
                        const float* out /*(B,T,H*D)*/, const float* lse /*(B,H,T)*/, int B, int T, int H, int Hkv,
                        int D, int window = 0, const int32_t* doc_start = nullptr);

// The same on tensor cores (flash_attention.cu, FlashAttention-2's scheme): q, k, v, dout and the
// probabilities and their gradients rounded to bf16, every sum and the softmax statistics in fp32;
// the lse of either forward serves either backward. For the bf16 precision modes; D at most 128
// (flash_attention_supports). Deterministic (no atomics).
bool flash_attention_supports(int D);
void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv, int D,
                             int window = 0, const int32_t* doc_start = nullptr);
void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                              int B, int T, int H, int Hkv, int D, int window = 0, const int32_t* doc_start = nullptr);

// One query per head at position pos over the cache rows 0..pos (pos - window + 1..pos with a
// window), each [k heads | v heads] (2*Hkv*D); scores (H, pos+1) is device scratch.
void attention_decode(float* out /*(H*D)*/, float* scores, const float* q /*(H*D)*/, const float* kv_cache, int pos,
                      int H, int Hkv, int D, int window = 0);

// x[n, :] += bias; dbias (OC) += sum_n dout[n, :] (one thread per column, summed in fp64).
void bias_forward(float* x /*(N,OC)*/, const float* bias /*(OC)*/, int N, int OC);
void bias_backward(float* dbias /*(OC)*/, const float* dout /*(N,OC)*/, int N, int OC);

template <typename T>
void swiglu_forward(T* out /*(N,F)*/, const float* h13 /*(N,2F)*/, int N, int F);
template <typename T>
void swiglu_backward(T* dh13 /*(N,2F)*/, const float* dout /*(N,F)*/, const float* h13 /*(N,2F)*/, int N, int F);

void residual_forward(float* out, const float* a, const float* b, int64_t n);

void lmhead_ce_forward(float* losses /*(N)*/, const float* x /*(N,C)*/, const float* wout /*(V,C)*/,
                       Bf16Weight wout_bf16, const int32_t* targets /*(N)*/, int N, int C, int V, ComputeType ct);
void lmhead_ce_backward(float* losses /*(N)*/, float* dx /*(N,C)*/, float* dwout /*(V,C)*/, const float* x /*(N,C)*/,
                        const float* wout /*(V,C)*/, Bf16Weight wout_bf16, const int32_t* targets /*(N)*/, float dloss,
                        int N, int C, int V, ComputeType ct);
// Device bytes of scratch the lm head kernels keep for these sizes (the chunk of logits, its bf16
// gradient and bf16 copies of the operands).
int64_t lmhead_ce_scratch_bytes(int N, int C, int V, ComputeType ct, bool float_weight = false);
// In bf16 compute, whether matmul operands should be kept as bf16_in_f32 rather than bf16 (as
// cpu::bf16_operands_as_floats): never on the GPU, whose bf16 gemm is always the faster.
bool bf16_operands_as_floats(int M, int N, int K);
std::optional<bool> bf16_operands_as_floats_known(int M, int N, int K);

// Vocabulary-parallel cross-entropy steps, as ref::vocab_parallel_ce_* (the caller combines the
// maxima and partials over the ranks between them).
void vocab_parallel_ce_max(float* local_max /*(N)*/, const float* logits /*(N,V)*/, int N, int V);
void vocab_parallel_ce_partials(float* partials /*(N,2)*/, float* global_max /*(N)*/, float* logits /*(N,V)*/,
                                const float* maxima /*(P,N)*/, int P, const int32_t* targets /*(N)*/,
                                int64_t vocab_begin, int N, int V);
void vocab_parallel_ce_forward(float* losses /*(N)*/, const float* global_max /*(N)*/, const float* partials /*(N,2)*/,
                               const int32_t* targets /*(N)*/, int N);
void vocab_parallel_ce_backward(float* exps /*(N,V)*/, const float* partials /*(N,2)*/, const int32_t* targets /*(N)*/,
                                int64_t vocab_begin, float dloss, int N, int V, bool bf16_values);

void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int step, float grad_scale);
template <typename T>
void adamw_update_bf16_copy(float* param, T* param_bf16, float* m, float* v, const float* grad, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale);
void adamw_update_bf16_sr(bf16* param, bf16* m, bf16* v, float* param_f32, const float* grad, int64_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int step, float grad_scale,
                          uint64_t seed, uint32_t tensor_id, uint64_t first_element = 0);

// Sum of squares in fp64 (per-thread fp64 partials, summed in a fixed order); waits for the result.
double sum_squares(const float* x, int64_t n);
double sum(const float* x, int64_t n);  // the plain sum (a loss total), the same way

void fill_constant(float* out, int64_t n, float value);
void scale(float* x, int64_t n, float s);  // x[i] *= s (one rounding each: the mean of a sum)
void fill_normal(float* out, int64_t n, float std, uint64_t seed, uint32_t stream, uint64_t first);

void bf16_from_float(bf16* out, const float* in, int64_t n);         // round to nearest even
void bf16_from_float(bf16_in_f32* out, const float* in, int64_t n);  // the same values, kept in floats
void float_from_bf16(float* out, const bf16* in, int64_t n);

// ---- NCCL: collectives over the GPUs of several processes (nccl.cpp where the build found NCCL;
// no_nccl.cpp otherwise) ----

// NCCL's version ("2.28.3"); "" where this build has no NCCL.
std::string nccl_version();
constexpr size_t kNcclIdBytes = 128;
// A new group's id, made by one member; the caller hands it to the others (over MPI).
void nccl_unique_id(void* out /*kNcclIdBytes*/);
// This process's member of the group of nranks made from id: collective over the members, each on
// its own device (device_index()). An opaque handle, for the calls below and nccl_destroy.
void* nccl_init(const void* id, int nranks, int rank);
void nccl_destroy(void* comm) noexcept;
// data (n floats, device memory) becomes the sum over the group, in place, queued on the module's stream.
void nccl_all_reduce_sum(void* comm, float* data, int64_t n);
// data (nranks x n floats, device memory): member r's n floats at data + r * n, gathered on every member.
void nccl_all_gather(void* comm, float* data, int64_t n);

}  // namespace llamatrain::cuda
