// RoPE's inverse frequencies, the one definition every backend (kernels/ref, cpu, cuda) and decoding
// use: inv_freq[i] = theta^(-2i/D) for pair i of a head of D dims, optionally rescaled the way Llama
// 3.1 does (transformers' _compute_llama3_parameters). A plain theta converts to RopeFreqs (no
// scaling), so callers of the unscaled rotation pass theta as before. Computed in fp64; written once
// for host and device (__host__ __device__ under nvcc).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define LLAMATRAIN_ROPE_HD __host__ __device__ inline
#else
#define LLAMATRAIN_ROPE_HD inline
#endif

namespace llamatrain {

struct RopeFreqs {
  float theta = 10000.0f;
  // llama3: wavelengths 2 pi / inv_freq above original_max_pos / low_freq_factor are divided by
  // factor, those below original_max_pos / high_freq_factor are kept, the band between is blended
  // linearly in original_max_pos / wavelength.
  bool llama3 = false;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_pos = 8192;

  RopeFreqs() = default;
  RopeFreqs(float theta_) : theta(theta_) {}  // NOLINT: a bare theta is unscaled RoPE
  bool operator==(const RopeFreqs&) const = default;
};

// inv_freq of pair i (0 <= i < D/2).
LLAMATRAIN_ROPE_HD double rope_inv_freq(const RopeFreqs& r, int i, int D) {
  // HF: inv_freq = 1 / theta^(arange(0, D, 2) / D)
  const double inv = pow(double(r.theta), -2.0 * i / D);
  if (!r.llama3) return inv;
  const double pi = 3.14159265358979323846;
  const double old_len = r.original_max_pos;
  const double low_wavelen = old_len / r.low_freq_factor, high_wavelen = old_len / r.high_freq_factor;
  const double wavelen = 2.0 * pi / inv;
  if (wavelen > low_wavelen) return inv / r.factor;  // low frequencies: rescaled
  if (wavelen < high_wavelen) return inv;            // high frequencies: kept
  // smooth = (old_len / wavelen - low) / (high - low); (1 - smooth) * inv / factor + smooth * inv
  const double smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  return (1.0 - smooth) * inv / r.factor + smooth * inv;
}

}  // namespace llamatrain
