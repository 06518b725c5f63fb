// The types the templated cuda:: kernels are instantiated for, each list written once for the kernels
// and the stub (no_cuda.cpp) alike: X(T) for each input type of matmul_forward and each output of
// rmsnorm_forward, residual_rmsnorm_forward and swiglu_forward / swiglu_backward; X(T) for each form
// of adamw_update_bf16_copy's matmul copy; X(TD, TI) for each (output gradient, input) pair of
// matmul_backward. Internal to kernels/cuda.
#pragma once

#define LLAMATRAIN_CUDA_FOR_EACH_OPERAND(X) X(float) X(bf16) X(bf16_in_f32)
#define LLAMATRAIN_CUDA_FOR_EACH_BF16_COPY(X) X(bf16) X(bf16_in_f32)
// clang-format off
#define LLAMATRAIN_CUDA_FOR_EACH_OPERAND_PAIR(X) \
  X(float, float) \
  X(float, bf16) \
  X(float, bf16_in_f32) \
  X(bf16, float) \
  X(bf16, bf16) \
  X(bf16, bf16_in_f32) \
  X(bf16_in_f32, float) \
  X(bf16_in_f32, bf16) \
  X(bf16_in_f32, bf16_in_f32)
// clang-format on

// The explicit instantiations of each templated kernel, one X for the lists above, used by the file
// that defines the kernel and by the stub (no_cuda.cpp) alike.
#define LLAMATRAIN_CUDA_INSTANTIATE_RMSNORM_FORWARD(T) \
  template void rmsnorm_forward(T*, float*, const float*, const float*, int, int, float);
#define LLAMATRAIN_CUDA_INSTANTIATE_RESIDUAL_RMSNORM_FORWARD(T) \
  template void residual_rmsnorm_forward(float*, T*, float*, const float*, const float*, const float*, int, int, float);
#define LLAMATRAIN_CUDA_INSTANTIATE_SWIGLU(T)               \
  template void swiglu_forward(T*, const float*, int, int); \
  template void swiglu_backward(T*, const float*, const float*, int, int);
#define LLAMATRAIN_CUDA_INSTANTIATE_ADAMW_UPDATE_BF16_COPY(T)                                                         \
  template void adamw_update_bf16_copy(float*, T*, float*, float*, const float*, int64_t, float, float, float, float, \
                                       float, int, float);
#define LLAMATRAIN_CUDA_INSTANTIATE_MATMUL_FORWARD(TI) \
  template void matmul_forward(float*, const TI*, const float*, Bf16Weight, int, int, int, ComputeType);
#define LLAMATRAIN_CUDA_INSTANTIATE_MATMUL_BACKWARD(TD, TI)                                                    \
  template void matmul_backward(float*, float*, const TD*, const TI*, const float*, Bf16Weight, int, int, int, \
                                ComputeType);
