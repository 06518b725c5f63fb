// Internal to kernels/cpu: the internal kernels compiled once per CPU variant (internal_list.inc)
// as llamatrain::cpu::detail functions, each call going to the chosen variant (dispatch.cpp), and the
// types they take.
#pragma once

#include <cstdint>

#include "core/bf16.h"

namespace llamatrain::cpu::detail {

// One operand conversion of a matmul call (dnnl_gemm.h's OperandBatch): n elements of src into dst,
// float -> bf16 (to_bf16), bf16 -> float (widen), or float -> float holding its bf16 value (round);
// all round to nearest even.
struct OperandConversion {
  enum class Kind { to_bf16, widen, round };
  Kind kind;
  const void* src;
  void* dst;
  int64_t n;
};

#include "kernels/cpu/internal_list.inc"

}  // namespace llamatrain::cpu::detail
