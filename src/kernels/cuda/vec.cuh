// Internal to kernels/cuda (device code, and host checks of the launches): W consecutive floats moved
// as one 16-byte access (W = 4, 16-byte aligned) or W scalar ones, and the test of whether a shape's
// rows can move 4 at a time. Outputs are stored as float, bf16 or bf16_in_f32, rounded to nearest even
// as detail::put (store.cuh) rounds them; bf16 outputs as 8-byte stores of four.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/bf16.h"
#include "kernels/cuda/rng_device.cuh"
#include "kernels/cuda/store.cuh"

namespace llamatrain::cuda::detail {

template <int W>
struct Vec {
  float v[W];
};

template <int W>
__device__ __forceinline__ Vec<W> load_vec(const float* p) {
  Vec<W> r;
  if constexpr (W == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    r.v[0] = q.x;
    r.v[1] = q.y;
    r.v[2] = q.z;
    r.v[3] = q.w;
  } else {
    for (int j = 0; j < W; j++) r.v[j] = p[j];
  }
  return r;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(rng::bf16_bits_rne(lo)) | (uint32_t(rng::bf16_bits_rne(hi)) << 16);
}

// out[0..W) = v as T (float as is, bf16 values rounded to nearest even as put rounds them).
template <int W, typename T>
__device__ __forceinline__ void store_vec(T* out, const Vec<W>& v) {
  if constexpr (W == 4 && std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(out) = make_float4(v.v[0], v.v[1], v.v[2], v.v[3]);
  } else if constexpr (W == 4 && std::is_same_v<T, bf16>) {
    *reinterpret_cast<uint2*>(out) = make_uint2(pack_bf16x2(v.v[0], v.v[1]), pack_bf16x2(v.v[2], v.v[3]));
  } else if constexpr (W == 4 && std::is_same_v<T, bf16_in_f32>) {
    float r[4];
    for (int j = 0; j < 4; j++) r[j] = rng::bf16_bits_to_float(rng::bf16_bits_rne(v.v[j]));
    *reinterpret_cast<float4*>(out) = make_float4(r[0], r[1], r[2], r[3]);
  } else {
    for (int j = 0; j < W; j++) put(out + j, v.v[j]);
  }
}

// Whether rows of `width` elements at these pointers can move 4 at a time: width % 4 == 0 and every
// base 16-byte aligned for floats (8-byte for bf16 outputs: 4 of 2 bytes).
inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
template <typename... P>
bool vec4_floats(int64_t width, const P*... ptrs) {
  return width % 4 == 0 && (aligned(ptrs, 16) && ...);
}
template <typename T>
bool vec4_out(const T* out) {
  return aligned(out, 4 * sizeof(T));
}

}  // namespace llamatrain::cuda::detail
