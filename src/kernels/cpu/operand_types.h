// Internal to kernels/cpu: the types the templated cpu:: kernels are instantiated for, each list
// written once for the kernels' files (compiled per CPU variant) and dispatch.cpp alike:
//   - X(T) for each output of rmsnorm_forward, swiglu_forward / swiglu_backward and each input of
//     matmul_forward (float, or bf16 values as bf16 or held in floats);
//   - X(T) for each form of adamw_update_bf16_copy's matmul copy;
//   - X(TD, TI) for each (output gradient, input) pair of matmul_backward that the passes produce
//     (model/backend_cpu.cpp names the same pairs).
#pragma once

#define LLAMATRAIN_CPU_FOR_EACH_OPERAND(X) X(float) X(bf16) X(bf16_in_f32)
#define LLAMATRAIN_CPU_FOR_EACH_BF16_COPY(X) X(bf16) X(bf16_in_f32)
#define LLAMATRAIN_CPU_FOR_EACH_OPERAND_PAIR(X) \
  X(float, float) X(float, bf16) X(bf16, bf16) X(float, bf16_in_f32) X(bf16_in_f32, bf16_in_f32)

// The explicit instantiations of each templated kernel, one X for the lists above, used by the file
// that defines the kernel and by dispatch.cpp alike.
#define LLAMATRAIN_CPU_INSTANTIATE_RMSNORM_FORWARD(T) \
  template void rmsnorm_forward(T*, float*, const float*, const float*, int, int, float);
#define LLAMATRAIN_CPU_INSTANTIATE_SWIGLU(T)                \
  template void swiglu_forward(T*, const float*, int, int); \
  template void swiglu_backward(T*, const float*, const float*, int, int);
#define LLAMATRAIN_CPU_INSTANTIATE_ADAMW_UPDATE_BF16_COPY(T)                                                          \
  template void adamw_update_bf16_copy(float*, T*, float*, float*, const float*, int64_t, float, float, float, float, \
                                       float, int, float);
#define LLAMATRAIN_CPU_INSTANTIATE_MATMUL_FORWARD(TI) \
  template void matmul_forward(float*, const TI*, const float*, Bf16Weight, int, int, int, ComputeType);
#define LLAMATRAIN_CPU_INSTANTIATE_MATMUL_BACKWARD(TD, TI)                                                     \
  template void matmul_backward(float*, float*, const TD*, const TI*, const float*, Bf16Weight, int, int, int, \
                                ComputeType);
