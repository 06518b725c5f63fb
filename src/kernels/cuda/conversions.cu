// The bf16 conversions of whole arrays (the weights' matmul copy and bf16-sr's master): float -> bf16
// or bf16 values held in floats, rounded to nearest even, and bf16 -> float; a thread per element,
// core/bf16.h's rounding through rng_device.cuh, so the GPU's copies hold the CPU's bits.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/bf16.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rng_device.cuh"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;

namespace {

__global__ void bf16_from_float_kernel(bf16* out, const float* in, int64_t n) {
  GRID_STRIDE(i, n) out[i].bits = rng::bf16_bits_rne(in[i]);
}

__global__ void bf16_in_f32_from_float_kernel(bf16_in_f32* out, const float* in, int64_t n) {
  GRID_STRIDE(i, n) out[i].value = rng::bf16_bits_to_float(rng::bf16_bits_rne(in[i]));
}

__global__ void float_from_bf16_kernel(float* out, const bf16* in, int64_t n) {
  GRID_STRIDE(i, n) out[i] = rng::bf16_bits_to_float(in[i].bits);
}

}  // namespace

void bf16_from_float(bf16* out, const float* in, int64_t n) {
  if (n <= 0) return;
  bf16_from_float_kernel<<<grid_for(n), 256, 0, cuda_stream()>>>(out, in, n);
  CUDA_CHECK_LAUNCH("bf16_from_float_kernel");
}

void bf16_from_float(bf16_in_f32* out, const float* in, int64_t n) {
  if (n <= 0) return;
  bf16_in_f32_from_float_kernel<<<grid_for(n), 256, 0, cuda_stream()>>>(out, in, n);
  CUDA_CHECK_LAUNCH("bf16_in_f32_from_float_kernel");
}

void float_from_bf16(float* out, const bf16* in, int64_t n) {
  if (n <= 0) return;
  float_from_bf16_kernel<<<grid_for(n), 256, 0, cuda_stream()>>>(out, in, n);
  CUDA_CHECK_LAUNCH("float_from_bf16_kernel");
}

}  // namespace llamatrain::cuda
