// fast_exp: fp32 exp without a libm call, so loops over it vectorize (shared by attention, the
// lm-head softmax and SwiGLU's sigmoid). x = n*ln2 + r with |r| <= ln2/2, exp(r) by its degree-7
// Taylor polynomial (truncation < 5e-9 relative; ~2 ulp after rounding), times 2^n built in the
// exponent bits. n is rounded with the 1.5*2^23 trick because floorf/nearbyint do not vectorize
// under -ftrapping-math. x < -87.3 (including -inf: masked attention scores) gives exactly 0; x is
// clamped to 88 so 2^n stays a normal float. NaN propagates through the polynomial. The range
// checks vectorize on AVX2 only without -ftrapping-math (the CPU variants' flags, CMakeLists.txt).
#pragma once

#include <bit>
#include <cstdint>

namespace llamatrain::cpu {

inline float fast_exp(float x) {
  float xc = x < -87.3f ? -87.3f : x;
  xc = xc > 88.0f ? 88.0f : xc;
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693145751953125f;  // ln2 split hi + lo so n*ln2_hi is exact
  r = r - n * 1.42860682030941723e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>(uint32_t(int32_t(n) + 127) << 23);
  return x < -87.3f ? 0.0f : p * scale;
}

}  // namespace llamatrain::cpu
