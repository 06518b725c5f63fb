// Random numbers. Philox4x32-10 is counter-based: the output is a pure function of (key, counter),
// so stochastic rounding and dropout-free init draws are reproducible and independent of how
// elements are split across threads or ranks. Key = seed; counter = (step, tensor id, element, 0).
#pragma once

#include <array>
#include <cstdint>

namespace llamatrain {

// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = uint64_t(kM0) * ctr[0];
    uint64_t p1 = uint64_t(kM1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1], uint32_t(p0)};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// 128 random bits (four independent words) for element `index` of tensor `tensor_id` at `step`
// under `seed`: counter (index lo, index hi, tensor_id, step), key seed.
inline std::array<uint32_t, 4> random_u32x4(uint64_t seed, uint32_t step, uint32_t tensor_id, uint64_t index) {
  return philox4x32({uint32_t(index), uint32_t(index >> 32), tensor_id, step}, {uint32_t(seed), uint32_t(seed >> 32)});
}

// 32 random bits: word 0 of random_u32x4.
inline uint32_t random_u32(uint64_t seed, uint32_t step, uint32_t tensor_id, uint64_t index) {
  return random_u32x4(seed, step, tensor_id, index)[0];
}

// Uniform float in [0, 1) with 24 random bits.
inline float random_uniform(uint64_t seed, uint32_t step, uint32_t tensor_id, uint64_t index) {
  return float(random_u32(seed, step, tensor_id, index) >> 8) * (1.0f / 16777216.0f);
}

// Standard normal by Box-Muller from two counter-based uniforms.
float random_normal(uint64_t seed, uint32_t tensor_id, uint64_t index);

}  // namespace llamatrain
