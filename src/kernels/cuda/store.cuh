// Internal to kernels/cuda (device code): store an fp32 result as the output's type, as
// kernels/cpu/put.h does (float as is; bf16 and bf16_in_f32 rounded to nearest even, core/bf16.h's
// rounding through rng_device.cuh), and load a matmul operand as float.
#pragma once

#include "core/bf16.h"
#include "kernels/cuda/rng_device.cuh"

namespace llamatrain::cuda::detail {

__device__ __forceinline__ void put(float* p, float v) { *p = v; }
__device__ __forceinline__ void put(bf16* p, float v) { p->bits = rng::bf16_bits_rne(v); }
__device__ __forceinline__ void put(bf16_in_f32* p, float v) {
  p->value = rng::bf16_bits_to_float(rng::bf16_bits_rne(v));
}

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const bf16* p) { return rng::bf16_bits_to_float(p->bits); }
__device__ __forceinline__ float load(const bf16_in_f32* p) { return p->value; }

}  // namespace llamatrain::cuda::detail
