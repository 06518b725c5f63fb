// Reference SwiGLU on a packed gate|up tensor: out = silu(gate) * up, computed in fp64 per element.
// Backward derivation: docs/derivations.md#swiglu-backward. dh13 is overwritten.
#include <cmath>

#include "kernels/ref/ops.h"

namespace llamatrain::ref {

void swiglu_forward(float* out /*(N,F)*/, const float* h13 /*(N,2F)*/, int N, int F) {
  for (int n = 0; n < N; n++) {
    const float* gate = h13 + int64_t(n) * 2 * F;
    const float* up = gate + F;
    for (int f = 0; f < F; f++) {
      // HF LlamaMLP: act_fn(gate_proj(x)) * up_proj(x), act_fn = silu(g) = g * sigmoid(g)
      double g = gate[f];
      double sig = 1.0 / (1.0 + std::exp(-g));
      out[int64_t(n) * F + f] = float(g * sig * up[f]);
    }
  }
}

void swiglu_backward(float* dh13 /*(N,2F)*/, const float* dout /*(N,F)*/, const float* h13 /*(N,2F)*/, int N, int F) {
  for (int n = 0; n < N; n++) {
    const float* gate = h13 + int64_t(n) * 2 * F;
    const float* up = gate + F;
    float* dgate = dh13 + int64_t(n) * 2 * F;
    float* dup = dgate + F;
    for (int f = 0; f < F; f++) {
      double g = gate[f];
      double d = dout[int64_t(n) * F + f];
      double sig = 1.0 / (1.0 + std::exp(-g));
      // d silu/dg = sig + g * sig * (1 - sig)
      dgate[f] = float(d * up[f] * sig * (1.0 + g * (1.0 - sig)));
      // d out/d up = silu(g)
      dup[f] = float(d * g * sig);
    }
  }
}

}  // namespace llamatrain::ref
