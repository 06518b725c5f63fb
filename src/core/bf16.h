// bfloat16 storage type and conversions. bf16 is the top 16 bits of an IEEE fp32.
// to_bf16 rounds to nearest even (NaN stays NaN); to_bf16_stochastic adds 16 random low bits
// before truncation, so E[result] == x (unbiased), as Trainium's stochastic rounding does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace llamatrain {

struct bf16 {
  uint16_t bits;
};

// A bf16 value held in a float (the low 16 bits zero): what oneDNN's fp32 matmul kernel multiplies
// without a conversion pass where bf16 compute runs on that kernel (kernels/cpu/matmul.cpp). A type
// of its own so that such storage is never mistaken for full fp32 values, and so templated kernels
// that write float or bf16 write it too, rounded.
struct bf16_in_f32 {
  float value;
};

// The bf16 values of a weight that bf16 compute multiplies, for the kernels' matmuls: a bf16 copy,
// or a float copy holding bf16 values. Converts from either pointer, and from nullptr (fp32 compute:
// no copy).
struct Bf16Weight {
  Bf16Weight(std::nullptr_t = nullptr) {}
  Bf16Weight(const bf16* p) : data(p) {}
  Bf16Weight(const bf16_in_f32* p) : data(p), is_bf16(false) {}
  // A float array whose values are already bf16 values (bf16-sr's compute copy of its bf16 master).
  static Bf16Weight rounded_floats(const float* p) {
    Bf16Weight w;
    w.data = p;
    w.is_bf16 = false;
    return w;
  }
  const void* data = nullptr;
  bool is_bf16 = true;
};

inline float to_float(bf16 h) {
  uint32_t u = uint32_t(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

// random16: 16 uniformly random bits. Rounds |x| up with probability (low 16 bits)/2^16.
inline bf16 to_bf16_stochastic(float f, uint32_t random16) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return to_bf16(f);  // inf / NaN: no rounding
  u += (random16 & 0xffffu);
  return bf16{uint16_t(u >> 16)};
}

void bf16_from_float(bf16* out, const float* in, int64_t n);         // round to nearest even, OpenMP
void bf16_from_float(bf16_in_f32* out, const float* in, int64_t n);  // the same values, kept in floats
void float_from_bf16(float* out, const bf16* in, int64_t n);

}  // namespace llamatrain
