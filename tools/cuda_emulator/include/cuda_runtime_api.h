// The CUDA emulator's stand-in for the toolkit's cuda_runtime_api.h: the few runtime types the
// sources under src/kernels/cuda name (dim3, uint3, cudaError_t, cudaStream_t, cudaEvent_t), so the
// emulated build needs no CUDA toolkit. Only the emulated build puts this folder on the include path.
#pragma once

#include <cstddef>

struct uint3 {
  unsigned x, y, z;
};

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

namespace emu {
// The last launch error (a bad launch configuration), read and cleared by cudaGetLastError.
cudaError_t take_last_error();
const char* error_name(cudaError_t e);
}  // namespace emu

inline cudaError_t cudaGetLastError() { return emu::take_last_error(); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t e) { return emu::error_name(e); }
inline const char* cudaGetErrorName(cudaError_t e) { return emu::error_name(e); }
