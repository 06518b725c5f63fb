// Baseline for bench/attention_bench.cpp: cpu::attention_forward / attention_backward as of commit
// cd1f5e9 (8 x 32 register blocks, K Q^T forward, separate max / exp / rescale passes), copied
// verbatim into namespace attention_v1 so the bench can time old and new side by side in one
// process. Bench-only: nothing in src/ links it.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>

#include "core/error.h"
#include "kernels/cpu/fast_exp.h"

namespace llamatrain::attention_v1 {

using cpu::fast_exp;

namespace {

constexpr int kB = 64;  // rows per query tile = keys per key tile (equal, so every row of a
                        // processed key tile sees at least one unmasked key)

// Micro-kernels on GCC/Clang vector extensions (16 floats; the compiler maps them to zmm, ymm or xmm
// registers, whatever -march offers): plain loops over a float array keep their accumulators in
// memory, these keep a block of rows x columns in registers. a * b + c contracts to one fma.
using vf = float __attribute__((vector_size(64)));
constexpr int kV = 16;  // floats per vf
// vf never crosses a function boundary by value: that would change the ABI (and warn) when the
// target lacks 512-bit registers.
inline void load(vf& v, const float* p) { std::memcpy(&v, p, sizeof(v)); }
inline void store(float* p, const vf& v) { std::memcpy(p, &v, sizeof(v)); }

// The one micro-kernel: rows [0, R) and columns [0, 16 NV) of
//   C[r][:] (+)= sum_{c < n} A(r, c) * Bm[c][:],   A(r, c) = A[r*a_rs + c*a_cs]
// with C rows at stride ldc, Bm rows at stride ldb; starts from 0 unless accumulate. a_rs/a_cs
// select A or A^T. An R x NV block of accumulators stays in registers (8 x 2 measured ~2.4x faster
// than 4 x 4 on AVX-512: 10 loads per 16 fma instead of 20). Each element sums c in increasing
// order whatever the blocking, so results do not depend on how callers cut rows and columns.
template <int R, int NV>
inline void gemm_block(float* C, int64_t ldc, const float* A, int64_t a_rs, int64_t a_cs, const float* Bm, int64_t ldb,
                       int n, bool accumulate) {
  vf acc[R][NV];
  for (int r = 0; r < R; r++)
    for (int v = 0; v < NV; v++) {
      acc[r][v] = vf{};
      if (accumulate) load(acc[r][v], C + r * ldc + v * kV);
    }
  for (int c = 0; c < n; c++) {
    vf b[NV];
    for (int v = 0; v < NV; v++) load(b[v], Bm + c * ldb + v * kV);
    for (int r = 0; r < R; r++) {
      const float a = A[r * a_rs + c * a_cs];
      for (int v = 0; v < NV; v++) acc[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < R; r++)
    for (int v = 0; v < NV; v++) store(C + r * ldc + v * kV, acc[r][v]);
}

constexpr int kRows = 8;   // rows per gemm_block
constexpr int kCols = 32;  // columns per gemm_block (NV = 2)

// Which part of a diagonal tile a product needs (rows and columns index the same 64 positions):
// Tri::lower, columns c <= row r (rows are queries, columns keys); Tri::upper, columns c >= r (rows
// are keys, columns queries); Tri::none, everything (off-diagonal tiles).
enum class Tri { none, lower, upper };

// S (kB,kB) [i][j] = sum_d A[i][d] * Bt[d][j] for rows i < ni (padded columns of Bt are 0), A rows
// at stride lda. On a diagonal tile about to be masked (tri != none), a block of rows gets only
// the 32-column groups that hold some of its unmasked entries; the columns left out are all masked
// and overwritten by the caller's mask.
void tile_dot(float* S /*(kB,kB)*/, const float* A /*(ni,D) stride lda*/, int64_t lda, const float* Bt /*(D,kB)*/,
              int ni, int D, Tri tri) {
  auto col_begin = [&](int i) { return tri == Tri::upper ? i / kCols * kCols : 0; };
  auto col_end = [&](int i_end) { return tri == Tri::lower ? std::min(kB, i_end) : kB; };
  int i = 0;
  for (; i + kRows <= ni; i += kRows)
    for (int j = col_begin(i); j < col_end(i + kRows); j += kCols)
      gemm_block<kRows, kCols / kV>(S + i * kB + j, kB, A + i * lda, lda, 1, Bt + j, kB, D, false);
  for (; i < ni; i++)
    for (int j = col_begin(i); j < col_end(i + 1); j += kCols)
      gemm_block<1, kCols / kV>(S + i * kB + j, kB, A + i * lda, lda, 1, Bt + j, kB, D, false);
}

// C[r][:] += sum_c A(r, c) * Bm[c][:] for r < nr, with A(r, c) = A[r*a_rs + c*a_cs]
// (a_rs/a_cs select A or A^T), C rows at stride ldc and Bm rows at stride ldb, D columns. c runs
// over [0, nc) for Tri::none; on a diagonal tile, where A(r, c) = 0 beyond the causal triangle,
// Tri::lower (rows are queries) stops at c <= r and Tri::upper (rows are keys) starts at c = r,
// per block of rows. Skipped terms are exact zeros, so the result is the same as without skipping.
// D a multiple of 16 runs on gemm_block; other D (tests only) on plain loops.
void tile_axpy(float* C /*(nr,D) stride ldc*/, int64_t ldc, const float* A, int a_rs, int a_cs,
               const float* Bm /*(nc,D) stride ldb*/, int64_t ldb, int nr, int nc, int D, Tri tri) {
  auto c_begin = [&](int r) { return tri == Tri::upper ? r : 0; };
  auto c_end = [&](int r_end) { return tri == Tri::lower ? std::min(nc, r_end) : nc; };
  auto rows = [&]<int R>(int r) {
    const int c0 = c_begin(r), n = c_end(r + R) - c0;
    const float* a = A + r * a_rs + c0 * a_cs;
    const float* bm = Bm + c0 * ldb;
    int d = 0;
    for (; d + kCols <= D; d += kCols)
      gemm_block<R, kCols / kV>(C + r * ldc + d, ldc, a, a_rs, a_cs, bm + d, ldb, n, true);
    for (; d + kV <= D; d += kV) gemm_block<R, 1>(C + r * ldc + d, ldc, a, a_rs, a_cs, bm + d, ldb, n, true);
    for (int rr = 0; rr < R && d < D; rr++)  // D % 16 columns left: plain loops, same order of c
      for (int c = 0; c < n; c++)
        for (int dd = d; dd < D; dd++) C[(r + rr) * ldc + dd] += a[rr * a_rs + c * a_cs] * bm[c * ldb + dd];
  };
  int r = 0;
  for (; r + kRows <= nr; r += kRows) rows.template operator()<kRows>(r);
  for (; r < nr; r++) rows.template operator()<1>(r);
}

// Bt (D,kB) = transpose of nj rows of X (stride ldx), columns nj..kB-1 zeroed.
void pack_transposed(float* Bt /*(D,kB)*/, const float* X /*(nj,D) stride ldx*/, int64_t ldx, int nj, int D) {
  for (int d = 0; d < D; d++) {
    float* bt = Bt + d * kB;
    for (int j = 0; j < nj; j++) bt[j] = X[j * ldx + d];
    for (int j = nj; j < kB; j++) bt[j] = 0.0f;
  }
}

// Diagonal tiles (query tile == key tile: row/column i is position i0+i for both) get the scores
// of keys after their query set to -inf, so exp gives them P = 0 exactly. mask_lower works on
// S (queries, keys), rows i < ni, masking every column j > i (padding columns included);
// mask_upper on S^T (keys, queries), rows j < nj, masking columns i < j.
void mask_lower(float* S /*(kB,kB)*/, int ni) {
  for (int i = 0; i < ni; i++)
    for (int j = i + 1; j < kB; j++) S[i * kB + j] = -std::numeric_limits<float>::infinity();
}
void mask_upper(float* St /*(kB,kB)*/, int nj) {
  for (int j = 0; j < nj; j++)
    for (int i = 0; i < j; i++) St[j * kB + i] = -std::numeric_limits<float>::infinity();
}

struct AlignedFree {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
using Scratch = std::unique_ptr<float[], AlignedFree>;
Scratch alloc_scratch(size_t n) { return Scratch(new (std::align_val_t(64)) float[n]); }

// Sizes and qkv offsets shared by every tile of one call.
struct Geometry {
  int B, T, H, Hkv, D, group, n_tiles;
  int64_t W;  // qkv row width (H + 2*Hkv) * D
  float scale;
  Geometry(int B_, int T_, int H_, int Hkv_, int D_)
      : B(B_),
        T(T_),
        H(H_),
        Hkv(Hkv_),
        D(D_),
        group(H_ / Hkv_),
        n_tiles((T_ + kB - 1) / kB),
        W(int64_t(H_ + 2 * Hkv_) * D_),
        scale(float(1.0 / std::sqrt(double(D_)))) {}
  int rows(int tile) const { return std::min(kB, T - tile * kB); }
  // Offsets into row b*T + t of qkv (or dqkv): q head h, k and v of kv head kvh.
  int64_t row(int b, int t) const { return (int64_t(b) * T + t) * W; }
  int64_t q_col(int h) const { return int64_t(h) * D; }
  int64_t k_col(int kvh) const { return int64_t(H + kvh) * D; }
  int64_t v_col(int kvh) const { return int64_t(H + Hkv + kvh) * D; }
};

// Forward of one (b, h, query tile qt), computed transposed: St = K Q^T holds keys in rows and
// queries in columns, so Q is packed once per task (not K once per tile pair) and each query's
// max and sum are column reductions, vectorized across queries with no horizontal step.
// scratch: St (kB,kB), Qt (D,kB), O (kB,D), m, l, corr, mx (kB).
void forward_tile(float* out, float* lse, const float* qkv, const Geometry& g, int b, int h, int qt, float* scratch) {
  const int D = g.D, i0 = qt * kB, ni = g.rows(qt), kvh = h / g.group;
  float* St = scratch;              // (kB,kB) scores^T, then probabilities^T
  float* Qt = St + kB * kB;         // (D,kB)
  float* O = Qt + int64_t(D) * kB;  // (kB,D) unnormalized output
  float* m = O + int64_t(kB) * D;   // (kB) running max of scaled scores
  float* l = m + kB;                // (kB) running sum of exp(score - m)
  float* corr = l + kB;             // (kB) exp(m_old - m_new)
  float* mx = corr + kB;            // (kB) max over the tile's keys
  pack_transposed(Qt, qkv + g.row(b, i0) + g.q_col(h), g.W, ni, D);
  std::fill(O, O + int64_t(kB) * D, 0.0f);
  std::fill(m, m + kB, -std::numeric_limits<float>::infinity());
  std::fill(l, l + kB, 0.0f);
  for (int kt = 0; kt <= qt; kt++) {  // key tiles above the diagonal are fully masked: skipped
    const int j0 = kt * kB, nj = g.rows(kt);
    const bool diag = kt == qt;
    tile_dot(St, qkv + g.row(b, j0) + g.k_col(kvh), g.W, Qt, nj, D, diag ? Tri::upper : Tri::none);
    if (diag) mask_upper(St, nj);  // earlier tiles are full (nj == kB) and wholly visible
    // Columns i >= ni are padding (Qt is 0 there): computed, finite, never stored.
    std::copy(St, St + kB, mx);
    for (int j = 1; j < nj; j++)
      for (int i = 0; i < kB; i++) mx[i] = std::max(mx[i], St[j * kB + i]);
    for (int i = 0; i < kB; i++) {
      // Every query sees key i0 at least, so m_new is finite; scale > 0 commutes with max.
      const float m_new = std::max(m[i], mx[i] * g.scale);
      corr[i] = fast_exp(m[i] - m_new);  // m = -inf on the first tile: corr = 0
      l[i] *= corr[i];
      m[i] = m_new;
    }
    for (int j = 0; j < nj; j++)
      for (int i = 0; i < kB; i++) {
        const float p = fast_exp(St[j * kB + i] * g.scale - m[i]);
        St[j * kB + i] = p;
        l[i] += p;
      }
    for (int i = 0; i < ni; i++)
      for (int d = 0; d < D; d++) O[int64_t(i) * D + d] *= corr[i];
    // O += P V with P(i, j) = St[j][i]
    tile_axpy(O, D, St, 1, kB, qkv + g.row(b, j0) + g.v_col(kvh), g.W, ni, nj, D, diag ? Tri::lower : Tri::none);
  }
  for (int i = 0; i < ni; i++) {
    const float inv = 1.0f / l[i];
    float* o = out + (int64_t(b) * g.T + i0 + i) * g.H * D + g.q_col(h);
    for (int d = 0; d < D; d++) o[d] = O[int64_t(i) * D + d] * inv;
    lse[(int64_t(b) * g.H + h) * g.T + i0 + i] = m[i] + std::log(l[i]);
  }
}

// Backward of one (query tile qt of head h) x (key tile kt) pair of batch row b:
//   P = exp(scale*QK^T - lse), dP = dO V^T, dS = P*(dP - Di)*scale,
//   dV += P^T dO, dK += dS^T Q (both into kB x D accumulators, skipped when dk == nullptr),
//   dQ += dS K (into dq rows at stride ldq, skipped when dq == nullptr).
// Kt, Vt: the key tile's k and v packed transposed; di (B,H,T) = rowsum(dout * out).
// scratch: P, dS (kB,kB).
void backward_tile(float* dq, int64_t ldq, float* dk /*(kB,D)*/, float* dv /*(kB,D)*/, const float* dout,
                   const float* qkv, const float* lse, const float* di, const float* Kt, const float* Vt,
                   const Geometry& g, int b, int h, int qt, int kt, float* scratch) {
  const int D = g.D, i0 = qt * kB, ni = g.rows(qt), j0 = kt * kB, nj = g.rows(kt), kvh = h / g.group;
  float* P = scratch;       // (kB,kB)
  float* dS = P + kB * kB;  // (kB,kB) dP, then dS
  const int64_t ldo = int64_t(g.H) * D;
  const float* q = qkv + g.row(b, i0) + g.q_col(h);
  const float* dO = dout + (int64_t(b) * g.T + i0) * ldo + g.q_col(h);
  const float* lse_i = lse + (int64_t(b) * g.H + h) * g.T + i0;
  const float* Di = di + (int64_t(b) * g.H + h) * g.T + i0;
  const bool diag = kt == qt;
  const Tri tri_q = diag ? Tri::lower : Tri::none, tri_k = diag ? Tri::upper : Tri::none;
  tile_dot(P, q, g.W, Kt, ni, D, tri_q);
  if (diag) mask_lower(P, ni);
  for (int i = 0; i < ni; i++) {
    float* p = P + i * kB;
    const float li = lse_i[i];
    for (int j = 0; j < kB; j++) p[j] = fast_exp(p[j] * g.scale - li);
  }
  tile_dot(dS, dO, ldo, Vt, ni, D, Tri::none);  // all columns: dS = P (dP - Di) must see finite dP
  for (int i = 0; i < ni; i++) {
    const float di = Di[i];
    for (int j = 0; j < kB; j++) dS[i * kB + j] = P[i * kB + j] * (dS[i * kB + j] - di) * g.scale;
  }
  if (dk != nullptr) {
    tile_axpy(dv, D, P, 1, kB, dO, ldo, nj, ni, D, tri_k);
    tile_axpy(dk, D, dS, 1, kB, q, g.W, nj, ni, D, tri_k);
  }
  if (dq != nullptr) tile_axpy(dq, ldq, dS, kB, 1, qkv + g.row(b, j0) + g.k_col(kvh), g.W, ni, nj, D, tri_q);
}

// dk, dv of key tile kt of (b, kvh), summed over the group's query heads and the query tiles at and
// below the diagonal in a fixed order; with dq_too, also adds each pair's dS K into dqkv's dq rows.
void backward_key_tile(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* di,
                       const Geometry& g, int b, int kvh, int kt, bool dq_too, float* scratch) {
  const int D = g.D, j0 = kt * kB, nj = g.rows(kt);
  float* Kt = scratch;                         // (D,kB)
  float* Vt = Kt + int64_t(D) * kB;            // (D,kB)
  float* dk = Vt + int64_t(D) * kB;            // (kB,D)
  float* dv = dk + int64_t(kB) * D;            // (kB,D)
  float* tile_scratch = dv + int64_t(kB) * D;  // 2*kB*kB
  pack_transposed(Kt, qkv + g.row(b, j0) + g.k_col(kvh), g.W, nj, D);
  pack_transposed(Vt, qkv + g.row(b, j0) + g.v_col(kvh), g.W, nj, D);
  std::fill(dk, dk + 2 * int64_t(kB) * D, 0.0f);
  for (int h = kvh * g.group; h < (kvh + 1) * g.group; h++)
    for (int qt = kt; qt < g.n_tiles; qt++) {
      float* dq = dq_too ? dqkv + g.row(b, qt * kB) + g.q_col(h) : nullptr;
      backward_tile(dq, g.W, dk, dv, dout, qkv, lse, di, Kt, Vt, g, b, h, qt, kt, tile_scratch);
    }
  for (int j = 0; j < nj; j++) {
    std::memcpy(dqkv + g.row(b, j0 + j) + g.k_col(kvh), dk + int64_t(j) * D, sizeof(float) * D);
    std::memcpy(dqkv + g.row(b, j0 + j) + g.v_col(kvh), dv + int64_t(j) * D, sizeof(float) * D);
  }
}

// dq of query tile qt of (b, h) (the two-pass schedule), computed transposed like the forward:
// St = K Q^T and dPt = V dO^T with Q and dO packed once per task instead of K and V once per pair.
// Each element is the same sum in the same order as in backward_tile (an fma's product commutes),
// and dq sums dS K over key tiles 0..qt in order, so both schedules give the same bits.
// scratch: Qt, dOt (D,kB), dq (kB,D), Pt, dSt (kB,kB), lse and Di of the tile (kB, zero-padded).
void backward_query_tile(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* di,
                         const Geometry& g, int b, int h, int qt, float* scratch) {
  const int D = g.D, i0 = qt * kB, ni = g.rows(qt), kvh = h / g.group;
  const int64_t ldo = int64_t(g.H) * D;
  float* Qt = scratch;                // (D,kB)
  float* dOt = Qt + int64_t(D) * kB;  // (D,kB)
  float* dq = dOt + int64_t(D) * kB;  // (kB,D)
  float* Pt = dq + int64_t(kB) * D;   // (kB,kB) probabilities^T
  float* dSt = Pt + kB * kB;          // (kB,kB) dP^T, then dS^T
  float* lse_i = dSt + kB * kB;       // (kB)
  float* Di = lse_i + kB;             // (kB)
  pack_transposed(Qt, qkv + g.row(b, i0) + g.q_col(h), g.W, ni, D);
  pack_transposed(dOt, dout + (int64_t(b) * g.T + i0) * ldo + g.q_col(h), ldo, ni, D);
  const int64_t bh_t = (int64_t(b) * g.H + h) * g.T + i0;
  for (int i = 0; i < kB; i++) {
    lse_i[i] = i < ni ? lse[bh_t + i] : 0.0f;
    Di[i] = i < ni ? di[bh_t + i] : 0.0f;
  }
  std::fill(dq, dq + int64_t(kB) * D, 0.0f);
  for (int kt = 0; kt <= qt; kt++) {
    const int j0 = kt * kB, nj = g.rows(kt);
    const bool diag = kt == qt;
    const float* k = qkv + g.row(b, j0) + g.k_col(kvh);
    tile_dot(Pt, k, g.W, Qt, nj, D, diag ? Tri::upper : Tri::none);
    if (diag) mask_upper(Pt, nj);
    for (int j = 0; j < nj; j++)
      for (int i = 0; i < kB; i++) Pt[j * kB + i] = fast_exp(Pt[j * kB + i] * g.scale - lse_i[i]);
    tile_dot(dSt, qkv + g.row(b, j0) + g.v_col(kvh), g.W, dOt, nj, D, Tri::none);
    for (int j = 0; j < nj; j++)
      for (int i = 0; i < kB; i++) dSt[j * kB + i] = Pt[j * kB + i] * (dSt[j * kB + i] - Di[i]) * g.scale;
    tile_axpy(dq, D, dSt, 1, kB, k, g.W, ni, nj, D, diag ? Tri::lower : Tri::none);  // dq += dS K
  }
  for (int i = 0; i < ni; i++)
    std::memcpy(dqkv + g.row(b, i0 + i) + g.q_col(h), dq + int64_t(i) * D, sizeof(float) * D);
}

void forward_all(float* out, float* lse, const float* qkv, const Geometry& g) {
  const int64_t n_tasks = int64_t(g.B) * g.H * g.n_tiles;
#pragma omp parallel
  {
    Scratch scratch = alloc_scratch(size_t(kB) * kB + 2 * size_t(kB) * g.D + 4 * kB);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_tasks; task++) {
      const int qt = g.n_tiles - 1 - int(task % g.n_tiles);  // longest rows first
      const int bh = int(task / g.n_tiles);
      forward_tile(out, lse, qkv, g, bh / g.H, bh % g.H, qt, scratch.get());
    }
  }
}

void backward_all(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                  const Geometry& g) {
  const size_t scratch_size = 4 * size_t(kB) * g.D + 2 * size_t(kB) * kB + 2 * kB;
  // di (B,H,T) = rowsum(dout * out) = sum_j P_ij dP_ij, once per query row.
  const int64_t n_rows = int64_t(g.B) * g.H * g.T, ldo = int64_t(g.H) * g.D;
  Scratch di = alloc_scratch(n_rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n_rows; r++) {
    const int64_t bh = r / g.T, t = r % g.T, b = bh / g.H, h = bh % g.H;
    const float* dy = dout + (b * g.T + t) * ldo + h * g.D;
    const float* o = out + (b * g.T + t) * ldo + h * g.D;
    float acc = 0.0f;
    for (int d = 0; d < g.D; d++) acc += dy[d] * o[d];
    di[r] = acc;
  }
  const int64_t n_kv = int64_t(g.B) * g.Hkv;
  if (n_kv >= 2 * int64_t(omp_get_max_threads())) {
    // One task per (b, kvh): owns dq of heads [kvh*group, (kvh+1)*group) and dk, dv of kvh.
#pragma omp parallel
    {
      Scratch scratch = alloc_scratch(scratch_size);
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < n_kv; task++) {
        const int b = int(task / g.Hkv), kvh = int(task % g.Hkv);
        for (int t = 0; t < g.T; t++)  // dq is accumulated below: zero it first
          std::fill_n(dqkv + g.row(b, t) + g.q_col(kvh * g.group), int64_t(g.group) * g.D, 0.0f);
        for (int kt = 0; kt < g.n_tiles; kt++)
          backward_key_tile(dqkv, dout, qkv, lse, di.get(), g, b, kvh, kt, true, scratch.get());
      }
    }
    return;
  }
  // Few (b, kvh): pass 1 writes dk, dv per (b, kvh, key tile), pass 2 dq per (b, h, query tile).
  const int64_t n_kv_tiles = n_kv * g.n_tiles, n_q_tiles = int64_t(g.B) * g.H * g.n_tiles;
#pragma omp parallel
  {
    Scratch scratch = alloc_scratch(scratch_size);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_kv_tiles; task++) {
      const int kt = int(task % g.n_tiles);  // kt = 0 has the most query tiles: first
      const int bk = int(task / g.n_tiles);
      backward_key_tile(dqkv, dout, qkv, lse, di.get(), g, bk / g.Hkv, bk % g.Hkv, kt, false, scratch.get());
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_q_tiles; task++) {
      const int qt = g.n_tiles - 1 - int(task % g.n_tiles);
      const int bh = int(task / g.n_tiles);
      backward_query_tile(dqkv, dout, qkv, lse, di.get(), g, bh / g.H, bh % g.H, qt, scratch.get());
    }
  }
}

}  // namespace

void attention_forward(float* out /*(B,T,H*D)*/, float* lse /*(B,H,T)*/, const float* qkv /*(B,T,(H+2*Hkv)*D)*/, int B,
                       int T, int H, int Hkv, int D) {
  CHECK(Hkv > 0 && H % Hkv == 0, "attention: H {} must be a multiple of Hkv {}", H, Hkv);
  if (B <= 0 || T <= 0) return;
  const Geometry g(B, T, H, Hkv, D);
  forward_all(out, lse, qkv, g);
}

void attention_backward(float* dqkv /*(B,T,(H+2*Hkv)*D)*/, const float* dout /*(B,T,H*D)*/,
                        const float* qkv /*(B,T,(H+2*Hkv)*D)*/, const float* out /*(B,T,H*D)*/,
                        const float* lse /*(B,H,T)*/, int B, int T, int H, int Hkv, int D) {
  CHECK(Hkv > 0 && H % Hkv == 0, "attention: H {} must be a multiple of Hkv {}", H, Hkv);
  if (B <= 0 || T <= 0) return;
  const Geometry g(B, T, H, Hkv, D);
  backward_all(dqkv, dout, qkv, out, lse, g);
}

}  // namespace llamatrain::attention_v1
