// Internal to kernels/cpu: put(p, v) stores an fp32 result as the output's dtype (float as is, bf16
// rounded to nearest even), so one kernel body serves both outputs. Written through the raw bits so
// loops under `omp simd` vectorize.
#pragma once

#include "core/bf16.h"

namespace llamatrain::cpu {

inline void put(float* p, float v) { *p = v; }
inline void put(bf16* p, float v) { p->bits = to_bf16(v).bits; }

}  // namespace llamatrain::cpu
