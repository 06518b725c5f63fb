// core/f16: IEEE binary16 <-> fp32, against the compiler's _Float16 on every bit pattern and on
// random and boundary floats, and on known values.
#include "core/f16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace llamatrain {
namespace {

#ifdef __FLT16_MAX__
TEST(HalfConversion, F16ToFloatIsExactForAllBitPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 x;
    uint16_t b = uint16_t(h);
    std::memcpy(&x, &b, 2);
    float want = float(x), got = f16_to_float(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
      uint32_t gu;
      std::memcpy(&gu, &got, 4);
      ASSERT_EQ(gu >> 31, uint32_t(h >> 15)) << h;
    } else {
      uint32_t wu, gu;
      std::memcpy(&wu, &want, 4);
      std::memcpy(&gu, &got, 4);
      ASSERT_EQ(gu, wu) << "f16 bits " << h;
    }
  }
}

TEST(HalfConversion, FloatToF16RoundsToNearestEven) {
  std::mt19937 rng(3);
  std::vector<float> xs = {0.0f,           -0.0f,    65504.0f,       65519.99f,      65520.0f,
                           -65520.0f,      1e-8f,    2.9802322e-08f, 2.9802326e-08f, 5.9604645e-08f,
                           6.1035156e-05f, 6.1e-05f, INFINITY,       -INFINITY};
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  // Dense around the subnormal and overflow boundaries.
  for (uint32_t u = 0x32f00000u; u < 0x39000000u; u += 0x1001u) {
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  for (float f : xs) {
    uint16_t got = float_to_f16(f);
    _Float16 w = _Float16(f);
    uint16_t want;
    std::memcpy(&want, &w, 2);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(f16_to_float(got)));
    } else {
      ASSERT_EQ(got, want) << "float " << f;
    }
  }
}
#endif

TEST(HalfConversion, KnownValues) {
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0xc000), -2.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(f16_to_float(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_TRUE(std::isinf(f16_to_float(0xfc00)) && f16_to_float(0xfc00) < 0);
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
  EXPECT_TRUE(std::signbit(f16_to_float(0x8000)));
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (zero)
  EXPECT_EQ(float_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie to even (2)
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even (down)
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie to even (up)
}

}  // namespace
}  // namespace llamatrain
