// Flash-style causal grouped-query attention on CPU (cpu::attention_forward / attention_backward);
// must match ref::attention_* (kernels/ref/attention.cpp) to fp32 rounding. Never materializes the
// (B,H,T,T) scores: queries and keys are cut into kB = 64-row tiles; a (query tile, key tile) pair
// is 2 (forward) or 5 (backward) small fp32 GEMMs, all run by one register-blocked kernel on
// compiler vector extensions (8 x 32 with AVX-512, 4 x 16 with AVX2), plus a vectorized polynomial exp.
//   forward:  per (b, h, query tile), key tiles 0..diagonal with an online softmax (running max m
//             and sum l per query, the output rescaled by exp(m_old - m_new)); scores computed
//             transposed (K Q^T) so Q is packed once; tiles above the diagonal are skipped;
//             lse = m + log l is saved.
//   backward: FlashAttention-2: P is recomputed from q, k and the saved lse; Di = rowsum(dout*out)
//             once per row, by the task that uses it; per key tile (K, V packed once) dK, dV
//             accumulate over the kv head's query heads and query tiles, dQ accumulates dS K over
//             key tiles (the key-tile-0 term is stored, so dq is never zero-filled).
// Work saved on diagonal tiles: products skip the masked triangle in kV-column groups (scores, dP)
// or exactly per 8-row block (P V, P^T dO, dS^T Q, dS K); masked entries are -inf before exp and
// dS = 0 there. Memory: tiles are transposed kV x kV in registers; rows a pass touches first (the
// next task's q, out, the dk/dv rows stored after a key tile) are prefetched so the misses overlap
// with the products. Measured side by side with the previous kernel: bench/attention_bench.cpp,
// docs/performance.md ("Attention kernel").
// Parallelism and race-freedom: the forward writes disjoint (b, h, query tile) blocks. The backward
// runs one task per (b, kv head) when there are >= 2 per thread: the task owns dq of its query
// heads and dk, dv of its kv head, so nothing is shared. With fewer tasks it runs two passes:
// dk, dv per (b, kv head, key tile) and dq per (b, h, query tile), each block written by one task.
// Bitwise independent of the thread count and so of the scheme, for any compiler and -march: both
// schemes compute every value of dqkv in the same two functions (backward_tile for a tile pair,
// fill_di), each compiled once, with the same arguments and in the same order; the dq pass repacks
// K, V per pair to make the one-pass scheme's call. Same order alone was not enough: code compiled
// per call site may differ in fma contraction and vectorization. Scratch is O(kB * (kB + D)) per
// thread. Details and derivation: docs/derivations.md, section "Attention".
// Sliding window (window > 0: key j visible to query i iff i - window < j <= i): key tiles wholly
// before a query tile's window are skipped (forward, dq) as query tiles wholly after a key tile's
// reach are (dk, dv); tiles the window's edge crosses get those scores -inf as well (mask_window).
// A query row may then have no visible key in the first tile it meets, so the forward's running max
// starts at -FLT_MAX instead of -inf (exp(-inf - -inf) would be NaN); the first processed key tile
// stores dq instead of key tile 0.
// Packed documents (doc_start: key j visible to query i only if doc_start[i] <= j) work the same
// way per sequence: a query tile's first key tile is the one holding its first row's document start
// (doc_start is non-decreasing, so that row sees the earliest keys of the tile), the query tiles that
// see a key tile are those whose first row's document starts at or before its last key, and tiles
// a boundary crosses get the other documents' scores -inf (mask_docs). A sequence of many short
// documents so computes little more than its documents' own triangles.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <utility>

#include "core/error.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/variant.h"  // last: this file is compiled once per CPU variant

namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT {

namespace {

constexpr int kB = 64;  // rows per query tile = keys per key tile (equal, so every row of a
                        // processed key tile sees at least one unmasked key)

// The backward's arithmetic lives in functions marked ONE_BODY, called by both schedules: one
// compiled copy each, never inlined into or specialized for a caller (GCC's noipa; Clang lacks it,
// noinline is its nearest), so a compiler cannot vectorize, fuse or reorder a value differently in
// one schedule than in the other.
#if defined(__clang__)
#define ONE_BODY [[gnu::noinline]]
#else
#define ONE_BODY [[gnu::noipa]]
#endif

// Micro-kernels on GCC/Clang vector extensions, one vector register wide: 16 floats (zmm) with
// AVX-512, 8 (ymm) with AVX, else 4. Plain loops over a float array keep their accumulators in
// memory, these keep a block of rows x columns in registers. a * b + c contracts to one fma. A
// vector wider than the target's registers is not split into registers: GCC keeps it in memory and
// copies it through the stack for every operation (16 floats on AVX2 ran the kernel ~10x slower).
constexpr int kV = LLAMATRAIN_CPU_VECTOR_FLOATS;  // floats per vf (kernels/cpu/variant.h)
using vf = float __attribute__((vector_size(kV * sizeof(float))));
// vf never crosses a function boundary by value: its ABI differs between targets (and GCC warns).
// Unaligned access through a 4-byte-aligned alias of vf: a plain vector load or store (memcpy here
// made GCC keep the accumulators in a stack array and copy them in and out of registers). A typedef,
// not `using`: Clang applies the attributes of a `using` to float, so the alias stayed 64-aligned.
typedef float vf_unaligned __attribute__((vector_size(kV * sizeof(float)), aligned(4), may_alias));
static_assert(alignof(vf_unaligned) == 4);
inline void load(vf& v, const float* p) { v = *reinterpret_cast<const vf_unaligned*>(p); }
inline void store(float* p, const vf& v) { *reinterpret_cast<vf_unaligned*>(p) = v; }

// The one micro-kernel: rows [0, R) and columns [0, kV NV) of
//   C[r][:] (+)= sum_{c < n} A(r, c) * Bm[c][:],   A(r, c) = a_transposed ? A[r + c*lda] : A[r*lda + c]
// with C rows at stride ldc, Bm rows at stride ldb; starts from 0 unless accumulate, from C[r][:] *
// row_scale[r] if row_scale is given (the online softmax's rescale, fused). An R x NV
// block of accumulators stays in registers (8 x 2 measured ~2.4x faster than 4 x 4 on AVX-512: 10
// loads per 16 fma instead of 20; kRows, kCols below). The layout of A is a template argument so the
// compiler keeps one loop (a runtime pair of strides made it version the loop and copy the
// accumulators through the stack around it). Each element sums c in increasing order whatever the blocking, so results
// do not depend on how callers cut rows and columns. narrow (NV = 1): only the first `cols` < kV
// columns exist; C and Bm are read zero-padded and C is stored in part, so a head dim that is not a
// multiple of kV runs the same vector arithmetic as the rest instead of a scalar loop.
template <bool narrow>
inline void load_cols(vf& v, const float* p, int cols) {
  if constexpr (narrow) {
    float t[kV] = {};
    std::memcpy(t, p, sizeof(float) * cols);
    load(v, t);
  } else {
    load(v, p);
  }
}
template <bool narrow>
inline void store_cols(float* p, const vf& v, int cols) {
  if constexpr (narrow) {
    float t[kV];
    store(t, v);
    std::memcpy(p, t, sizeof(float) * cols);
  } else {
    store(p, v);
  }
}
template <int R, int NV, bool accumulate, bool a_transposed, bool narrow = false>
inline void gemm_block(float* C, int64_t ldc, const float* A, int64_t lda, const float* Bm, int64_t ldb, int n,
                       const float* row_scale = nullptr, int cols = kV) {
  static_assert(!narrow || NV == 1);
  vf acc[R][NV];
  for (int r = 0; r < R; r++)
    for (int v = 0; v < NV; v++) {
      if (accumulate) {
        load_cols<narrow>(acc[r][v], C + r * ldc + v * kV, cols);
        if (row_scale != nullptr) acc[r][v] *= row_scale[r];
      } else {
        acc[r][v] = vf{};
      }
    }
  for (int c = 0; c < n; c++) {
    vf b[NV];
    for (int v = 0; v < NV; v++) load_cols<narrow>(b[v], Bm + c * ldb + v * kV, cols);
    for (int r = 0; r < R; r++) {
      const float a = a_transposed ? A[r + c * lda] : A[r * lda + c];
      for (int v = 0; v < NV; v++) acc[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < R; r++)
    for (int v = 0; v < NV; v++) store_cols<narrow>(C + r * ldc + v * kV, acc[r][v], cols);
}

// Rows and columns per gemm_block: its R x NV accumulators must fit the vector registers with room
// for the NV loads of Bm and a broadcast. AVX-512 has 32 registers (8 x 2 blocks: 16 accumulators);
// AVX2 has 16, where 8 x 2 would spill every iteration: 4 x 2 keeps 8 accumulators, 2 loads and a
// broadcast in registers (6 loads per 8 fma). Results do not change with the blocking (see
// gemm_block).
constexpr int kRows = kV == 16 ? 8 : 4;
constexpr int kCols = 2 * kV;  // NV = 2

// Which part of a diagonal tile a product needs (rows and columns index the same 64 positions):
// Tri::lower, columns c <= row r (rows are queries, columns keys); Tri::upper, columns c >= r (rows
// are keys, columns queries); Tri::none, everything (off-diagonal tiles).
enum class Tri { none, lower, upper };

// S (kB,kB) [i][j] = sum_d A[i][d] * Bt[d][j] for rows i < ni (padded columns of Bt are 0), A rows
// at stride lda. On a diagonal tile (tri != none) a block of rows gets only the kV-column groups
// that hold some of its unmasked entries; the columns left out are all masked, and the caller
// overwrites or ignores them.
void tile_dot(float* S /*(kB,kB)*/, const float* A /*(ni,D) stride lda*/, int64_t lda, const float* Bt /*(D,kB)*/,
              int ni, int D, Tri tri) {
  auto col_begin = [&](int i) { return tri == Tri::upper ? i / kV * kV : 0; };
  auto col_end = [&](int i_end) { return tri == Tri::lower ? std::min(kB, (i_end + kV - 1) / kV * kV) : kB; };
  auto rows = [&]<int R>(int i) {
    const int j_end = col_end(i + R);
    int j = col_begin(i);
    for (; j + kCols <= j_end; j += kCols)
      gemm_block<R, kCols / kV, false, false>(S + i * kB + j, kB, A + i * lda, lda, Bt + j, kB, D);
    for (; j < j_end; j += kV) gemm_block<R, 1, false, false>(S + i * kB + j, kB, A + i * lda, lda, Bt + j, kB, D);
  };
  int i = 0;
  for (; i + kRows <= ni; i += kRows) rows.template operator()<kRows>(i);
  for (; i < ni; i++) rows.template operator()<1>(i);
}

// C[r][:] += sum_c A(r, c) * Bm[c][:] for r < nr, with A(r, c) = A[r*a_rs + c*a_cs] (a_rs/a_cs
// select A or A^T; one of them is 1), C rows at stride ldc and Bm rows at stride ldb, D columns.
// c runs over [0, nc) for Tri::none; on a diagonal tile, where A(r, c) = 0 beyond the causal
// triangle, Tri::lower (rows are queries) stops at c <= r and Tri::upper (rows are keys) starts at
// c = r, per block of rows. Skipped terms are exact zeros, so the result is the same as without
// skipping. accumulate = false starts C from 0 (the same bits as zeroing C first, without touching
// it twice); row_scale (nr), if given, scales row r of C before the sum. Every column runs on
// gemm_block, the D % kV last ones on its narrow form: no scalar loop, whose arithmetic the compiler
// may vectorize differently per call site or stride (GCC versions it for stride 1 and vectorizes
// that copy as an in-order reduction, unfused, while the other copy fuses into fma).
void tile_axpy(float* C /*(nr,D) stride ldc*/, int64_t ldc, const float* A, int a_rs, int a_cs,
               const float* Bm /*(nc,D) stride ldb*/, int64_t ldb, int nr, int nc, int D, Tri tri,
               bool accumulate = true, const float* row_scale = nullptr) {
  auto c_begin = [&](int r) { return tri == Tri::upper ? r : 0; };
  auto c_end = [&](int r_end) { return tri == Tri::lower ? std::min(nc, r_end) : nc; };
  auto block = [&]<int R, int NV, bool acc, bool narrow = false>(float* c, const float* a, const float* bm, int n,
                                                                 const float* rs, int cols = kV) {
    if (a_rs == 1)
      gemm_block<R, NV, acc, true, narrow>(c, ldc, a, a_cs, bm, ldb, n, rs, cols);
    else
      gemm_block<R, NV, acc, false, narrow>(c, ldc, a, a_rs, bm, ldb, n, rs, cols);
  };
  auto rows = [&]<int R, bool acc>(int r) {
    const int c0 = c_begin(r), n = c_end(r + R) - c0;
    const float* a = A + r * a_rs + c0 * a_cs;
    const float* bm = Bm + c0 * ldb;
    const float* rs = row_scale != nullptr ? row_scale + r : nullptr;
    int d = 0;
    for (; d + kCols <= D; d += kCols) block.template operator()<R, kCols / kV, acc>(C + r * ldc + d, a, bm + d, n, rs);
    for (; d + kV <= D; d += kV) block.template operator()<R, 1, acc>(C + r * ldc + d, a, bm + d, n, rs);
    if (d < D) block.template operator()<R, 1, acc, true>(C + r * ldc + d, a, bm + d, n, rs, D - d);
  };
  int r = 0;
  if (accumulate) {
    for (; r + kRows <= nr; r += kRows) rows.template operator()<kRows, true>(r);
    for (; r < nr; r++) rows.template operator()<1, true>(r);
  } else {
    for (; r + kRows <= nr; r += kRows) rows.template operator()<kRows, false>(r);
    for (; r < nr; r++) rows.template operator()<1, false>(r);
  }
}

// One butterfly stage of a kV x kV transpose: rows a, b (row indices i and i + w, i & w == 0) swap
// their off-diagonal w x w blocks. The stages w = kV/2, ..., 2, 1 transpose the kV rows.
template <int w, size_t... k>
inline void swap_blocks(vf& a, vf& b, std::index_sequence<k...>) {
  const vf a_new = __builtin_shufflevector(a, b, ((k & w) ? kV + (k ^ w) : k)...);
  b = __builtin_shufflevector(a, b, ((k & w) ? kV + k : (k ^ w))...);
  a = a_new;
}
template <int w>
inline void transpose_stage(vf (&x)[kV]) {
  if constexpr (w < kV)
    for (int i = 0; i < kV; i++)
      if ((i & w) == 0) swap_blocks<w>(x[i], x[i + w], std::make_index_sequence<kV>());
}

// Bt (D,kB) = transpose of nj rows of X (stride ldx), columns nj..kB-1 zeroed. kV x kV blocks are
// transposed in registers (kV row loads, kV log2(kV) shuffles, kV stores); the edges element by
// element.
void pack_transposed(float* Bt /*(D,kB)*/, const float* X /*(nj,D) stride ldx*/, int64_t ldx, int nj, int D) {
  int j = 0;
  for (; j + kV <= nj; j += kV) {
    int d = 0;
    for (; d + kV <= D; d += kV) {
      vf x[kV];
      for (int r = 0; r < kV; r++) load(x[r], X + (j + r) * ldx + d);
      transpose_stage<8>(x);  // (a stage as wide as the vector or wider does nothing)
      transpose_stage<4>(x);
      transpose_stage<2>(x);
      transpose_stage<1>(x);
      for (int r = 0; r < kV; r++) store(Bt + (d + r) * kB + j, x[r]);
    }
    for (int r = j; r < j + kV; r++)
      for (int dd = d; dd < D; dd++) Bt[dd * kB + r] = X[r * ldx + dd];
  }
  for (; j < nj; j++)
    for (int d = 0; d < D; d++) Bt[d * kB + j] = X[j * ldx + d];
  for (int d = 0; d < D; d++)
    for (int jj = nj; jj < kB; jj++) Bt[d * kB + jj] = 0.0f;
}

// Asks for n rows of X (stride ldx, D floats each) to be brought into cache ahead of use (for_write:
// in a writable state): the rows of a tile lie kilobytes apart, a pattern the hardware prefetchers
// do not follow, so a pass that first touches a tile (packing q, storing out) would otherwise wait
// on memory row by row instead of overlapping with the products.
void prefetch_rows(const float* X /*(n,D) stride ldx*/, int64_t ldx, int n, int D, bool for_write) {
  for (int j = 0; j < n; j++)
    for (int d = 0; d < D; d += 64 / int(sizeof(float))) {
      if (for_write)
        __builtin_prefetch(X + j * ldx + d, 1, 3);
      else
        __builtin_prefetch(X + j * ldx + d, 0, 3);
    }
}

// Scores of keys before a query's window set to -inf on a tile pair the window's edge crosses: S
// (queries i < ni at positions i0 + i, keys j < kB at j0 + j), or with transposed, S^T (keys j < nj,
// queries i < kB). Key j0 + j is masked for query i0 + i iff j0 + j <= i0 + i - window.
void mask_window(float* S /*(kB,kB)*/, int rows, int i0, int j0, int window, bool transposed) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < kB; c++) {
      const int i = transposed ? c : r, j = transposed ? r : c;
      float& s = S[r * kB + c];
      s = j0 + j <= i0 + i - window ? -inf : s;  // a select, not a conditional store: vectorizes on AVX2
    }
}

// Scores of keys before their query's document set to -inf on a tile pair a document boundary
// crosses (layout as mask_window's; doc: the sequence's doc_start): key j0 + j is masked for query
// i0 + i iff j0 + j < doc[i0 + i]. Query columns past the sequence's end (padding) are left as they are.
void mask_docs(float* S /*(kB,kB)*/, int rows, int cols, int i0, int j0, const int32_t* doc, bool transposed) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const int i = transposed ? c : r, j = transposed ? r : c;
      float& s = S[r * kB + c];
      s = j0 + j < doc[i0 + i] ? -inf : s;
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

// sum_d x[d] * y[d] in a fixed order: kV lane sums (d mod kV), then the lanes pairwise; so it
// vectorizes without -ffast-math and its bits do not depend on the caller.
float dot(const float* x, const float* y, int n) {
  float lane[kV] = {};
  int d = 0;
  for (; d + kV <= n; d += kV)
    for (int k = 0; k < kV; k++) lane[k] += x[d + k] * y[d + k];
  for (; d < n; d++) lane[d % kV] += x[d] * y[d];
  for (int w = kV / 2; w > 0; w /= 2)
    for (int k = 0; k < w; k++) lane[k] += lane[k + w];
  return lane[0];
}

struct AlignedFree {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
using Scratch = std::unique_ptr<float[], AlignedFree>;
Scratch alloc_scratch(size_t n) { return Scratch(new (std::align_val_t(64)) float[n]); }

// doc_start (B,T), if given, must describe documents: each value the previous one or its own
// position (0 at position 0); the tile ranges above rely on it.
void check_documents(const int32_t* doc_start, int B, int T) {
  if (doc_start == nullptr) return;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const int32_t d = doc_start[int64_t(b) * T + t];
      CHECK(d == t || (t > 0 && d == doc_start[int64_t(b) * T + t - 1]),
            "attention: doc_start[{}, {}] = {} is neither {} nor the previous token's document start", b, t, d, t);
    }
}

// Sizes and qkv offsets shared by every tile of one call.
struct Geometry {
  int B, T, H, Hkv, D, group, n_tiles;
  int window;  // 0: causal; else the sliding window
  int64_t W;   // qkv row width (H + 2*Hkv) * D
  float scale;
  const int32_t* doc_start;  // (B,T) packed documents, or nullptr
  Geometry(int B_, int T_, int H_, int Hkv_, int D_, int window_, const int32_t* doc_start_)
      : B(B_),
        T(T_),
        H(H_),
        Hkv(Hkv_),
        D(D_),
        group(H_ / Hkv_),
        n_tiles((T_ + kB - 1) / kB),
        window(window_),
        W(int64_t(H_ + 2 * Hkv_) * D_),
        scale(float(1.0 / std::sqrt(double(D_)))),
        doc_start(doc_start_) {}
  int rows(int tile) const { return std::min(kB, T - tile * kB); }
  bool masked_rows() const { return window > 0 || doc_start != nullptr; }  // a row may miss a whole tile
  const int32_t* doc(int b) const { return doc_start != nullptr ? doc_start + int64_t(b) * T : nullptr; }
  // The key tiles query tile qt of sequence b sees: [first_key_tile(b, qt), qt]; the query tiles that
  // see key tile kt: [kt, last_query_tile(b, kt)] (the same pairs: doc_start is non-decreasing, so a
  // query tile's first row sees its earliest keys). Whether the window's edge crosses pair (qt, kt): its
  // first key is outside the window of its last query; a document boundary: its last query's document
  // starts after its first key.
  int first_key_tile(int b, int qt) const {
    const int w = window > 0 ? std::max(0, qt * kB - window + 1) / kB : 0;
    return doc_start != nullptr ? std::max(w, int(doc(b)[qt * kB]) / kB) : w;
  }
  int last_query_tile(int b, int kt) const {
    int last = window > 0 ? std::min(n_tiles - 1, (kt * kB + kB - 1 + window - 1) / kB) : n_tiles - 1;
    if (doc_start != nullptr) {
      const int32_t* d = doc(b);
      const int last_key = kt * kB + rows(kt) - 1;
      while (last > kt && d[last * kB] > last_key) last--;
    }
    return last;
  }
  bool window_cuts(int qt, int kt) const { return window > 0 && kt * kB <= qt * kB + rows(qt) - 1 - window; }
  bool doc_cuts(int b, int qt, int kt) const {
    return doc_start != nullptr && doc(b)[qt * kB + rows(qt) - 1] > kt * kB;
  }
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
  prefetch_rows(out + (int64_t(b) * g.T + i0) * g.H * D + g.q_col(h), int64_t(g.H) * D, ni, D, true);
  std::fill(O, O + int64_t(kB) * D, 0.0f);
  // A row with no visible key in a tile keeps m = -FLT_MAX there, so corr = exp(0) and p = exp(-inf).
  const float m0 = g.masked_rows() ? -std::numeric_limits<float>::max() : -std::numeric_limits<float>::infinity();
  std::fill(m, m + kB, m0);
  std::fill(l, l + kB, 0.0f);
  // Key tiles above the diagonal are fully masked, as are those before the window or the document: skipped.
  for (int kt = g.first_key_tile(b, qt); kt <= qt; kt++) {
    const int j0 = kt * kB, nj = g.rows(kt);
    const bool diag = kt == qt;
    tile_dot(St, qkv + g.row(b, j0) + g.k_col(kvh), g.W, Qt, nj, D, diag ? Tri::upper : Tri::none);
    if (diag) mask_upper(St, nj);  // earlier tiles are full (nj == kB) and visible up to the window
    if (g.window_cuts(qt, kt)) mask_window(St, nj, i0, j0, g.window, true);
    if (g.doc_cuts(b, qt, kt)) mask_docs(St, nj, ni, i0, j0, g.doc(b), true);
    // Columns i >= ni are padding (Qt is 0 there): computed, finite, never stored.
    std::copy(St, St + kB, mx);
    for (int j = 1; j < nj; j++)
      for (int i = 0; i < kB; i++) mx[i] = std::max(mx[i], St[j * kB + i]);
    for (int i = 0; i < kB; i++) {
      // Causal: every query sees key 0 in the first tile, so m_new is finite; scale > 0 commutes with max.
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
    // O = corr * O + P V with P(i, j) = St[j][i]
    tile_axpy(O, D, St, 1, kB, qkv + g.row(b, j0) + g.v_col(kvh), g.W, ni, nj, D, diag ? Tri::lower : Tri::none, true,
              corr);
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
// The only place the backward computes P, dP, dS and their products: both schedules call it for
// each pair, with the same arguments for dq, so every value of dqkv has the same bits either way.
// scratch: P, dS (kB,kB).
ONE_BODY void backward_tile(float* dq, int64_t ldq, float* dk /*(kB,D)*/, float* dv /*(kB,D)*/, const float* dout,
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
  if (g.window_cuts(qt, kt)) mask_window(P, ni, i0, j0, g.window, false);
  if (g.doc_cuts(b, qt, kt)) mask_docs(P, ni, nj, i0, j0, g.doc(b), false);
  for (int i = 0; i < ni; i++) {
    float* p = P + i * kB;
    const float li = lse_i[i];
    for (int j = 0; j < kB; j++) p[j] = fast_exp(p[j] * g.scale - li);
  }
  // On the diagonal, dP is computed where P can be nonzero (j <= i) and dS = 0 beyond: masked
  // entries have P = 0 exactly, and every product that reads them is skipped below anyway.
  tile_dot(dS, dO, ldo, Vt, ni, D, tri_q);
  for (int i = 0; i < ni; i++) {
    const float di = Di[i];
    const int j_end = diag ? i + 1 : kB;
    for (int j = 0; j < j_end; j++) dS[i * kB + j] = P[i * kB + j] * (dS[i * kB + j] - di) * g.scale;
    for (int j = j_end; j < kB; j++) dS[i * kB + j] = 0.0f;
  }
  if (dk != nullptr) {
    tile_axpy(dv, D, P, 1, kB, dO, ldo, nj, ni, D, tri_k);
    tile_axpy(dk, D, dS, 1, kB, q, g.W, nj, ni, D, tri_k);
  }
  // dq's first term comes from the query tile's first key tile (0 without a window): written, not added to.
  if (dq != nullptr)
    tile_axpy(dq, ldq, dS, kB, 1, qkv + g.row(b, j0) + g.k_col(kvh), g.W, ni, nj, D, tri_q,
              kt > g.first_key_tile(b, qt));
}

// dk, dv of key tile kt of (b, kvh), summed over the group's query heads and the query tiles at and
// below the diagonal (up to the window's reach) in a fixed order; with dq_too, also adds each pair's dS K into dqkv's dq rows.
// scratch: Kt, Vt (D,kB), dk, dv (kB,D), then backward_tile's.
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
  prefetch_rows(dqkv + g.row(b, j0) + g.k_col(kvh), g.W, nj, D, true);  // stored after the loop
  prefetch_rows(dqkv + g.row(b, j0) + g.v_col(kvh), g.W, nj, D, true);
  for (int h = kvh * g.group; h < (kvh + 1) * g.group; h++)
    for (int qt = kt; qt <= g.last_query_tile(b, kt); qt++) {
      float* dq = dq_too ? dqkv + g.row(b, qt * kB) + g.q_col(h) : nullptr;
      backward_tile(dq, g.W, dk, dv, dout, qkv, lse, di, Kt, Vt, g, b, h, qt, kt, tile_scratch);
    }
  for (int j = 0; j < nj; j++) {
    std::memcpy(dqkv + g.row(b, j0 + j) + g.k_col(kvh), dk + int64_t(j) * D, sizeof(float) * D);
    std::memcpy(dqkv + g.row(b, j0 + j) + g.v_col(kvh), dv + int64_t(j) * D, sizeof(float) * D);
  }
}

// dq of query tile qt of (b, h), for the two-pass schedule: over its key tiles up to qt in order, packs
// the key tile's K and V and makes the call the one-pass schedule makes for this pair (dq rows in
// place, the key-tile-0 term stored), with dk, dv off. scratch: laid out as backward_key_tile's.
void backward_query_tile(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* di,
                         const Geometry& g, int b, int h, int qt, float* scratch) {
  const int D = g.D, kvh = h / g.group;
  float* Kt = scratch;                             // (D,kB)
  float* Vt = Kt + int64_t(D) * kB;                // (D,kB)
  float* tile_scratch = Vt + 3 * int64_t(D) * kB;  // 2*kB*kB, where backward_key_tile has it
  float* dq = dqkv + g.row(b, qt * kB) + g.q_col(h);
  for (int kt = g.first_key_tile(b, qt); kt <= qt; kt++) {
    const int j0 = kt * kB, nj = g.rows(kt);
    pack_transposed(Kt, qkv + g.row(b, j0) + g.k_col(kvh), g.W, nj, D);
    pack_transposed(Vt, qkv + g.row(b, j0) + g.v_col(kvh), g.W, nj, D);
    backward_tile(dq, g.W, nullptr, nullptr, dout, qkv, lse, di, Kt, Vt, g, b, h, qt, kt, tile_scratch);
  }
}

// di (B,H,T) = rowsum(dout * out) = sum_j P_ij dP_ij for the rows of (b, h).
ONE_BODY void fill_di(float* di, const float* dout, const float* out, const Geometry& g, int b, int h) {
  const int64_t ldo = int64_t(g.H) * g.D;
  for (int t = 0; t < g.T; t++) {
    const int64_t row = (int64_t(b) * g.T + t) * ldo + g.q_col(h);
    di[(int64_t(b) * g.H + h) * g.T + t] = dot(dout + row, out + row, g.D);
  }
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
      if (task + 1 < n_tasks) {  // q of the next task, which one of the threads takes soon
        const int qt1 = g.n_tiles - 1 - int((task + 1) % g.n_tiles), bh1 = int((task + 1) / g.n_tiles);
        prefetch_rows(qkv + g.row(bh1 / g.H, qt1 * kB) + g.q_col(bh1 % g.H), g.W, g.rows(qt1), g.D, false);
      }
      forward_tile(out, lse, qkv, g, bh / g.H, bh % g.H, qt, scratch.get());
    }
  }
}

void backward_all(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                  const Geometry& g) {
  // Per thread: K and V of a key tile packed (2,D,kB), dk and dv (kB,D) each, P and dS (kB,kB).
  const size_t scratch_size = 4 * size_t(kB) * g.D + 2 * size_t(kB) * kB;
  // Di once per query row, filled per (b, h) by the task that reads that head's dout next, so dout
  // comes from memory once.
  Scratch di = alloc_scratch(int64_t(g.B) * g.H * g.T);
  const int64_t n_kv = int64_t(g.B) * g.Hkv;
  if (n_kv >= 2 * int64_t(omp_get_max_threads())) {
    // One task per (b, kvh): owns dq of heads [kvh*group, (kvh+1)*group) and dk, dv of kvh.
#pragma omp parallel
    {
      Scratch scratch = alloc_scratch(scratch_size);
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < n_kv; task++) {
        const int b = int(task / g.Hkv), kvh = int(task % g.Hkv);
        for (int h = kvh * g.group; h < (kvh + 1) * g.group; h++) fill_di(di.get(), dout, out, g, b, h);
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
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < int64_t(g.B) * g.H; bh++) fill_di(di.get(), dout, out, g, int(bh / g.H), int(bh % g.H));
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
                       int T, int H, int Hkv, int D, int window, const int32_t* doc_start) {
  CHECK(Hkv > 0 && H % Hkv == 0, "attention: H {} must be a multiple of Hkv {}", H, Hkv);
  if (B <= 0 || T <= 0) return;
  check_documents(doc_start, B, T);
  const Geometry g(B, T, H, Hkv, D, window < T ? window : 0, doc_start);
  forward_all(out, lse, qkv, g);
}

void attention_backward(float* dqkv /*(B,T,(H+2*Hkv)*D)*/, const float* dout /*(B,T,H*D)*/,
                        const float* qkv /*(B,T,(H+2*Hkv)*D)*/, const float* out /*(B,T,H*D)*/,
                        const float* lse /*(B,H,T)*/, int B, int T, int H, int Hkv, int D, int window,
                        const int32_t* doc_start) {
  CHECK(Hkv > 0 && H % Hkv == 0, "attention: H {} must be a multiple of Hkv {}", H, Hkv);
  if (B <= 0 || T <= 0) return;
  check_documents(doc_start, B, T);
  const Geometry g(B, T, H, Hkv, D, window < T ? window : 0, doc_start);
  backward_all(dqkv, dout, qkv, out, lse, g);
}

}  // namespace llamatrain::cpu::LLAMATRAIN_CPU_VARIANT
