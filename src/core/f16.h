// IEEE binary16 (fp16) <-> fp32, for the checkpoints that store F16 tensors (safetensors, torch
// archives). f16_to_float is exact (subnormals, inf, NaN payload kept); float_to_f16 rounds to nearest
// even, overflows to inf and keeps NaN a (quiet) NaN. bf16 is core/bf16.h's.
#pragma once

#include <cstdint>

namespace llamatrain {

float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);

}  // namespace llamatrain
