#include "core/f16.h"

#include <cstring>

namespace llamatrain {

float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);  // inf, or NaN with its payload
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    u = sign;  // signed zero
  } else {
    // Subnormal mant * 2^-24: shift the leading one up to the implicit bit.
    uint32_t e = 113;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --e;
    }
    u = sign | (e << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);                        // >= 65520 rounds to inf
  if (a >= 0x38800000u) {  // normal half: rebias, round the 13 dropped bits to nearest even
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return uint16_t(sign | (r >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25 rounds to zero (the tie goes to even 0)
  // Subnormal half: value * 2^24 = m * 2^(e - 126) with m the 24-bit significand.
  uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - e;  // 14..24
  uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1u))) ++r;
  return uint16_t(sign | r);
}

}  // namespace llamatrain
