// Internal to kernels/cpu: put(p, v) stores an fp32 result as the output's dtype (float as is, bf16
// rounded to nearest even, bf16_in_f32 rounded the same way and kept in a float), so one kernel body
// serves every output. Written through the raw bits so
// loops under `omp simd` vectorize.
#pragma once

#include "core/bf16.h"

namespace llamatrain::cpu {

inline void put(float* p, float v) { *p = v; }
inline void put(bf16* p, float v) { p->bits = to_bf16(v).bits; }
inline void put(bf16_in_f32* p, float v) { p->value = to_float(to_bf16(v)); }

}  // namespace llamatrain::cpu
