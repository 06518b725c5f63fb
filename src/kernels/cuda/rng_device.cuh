// Internal to kernels/cuda: core/rng.h's Philox4x32-10 words, core/bf16.h's roundings and
// kernels/cpu/adamw.cpp's AdamW element, written once for host and device (__host__ __device__
// under nvcc, plain inline functions under g++), so the GPU draws, rounds and updates bit for bit as
// the CPU does. The fp32 arithmetic of the AdamW element goes through add/mul/div/sqrt helpers that
// round every operation on its own (device: __fadd_rn and friends, which nvcc never fuses into an
// FMA; host: plain operators), and its multiply-adds through fma_rn where the CPU build fuses them. tests/kernels/
// cuda_rng_host_test.cpp checks the host build of this file against core/rng.h and cpu::.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/adamw_scalars.h"

#if defined(__CUDACC__)
#define LLAMATRAIN_HD __host__ __device__ __forceinline__
#else
#define LLAMATRAIN_HD inline
#endif

namespace llamatrain::cuda::rng {

struct Words4 {
  uint32_t w[4];
};

// philox4x32(ctr, key), 10 rounds, as core/rng.h.
LLAMATRAIN_HD Words4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    const uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Words4{{c0, c1, c2, c3}};
}

// random_u32x4(seed, step, tensor_id, index) of core/rng.h.
LLAMATRAIN_HD Words4 random_u32x4(uint64_t seed, uint32_t step, uint32_t tensor_id, uint64_t index) {
  return philox4x32(uint32_t(index), uint32_t(index >> 32), tensor_id, step, uint32_t(seed), uint32_t(seed >> 32));
}

LLAMATRAIN_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

LLAMATRAIN_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// core/bf16.h's to_bf16 (nearest even, NaN stays a quiet NaN), to_bf16_stochastic and to_float, on bits.
LLAMATRAIN_HD uint16_t bf16_bits_rne(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

LLAMATRAIN_HD uint16_t bf16_bits_stochastic(float f, uint32_t random16) {
  uint32_t u = float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return bf16_bits_rne(f);
  u += (random16 & 0xffffu);
  return uint16_t(u >> 16);
}

LLAMATRAIN_HD float bf16_bits_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

// fp32 operations rounded one at a time (never contracted into an FMA on the device).
LLAMATRAIN_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
LLAMATRAIN_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
LLAMATRAIN_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
LLAMATRAIN_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
LLAMATRAIN_HD float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return __builtin_sqrtf(a);
#endif
}

// The per-call scalars (core/adamw_scalars.h, computed on the host in fp64).
using ::llamatrain::AdamwScalars;

LLAMATRAIN_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// One AdamW element in fp32, in torch.optim.AdamW's (and cpu::adamw_element's) order, with the
// multiply-adds fused exactly where g++ -O3 fuses cpu::adamw_update_bf16_sr's loop on an FMA machine
// (x86-64 with -march=native, the release build): m = fma(m, b1, g*(1-b1)), v = fma(v, b2,
// (g*g)*(1-b2)), p = fma(p, decay, -(step_size * (m/denom))). Every other operation is rounded on
// its own. tests/kernels/cuda_rng_host_test.cpp fails if the CPU build fuses differently.
LLAMATRAIN_HD void adamw_element(float& p, float& m, float& v, float grad, const AdamwScalars& s) {
  const float g = mul_rn(grad, s.grad_scale);
  m = fma_rn(m, s.beta1, mul_rn(g, s.one_minus_b1));
  v = fma_rn(v, s.beta2, mul_rn(mul_rn(g, g), s.one_minus_b2));
  const float denom = add_rn(div_rn(sqrt_rn(v), s.bc2_sqrt), s.eps);
  p = fma_rn(p, s.decay, -mul_rn(s.step_size, div_rn(m, denom)));
}

// bf16-sr's element: param, m, v as bf16 bits, updated in fp32 and rounded stochastically with
// words 0, 1, 2 of random_u32x4(seed, step, tensor_id, index), in place.
LLAMATRAIN_HD void adamw_bf16_sr_element(uint16_t& p, uint16_t& m, uint16_t& v, float grad, const AdamwScalars& s,
                                         uint64_t seed, uint32_t step, uint32_t tensor_id, uint64_t index) {
  float pf = bf16_bits_to_float(p), mf = bf16_bits_to_float(m), vf = bf16_bits_to_float(v);
  adamw_element(pf, mf, vf, grad, s);
  const Words4 r = random_u32x4(seed, step, tensor_id, index);
  p = bf16_bits_stochastic(pf, r.w[0]);
  m = bf16_bits_stochastic(mf, r.w[1]);
  v = bf16_bits_stochastic(vf, r.w[2]);
}

// random_normal(seed, tensor_id, index) of core/rng.cpp: Box-Muller in fp64 on Philox words 0 and 1
// of counter (index lo, index hi, tensor_id, "norm"). The device's fp64 log and cos are within an
// ulp of glibc's, so after the rounding to fp32 the two agree except, rarely, by one fp32 ulp.
LLAMATRAIN_HD float random_normal(uint64_t seed, uint32_t tensor_id, uint64_t index) {
  const Words4 r =
      philox4x32(uint32_t(index), uint32_t(index >> 32), tensor_id, 0x6e6f726du, uint32_t(seed), uint32_t(seed >> 32));
  const double u1 = (double(r.w[0]) + 1.0) / 4294967297.0;  // (0, 1]
  const double u2 = double(r.w[1]) / 4294967296.0;
  return float(::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2));
}

}  // namespace llamatrain::cuda::rng
