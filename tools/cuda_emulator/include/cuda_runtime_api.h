// The CUDA emulator's stand-in for the toolkit's cuda_runtime_api.h: the few runtime types the
// sources under src/kernels/cuda name (dim3, uint3, float4, uint2, cudaError_t, cudaStream_t, cudaEvent_t,
// cudaFuncSetAttribute for dynamic shared memory above 48 KiB), so the
// emulated build needs no CUDA toolkit. Only the emulated build puts this folder on the include path.
#pragma once

#include <cstddef>

struct uint3 {
  unsigned x, y, z;
};

// The vector types with their alignment (a float4 load is one 16-byte access on the GPU).
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
                   cudaErrorInvalidConfiguration = 9, cudaErrorIllegalAddress = 700, cudaErrorLaunchFailure = 719 };
using cudaError = cudaError_t;

struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

namespace emu {
// Kernel `entry` may launch with up to `bytes` of dynamic shared memory (the GPU's opt-in above 48 KiB).
cudaError_t set_max_dynamic_shared(const void* entry, int bytes);
// The last launch error (a bad launch configuration), read and cleared by cudaGetLastError.
cudaError_t take_last_error();
const char* error_name(cudaError_t e);
}  // namespace emu

inline cudaError_t cudaGetLastError() { return emu::take_last_error(); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t e) { return emu::error_name(e); }
inline const char* cudaGetErrorName(cudaError_t e) { return emu::error_name(e); }

template <typename T>
cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute, int value) {
  return emu::set_max_dynamic_shared(reinterpret_cast<const void*>(entry), value);
}
