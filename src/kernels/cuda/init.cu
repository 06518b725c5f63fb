// Parameter init, as ref::fill_constant / fill_normal: a thread per element (grid-stride); fill_normal
// draws each element from core/rng.h's Philox stream through rng_device.cuh, so its values depend on the
// element's place in the full tensor only and equal the CPU backend's bit for bit.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rng_device.cuh"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;

namespace {

__global__ void fill_constant_kernel(float* out, int64_t n, float value) { GRID_STRIDE(i, n) out[i] = value; }

__global__ void fill_normal_kernel(float* out, int64_t n, float std, uint64_t seed, uint32_t stream, uint64_t first) {
  GRID_STRIDE(i, n) out[i] = std * rng::random_normal(seed, stream, first + uint64_t(i));
}

}  // namespace

void fill_constant(float* out, int64_t n, float value) {
  if (n <= 0) return;
  fill_constant_kernel<<<grid_for(n), 256, 0, cuda_stream()>>>(out, n, value);
  CUDA_CHECK_LAUNCH("fill_constant_kernel");
}

void fill_normal(float* out, int64_t n, float std, uint64_t seed, uint32_t stream, uint64_t first) {
  if (n <= 0) return;
  fill_normal_kernel<<<grid_for(n), 256, 0, cuda_stream()>>>(out, n, std, seed, stream, first);
  CUDA_CHECK_LAUNCH("fill_normal_kernel");
}

}  // namespace llamatrain::cuda
