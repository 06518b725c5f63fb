// Reference causal grouped-query attention (ref::attention_forward / attention_backward): plain
// loops over (b, h, t), one query row's scores at a time, every sum in fp64. A sliding window
// (window > 0) makes query t see keys u in [t - window + 1, t] only, packed documents (doc_start)
// keys u >= doc_start[t] only: the rows start at the later of the two. The oracle for
// cpu::attention_*; checked itself by finite differences (tests/kernels/ref_gradcheck_attention_test.cpp).
// The backward ignores the saved out and lse and recomputes the softmax in fp64, so it depends on
// nothing the forward saved. Derivation: docs/derivations.md, section "Attention".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/ref/ops.h"

namespace llamatrain::ref {

namespace {

// The first key query t of a sequence sees: 0, or t - window + 1 under a sliding window (Mistral's
// mask), or its document's start (doc: the sequence's doc_start, or nullptr), whichever is later.
int first_key(int t, int window, const int32_t* doc) {
  const int w = window > 0 ? std::max(0, t - window + 1) : 0;
  return doc != nullptr ? std::max(w, int(doc[t])) : w;
}

// Softmax probabilities p[u0..t] of query row q (D) against keys k_u0..k_t (rows of qkv at stride W):
// s[u] = scale * q.k_u; p = exp(s - max s) / sum. Returns lse = max s + log(sum).
double causal_softmax_row(std::vector<double>& p, const float* q /*(D)*/, const float* k0 /*k of row 0*/, int64_t W,
                          int u0, int t, int D, double scale) {
  double smax = -std::numeric_limits<double>::infinity();
  for (int u = u0; u <= t; u++) {
    const float* k = k0 + u * W;
    double dot = 0.0;
    for (int d = 0; d < D; d++) dot += double(q[d]) * double(k[d]);
    p[u] = dot * scale;
    if (p[u] > smax) smax = p[u];
  }
  double sum = 0.0;
  for (int u = u0; u <= t; u++) {
    p[u] = std::exp(p[u] - smax);
    sum += p[u];
  }
  for (int u = u0; u <= t; u++) p[u] /= sum;
  return smax + std::log(sum);
}

}  // namespace

void attention_forward(float* out /*(B,T,H*D)*/, float* lse /*(B,H,T)*/, const float* qkv /*(B,T,(H+2*Hkv)*D)*/, int B,
                       int T, int H, int Hkv, int D, int window, const int32_t* doc_start) {
  const int64_t W = int64_t(H + 2 * Hkv) * D;  // qkv row width
  const int group = H / Hkv;                   // query heads per kv head
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> p(T);
  std::vector<double> acc(D);
  for (int b = 0; b < B; b++) {
    const float* qkv_b = qkv + int64_t(b) * T * W;
    const int32_t* doc = doc_start != nullptr ? doc_start + int64_t(b) * T : nullptr;
    for (int h = 0; h < H; h++) {
      const int kvh = h / group;
      const float* k0 = qkv_b + int64_t(H + kvh) * D;        // k of (b, t=0, kvh)
      const float* v0 = qkv_b + int64_t(H + Hkv + kvh) * D;  // v of (b, t=0, kvh)
      for (int t = 0; t < T; t++) {
        const float* q = qkv_b + t * W + int64_t(h) * D;
        // p = softmax(q.k_u * scale for u0 <= u <= t)   (torch: scaled_dot_product_attention, is_causal)
        const int u0 = first_key(t, window, doc);
        lse[(int64_t(b) * H + h) * T + t] = float(causal_softmax_row(p, q, k0, W, u0, t, D, scale));
        // out = sum_u p[u] * v_u
        for (int d = 0; d < D; d++) acc[d] = 0.0;
        for (int u = u0; u <= t; u++) {
          const float* v = v0 + u * W;
          for (int d = 0; d < D; d++) acc[d] += p[u] * double(v[d]);
        }
        float* o = out + (int64_t(b) * T + t) * H * D + int64_t(h) * D;
        for (int d = 0; d < D; d++) o[d] = float(acc[d]);
      }
    }
  }
}

void attention_backward(float* dqkv /*(B,T,(H+2*Hkv)*D)*/, const float* dout /*(B,T,H*D)*/,
                        const float* qkv /*(B,T,(H+2*Hkv)*D)*/, const float* out /*(B,T,H*D)*/,
                        const float* lse /*(B,H,T)*/, int B, int T, int H, int Hkv, int D, int window,
                        const int32_t* doc_start) {
  const int64_t W = int64_t(H + 2 * Hkv) * D;
  const int group = H / Hkv;
  const double scale = 1.0 / std::sqrt(double(D));
  // Gradients are summed in fp64 (dk, dv of a kv head collect every later query of its whole group),
  // then rounded once into dqkv.
  std::vector<double> g(size_t(B) * T * W, 0.0);  // (B,T,(H+2*Hkv)*D)
  std::vector<double> p(T), dp(T);
  for (int b = 0; b < B; b++) {
    const float* qkv_b = qkv + int64_t(b) * T * W;
    double* g_b = g.data() + int64_t(b) * T * W;
    const int32_t* doc = doc_start != nullptr ? doc_start + int64_t(b) * T : nullptr;
    for (int h = 0; h < H; h++) {
      const int kvh = h / group;  // GQA: dk, dv of kvh sum over its group's query heads
      const int64_t qoff = int64_t(h) * D, koff = int64_t(H + kvh) * D, voff = int64_t(H + Hkv + kvh) * D;
      for (int t = 0; t < T; t++) {
        const float* q = qkv_b + t * W + qoff;
        const float* dy = dout + (int64_t(b) * T + t) * H * D + qoff;  // dout row (b, t, h)
        const int u0 = first_key(t, window, doc);
        causal_softmax_row(p, q, qkv_b + koff, W, u0, t, D, scale);
        // dP[u] = dout . v_u ;  rowdot = sum_u P[u] dP[u]
        double rowdot = 0.0;
        for (int u = u0; u <= t; u++) {
          const float* v = qkv_b + u * W + voff;
          double s = 0.0;
          for (int d = 0; d < D; d++) s += double(dy[d]) * double(v[d]);
          dp[u] = s;
          rowdot += p[u] * s;
        }
        double* dq = g_b + t * W + qoff;
        for (int u = u0; u <= t; u++) {
          const float* k = qkv_b + u * W + koff;
          double* dk = g_b + u * W + koff;
          double* dv = g_b + u * W + voff;
          // dS = P * (dP - rowdot); scores s = scale * q.k, so ds/dq = scale*k, ds/dk = scale*q
          const double ds = p[u] * (dp[u] - rowdot) * scale;
          for (int d = 0; d < D; d++) {
            dq[d] += ds * double(k[d]);     // dq = dS k * scale
            dk[d] += ds * double(q[d]);     // dk += dS^T q * scale
            dv[d] += p[u] * double(dy[d]);  // dv += P^T dout
          }
        }
      }
    }
  }
  for (size_t i = 0; i < g.size(); i++) dqkv[i] = float(g[i]);
}

}  // namespace llamatrain::ref
