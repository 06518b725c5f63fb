// The operand types the templated cuda:: matmuls are instantiated for, once for the kernels
// (matmul.cpp) and the stub (no_cuda.cpp) alike: X(T) for each input type of matmul_forward, X(TD, TI)
// for each (output gradient, input) pair of matmul_backward. Internal to kernels/cuda.
#pragma once

#define LLAMATRAIN_CUDA_FOR_EACH_OPERAND(X) X(float) X(bf16) X(bf16_in_f32)
#define LLAMATRAIN_CUDA_FOR_EACH_OPERAND_PAIR(X)                                                      \
  X(float, float) X(float, bf16) X(float, bf16_in_f32) X(bf16, float) X(bf16, bf16) X(bf16, bf16_in_f32) \
  X(bf16_in_f32, float) X(bf16_in_f32, bf16) X(bf16_in_f32, bf16_in_f32)
