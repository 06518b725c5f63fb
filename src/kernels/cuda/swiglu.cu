// SwiGLU on a packed gate|up tensor, as ref::swiglu_forward / swiglu_backward: a thread per W
// consecutive columns of a row, 16 bytes at a time where F % 4 == 0 on aligned pointers (vec.cuh),
// else one column; outputs float, or bf16 values (as bf16 or bf16_in_f32) rounded to nearest even when
// they only feed bf16 matmuls. Matches cpu:: to fp32 rounding (tests/kernels/cuda_vs_cpu_test.cpp).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/bf16.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/grid_stride.cuh"
#include "kernels/cuda/operand_types.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vec.cuh"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;
using detail::load_vec;
using detail::store_vec;
using detail::Vec;
using detail::vec4_floats;
using detail::vec4_out;

namespace {

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// W consecutive columns f of a row per thread (F % W == 0).
template <typename T, int W>
__global__ void swiglu_forward_kernel(T* out, const float* h13, int N, int F) {
  GRID_STRIDE(i, int64_t(N) * F / W) {
    const int64_t n = i * W / F, f = i * W % F;
    const Vec<W> g = load_vec<W>(h13 + n * 2 * F + f), up = load_vec<W>(h13 + n * 2 * F + F + f);
    Vec<W> o;
    for (int j = 0; j < W; j++) o.v[j] = g.v[j] * sigmoid(g.v[j]) * up.v[j];  // silu(gate) * up
    store_vec<W>(out + n * F + f, o);
  }
}

template <typename T, int W>
__global__ void swiglu_backward_kernel(T* dh13, const float* dout, const float* h13, int N, int F) {
  GRID_STRIDE(i, int64_t(N) * F / W) {
    const int64_t n = i * W / F, f = i * W % F;
    const Vec<W> g = load_vec<W>(h13 + n * 2 * F + f), up = load_vec<W>(h13 + n * 2 * F + F + f);
    const Vec<W> d = load_vec<W>(dout + n * F + f);
    Vec<W> dg, du;
    for (int j = 0; j < W; j++) {
      const float sig = sigmoid(g.v[j]);
      dg.v[j] = d.v[j] * up.v[j] * sig * (1.0f + g.v[j] * (1.0f - sig));  // d silu/dg * up
      du.v[j] = d.v[j] * g.v[j] * sig;                                    // silu(g)
    }
    store_vec<W>(dh13 + n * 2 * F + f, dg);
    store_vec<W>(dh13 + n * 2 * F + F + f, du);
  }
}

}  // namespace

template <typename T>
void swiglu_forward(T* out, const float* h13, int N, int F) {
  if (int64_t(N) * F == 0) return;
  if (vec4_floats(F, h13) && vec4_out(out))
    swiglu_forward_kernel<T, 4><<<grid_for(int64_t(N) * F / 4), 256, 0, cuda_stream()>>>(out, h13, N, F);
  else
    swiglu_forward_kernel<T, 1><<<grid_for(int64_t(N) * F), 256, 0, cuda_stream()>>>(out, h13, N, F);
  CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

template <typename T>
void swiglu_backward(T* dh13, const float* dout, const float* h13, int N, int F) {
  if (int64_t(N) * F == 0) return;
  if (vec4_floats(F, dout, h13) && vec4_out(dh13))
    swiglu_backward_kernel<T, 4><<<grid_for(int64_t(N) * F / 4), 256, 0, cuda_stream()>>>(dh13, dout, h13, N, F);
  else
    swiglu_backward_kernel<T, 1><<<grid_for(int64_t(N) * F), 256, 0, cuda_stream()>>>(dh13, dout, h13, N, F);
  CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}
LLAMATRAIN_CUDA_FOR_EACH_OPERAND(LLAMATRAIN_CUDA_INSTANTIATE_SWIGLU)

}  // namespace llamatrain::cuda
