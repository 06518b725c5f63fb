// Reference rotary position embedding, HF rotate_half layout: pair i is (i, i + D/2) and
// angle = pos * inv_freq[i] (core/rope.h: theta^(-2i/D), or its llama3 rescaling). Angles, cos
// and sin are computed in fp64. In place; only heads [0, n_heads) of each row move, the rest of the
// row (e.g. the v heads of packed qkv) is untouched.
// Backward (rotation by -angle): docs/derivations.md#rope-backward.
#include <cmath>

#include "kernels/ref/ops.h"

namespace llamatrain::ref {

namespace {

// Rotates every pair of heads [0, n_heads) of every row by sign * angle.
void rope_rotate(float* x, const int32_t* pos /*(N)*/, int N, int n_heads, int row_stride, int D, const RopeFreqs& rope,
                 double sign) {
  int half = D / 2;
  for (int n = 0; n < N; n++) {
    for (int i = 0; i < half; i++) {
      // HF: freqs = pos * inv_freq
      double angle = sign * double(pos[n]) * rope_inv_freq(rope, i, D);
      double c = std::cos(angle), s = std::sin(angle);
      for (int h = 0; h < n_heads; h++) {
        float* xh = x + int64_t(n) * row_stride + int64_t(h) * D;
        double x1 = xh[i], x2 = xh[i + half];
        // HF: q * cos + rotate_half(q) * sin, rotate_half(q) = cat(-q[D/2:], q[:D/2])
        xh[i] = float(x1 * c - x2 * s);
        xh[i + half] = float(x2 * c + x1 * s);
      }
    }
  }
}

}  // namespace

void rope_forward(float* x, const int32_t* pos /*(N)*/, int N, int n_heads, int row_stride, int D,
                  const RopeFreqs& rope) {
  rope_rotate(x, pos, N, n_heads, row_stride, D, rope, 1.0);
}

void rope_backward(float* dx, const int32_t* pos /*(N)*/, int N, int n_heads, int row_stride, int D,
                   const RopeFreqs& rope) {
  // The rotation is orthogonal: its Jacobian transpose is the rotation by -angle.
  rope_rotate(dx, pos, N, n_heads, row_stride, D, rope, -1.0);
}

}  // namespace llamatrain::ref
