// CUDA backend stub: llamatrain was configured without CUDA (no nvcc found, or LLAMATRAIN_CUDA=OFF).
// It defines every function of kernels/cuda/ops.h (with no_nccl.cpp, NCCL's) so callers link without
// #ifdefs: device_count() is 0 with the reason, and every other call throws an Error saying how to
// build with CUDA.
#include <string>

#include "core/error.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/operand_types.h"

namespace llamatrain::cuda {

namespace {

constexpr const char* kReason = "llamatrain was built without CUDA";

[[noreturn]] void unavailable(const char* what) {
  fail("cuda::{}: {}; hint: install the CUDA toolkit and configure with -DLLAMATRAIN_CUDA=ON", what, kReason);
}

}  // namespace

int device_count() { return 0; }
int device_index() { return 0; }
bool available() { return false; }
std::string no_device_reason() { return kReason; }
std::string device_name() { unavailable("device_name"); }
std::string device_pci_bus_id() { unavailable("device_pci_bus_id"); }
std::string driver_version() { return ""; }
std::string runtime_version() { return ""; }
void* stream() { unavailable("stream"); }
void* device_alloc(size_t) { unavailable("device_alloc"); }
int64_t device_memory_used() { unavailable("device_memory_used"); }
int64_t device_memory_total() { unavailable("device_memory_total"); }
void device_free(void* p) {
  if (p) unavailable("device_free");
}
void copy_to_device(void*, const void*, size_t) { unavailable("copy_to_device"); }
void copy_to_host(void*, const void*, size_t) { unavailable("copy_to_host"); }
void copy_device(void*, const void*, size_t) { unavailable("copy_device"); }
void fill_zero(void*, size_t) { unavailable("fill_zero"); }
void synchronize() { unavailable("synchronize"); }

void embedding_forward(float*, const int32_t*, const float*, int, int) { unavailable("embedding_forward"); }
void embedding_backward(float*, const float*, const int32_t*, int, int) { unavailable("embedding_backward"); }
void vocab_parallel_embedding_forward(float*, const int32_t*, const float*, int64_t, int, int, int) {
  unavailable("vocab_parallel_embedding_forward");
}
void vocab_parallel_embedding_backward(float*, const float*, const int32_t*, int64_t, int, int, int) {
  unavailable("vocab_parallel_embedding_backward");
}

template <typename T>
void rmsnorm_forward(T*, float*, const float*, const float*, int, int, float) {
  unavailable("rmsnorm_forward");
}
LLAMATRAIN_CUDA_FOR_EACH_OPERAND(LLAMATRAIN_CUDA_INSTANTIATE_RMSNORM_FORWARD)
template <typename T>
void residual_rmsnorm_forward(float*, T*, float*, const float*, const float*, const float*, int, int, float) {
  unavailable("residual_rmsnorm_forward");
}
LLAMATRAIN_CUDA_FOR_EACH_OPERAND(LLAMATRAIN_CUDA_INSTANTIATE_RESIDUAL_RMSNORM_FORWARD)
void rmsnorm_backward(float*, float*, const float*, const float*, const float*, const float*, int, int) {
  unavailable("rmsnorm_backward");
}

template <typename TI>
void matmul_forward(float*, const TI*, const float*, Bf16Weight, int, int, int, ComputeType) {
  unavailable("matmul_forward");
}
LLAMATRAIN_CUDA_FOR_EACH_OPERAND(LLAMATRAIN_CUDA_INSTANTIATE_MATMUL_FORWARD)
template <typename TD, typename TI>
void matmul_backward(float*, float*, const TD*, const TI*, const float*, Bf16Weight, int, int, int, ComputeType) {
  unavailable("matmul_backward");
}
LLAMATRAIN_CUDA_FOR_EACH_OPERAND_PAIR(LLAMATRAIN_CUDA_INSTANTIATE_MATMUL_BACKWARD)

void rope_forward(float*, const int32_t*, int, int, int, int, const RopeFreqs&) { unavailable("rope_forward"); }
void rope_backward(float*, const int32_t*, int, int, int, int, const RopeFreqs&, bool) { unavailable("rope_backward"); }

void attention_forward(float*, float*, const float*, int, int, int, int, int, int, const int32_t*) {
  unavailable("attention_forward");
}
void attention_backward(float*, const float*, const float*, const float*, const float*, int, int, int, int, int, int,
                        const int32_t*) {
  unavailable("attention_backward");
}
bool flash_attention_supports(int D) { return D > 0 && D <= 128; }
void flash_attention_forward(float*, float*, const float*, int, int, int, int, int, int, const int32_t*) {
  unavailable("flash_attention_forward");
}
void flash_attention_backward(float*, const float*, const float*, const float*, const float*, int, int, int, int, int,
                              int, const int32_t*) {
  unavailable("flash_attention_backward");
}

void attention_decode(float*, float*, const float*, const float*, int, int, int, int, int) {
  unavailable("attention_decode");
}

void bias_forward(float*, const float*, int, int) { unavailable("bias_forward"); }
void bias_backward(float*, const float*, int, int) { unavailable("bias_backward"); }

template <typename T>
void swiglu_forward(T*, const float*, int, int) {
  unavailable("swiglu_forward");
}
template <typename T>
void swiglu_backward(T*, const float*, const float*, int, int) {
  unavailable("swiglu_backward");
}
LLAMATRAIN_CUDA_FOR_EACH_OPERAND(LLAMATRAIN_CUDA_INSTANTIATE_SWIGLU)

void residual_forward(float*, const float*, const float*, int64_t) { unavailable("residual_forward"); }

void lmhead_ce_forward(float*, const float*, const float*, Bf16Weight, const int32_t*, int, int, int, ComputeType) {
  unavailable("lmhead_ce_forward");
}
void lmhead_ce_backward(float*, float*, float*, const float*, const float*, Bf16Weight, const int32_t*, float, int, int,
                        int, ComputeType) {
  unavailable("lmhead_ce_backward");
}
int64_t lmhead_ce_scratch_bytes(int, int, int, ComputeType, bool) { return 0; }
bool bf16_operands_as_floats(int, int, int) { return false; }
std::optional<bool> bf16_operands_as_floats_known(int, int, int) { return false; }

void vocab_parallel_ce_max(float*, const float*, int, int) { unavailable("vocab_parallel_ce_max"); }
void vocab_parallel_ce_partials(float*, float*, float*, const float*, int, const int32_t*, int64_t, int, int) {
  unavailable("vocab_parallel_ce_partials");
}
void vocab_parallel_ce_forward(float*, const float*, const float*, const int32_t*, int) {
  unavailable("vocab_parallel_ce_forward");
}
void vocab_parallel_ce_backward(float*, const float*, const int32_t*, int64_t, float, int, int, bool) {
  unavailable("vocab_parallel_ce_backward");
}

void adamw_update(float*, float*, float*, const float*, int64_t, float, float, float, float, float, int, float) {
  unavailable("adamw_update");
}
template <typename T>
void adamw_update_bf16_copy(float*, T*, float*, float*, const float*, int64_t, float, float, float, float, float, int,
                            float) {
  unavailable("adamw_update_bf16_copy");
}
LLAMATRAIN_CUDA_FOR_EACH_BF16_COPY(LLAMATRAIN_CUDA_INSTANTIATE_ADAMW_UPDATE_BF16_COPY)
void adamw_update_bf16_sr(bf16*, bf16*, bf16*, float*, const float*, int64_t, float, float, float, float, float, int,
                          float, uint64_t, uint32_t, uint64_t) {
  unavailable("adamw_update_bf16_sr");
}

double sum_squares(const float*, int64_t) { unavailable("sum_squares"); }
double sum(const float*, int64_t) { unavailable("sum"); }

void fill_constant(float*, int64_t, float) { unavailable("fill_constant"); }
void scale(float*, int64_t, float) { unavailable("scale"); }

void fill_normal(float*, int64_t, float, uint64_t, uint32_t, uint64_t) { unavailable("fill_normal"); }

void bf16_from_float(bf16*, const float*, int64_t) { unavailable("bf16_from_float"); }
void bf16_from_float(bf16_in_f32*, const float*, int64_t) { unavailable("bf16_from_float"); }
void float_from_bf16(float*, const bf16*, int64_t) { unavailable("float_from_bf16"); }

}  // namespace llamatrain::cuda
