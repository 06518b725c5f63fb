// kernels/cuda/rng_device.cuh compiled for the host (g++), against what the CPU backend computes:
// Philox words against core/rng.h, the bf16 roundings against core/bf16.h, the normal draw against
// core/rng.cpp, and the bf16-sr AdamW element against cpu::adamw_update_bf16_sr, bit for bit, on
// many inputs (extremes, NaN and inf included). The device build of the same header is what the CUDA
// kernels run; this checks the claim that both backends produce the same bits without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/adamw_scalars.h"
#include "core/bf16.h"
#include "core/rng.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/rng_device.cuh"
#include "test_util.h"

namespace llamatrain {
namespace {

TEST(CudaRngHost, PhiloxWordsEqualCoreRng) {
  size_t checked = 0;
  for (uint64_t seed : {uint64_t(0), uint64_t(1), uint64_t(0x123456789abcdefull), ~uint64_t(0)})
    for (uint32_t step : {0u, 1u, 77u, 0xffffffffu})
      for (uint32_t tensor : {0u, 3u, 0x6e6f726du})
        for (uint64_t i = 0; i < 2000; i++) {
          const uint64_t index = i * 0x9E3779B97F4A7C15ull;  // high words too
          const auto want = random_u32x4(seed, step, tensor, index);
          const auto got = cuda::rng::random_u32x4(seed, step, tensor, index);
          for (int w = 0; w < 4; w++) ASSERT_EQ(got.w[w], want[w]) << "word " << w << " of index " << index;
          checked++;
        }
  EXPECT_EQ(checked, 4u * 4 * 3 * 2000);
}

TEST(CudaRngHost, RoundingsEqualCoreBf16) {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.0f,
                           1e-40f,
                           -1e-40f,
                           3.0e38f,
                           -3.0e38f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::denorm_min()};
  for (uint32_t i = 0; i < 200000; i++) {  // every exponent, random mantissas, both signs
    uint32_t u = random_u32(7, 0, 1, i);
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  for (size_t i = 0; i < xs.size(); i++) {
    const float x = xs[i];
    ASSERT_EQ(cuda::rng::bf16_bits_rne(x), to_bf16(x).bits) << "x = " << x;
    const uint32_t r = random_u32(9, 2, 3, i);
    ASSERT_EQ(cuda::rng::bf16_bits_stochastic(x, r), to_bf16_stochastic(x, r).bits) << "x = " << x;
    const bf16 b = to_bf16(x);
    const float back = cuda::rng::bf16_bits_to_float(b.bits), want = to_float(b);
    ASSERT_EQ(std::memcmp(&back, &want, 4), 0);
  }
}

TEST(CudaRngHost, NormalDrawEqualsCoreRng) {
  for (uint64_t seed : {uint64_t(1), uint64_t(1234)})
    for (uint32_t stream : {0u, 5u})
      for (uint64_t i = 0; i < 100000; i++) {
        const float got = cuda::rng::random_normal(seed, stream, i), want = random_normal(seed, stream, i);
        ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "index " << i << ": " << got << " vs " << want;
      }
}

// cpu::adamw_update_bf16_sr on n elements against the header's element, both from the same bf16
// state, for steps with large and small updates, weight decay and clipping.
TEST(CudaRngHost, AdamwBf16SrEqualsCpu) {
  const int64_t n = 100003;
  const auto p0 = testing::to_bf16_vector(testing::mt19937_normal(size_t(n), 1, 0.05f));
  const auto m0 = testing::to_bf16_vector(testing::mt19937_normal(size_t(n), 2, 1e-3f));
  auto v0 = testing::to_bf16_vector(testing::abs_values(testing::mt19937_normal(size_t(n), 3, 1e-6f)));
  auto grad = testing::mt19937_normal(size_t(n), 4, 1e-2f);
  grad[5] = 0.0f;
  grad[6] = 1e30f;
  grad[7] = -1e-30f;
  struct Case {
    float lr, beta1, beta2, eps, wd, grad_scale;
    int step;
    uint64_t seed;
    uint32_t tensor;
    uint64_t first;
  };
  for (const Case& c : {Case{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, 42, 0, 0},
                        Case{1e-2f, 0.9f, 0.999f, 1e-6f, 0.0f, 0.37f, 1000, 7, 12, 5000000000ull},
                        Case{1e-5f, 0.8f, 0.9f, 1e-5f, 0.01f, 2.0f, 17, ~uint64_t(0), 0xffffffffu, 3}}) {
    std::vector<bf16> p = p0, m = m0, v = v0;
    std::vector<float> pf(static_cast<size_t>(n));
    cpu::adamw_update_bf16_sr(p.data(), m.data(), v.data(), pf.data(), grad.data(), n, c.lr, c.beta1, c.beta2, c.eps,
                              c.wd, c.step, c.grad_scale, c.seed, c.tensor, c.first);
    // The scalars both backends use (core/adamw_scalars.h).
    const AdamwScalars s = adamw_scalars(c.lr, c.beta1, c.beta2, c.eps, c.wd, c.step, c.grad_scale);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) {
      uint16_t pb = p0[size_t(i)].bits, mb = m0[size_t(i)].bits, vb = v0[size_t(i)].bits;
      cuda::rng::adamw_bf16_sr_element(pb, mb, vb, grad[size_t(i)], s, c.seed, uint32_t(c.step), c.tensor,
                                       c.first + uint64_t(i));
      if (pb != p[size_t(i)].bits || mb != m[size_t(i)].bits || vb != v[size_t(i)].bits) {
        if (differ < 5)
          ADD_FAILURE() << "step " << c.step << " element " << i << ": param " << pb << " vs " << p[size_t(i)].bits
                        << ", m " << mb << " vs " << m[size_t(i)].bits << ", v " << vb << " vs " << v[size_t(i)].bits;
        differ++;
      }
      const float widened = cuda::rng::bf16_bits_to_float(pb);
      if (pb == p[size_t(i)].bits) {
        ASSERT_EQ(std::memcmp(&widened, &pf[size_t(i)], 4), 0);
      }
    }
    EXPECT_EQ(differ, 0) << "of " << n << " elements at step " << c.step;
  }
}

}  // namespace
}  // namespace llamatrain
