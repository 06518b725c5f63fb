// Causal grouped-query attention on tensor cores, in the manner of FlashAttention-2: the same inputs,
// outputs and mask as attention.cu's plain kernels (which stay as the reference and the fp32 path),
// with q, k, v, dout, the probabilities and their gradients rounded to bf16 for the tensor cores
// (mma.cuh) and every sum, the softmax statistics and the outputs in fp32.
//   forward: one block of 4 warps per (64 queries, head, sequence); each warp owns 16 query rows and
//     keeps its q fragments, its output and its row statistics in registers. Per tile of 64 keys:
//     k and v into shared memory (rounded to bf16 there), S = q k^T, the mask, an online softmax in
//     the log2 domain, P (bf16, straight from the score registers) times v. lse as the plain kernel.
//   backward, three kernels, no atomics (so a step is deterministic):
//     delta = rowsum(dout * out), with dout rounded to bf16 as the dP matmul sees it (so that each
//       row of dS sums to zero as the softmax's gradient must: with fp32 dout here and bf16 there,
//       the mismatch sums coherently into dq, and a bias gradient's error doubled);
//     dk, dv: one block per (64 keys, kv head, sequence), each warp 16 keys, over every query head
//       of the group and each tile of 32 queries that sees them: S^T = k q^T and dP^T = v dout^T
//       recomputed, P^T and dS^T = P^T (dP^T - delta) scale in registers, dv += P^T dout and
//       dk += dS^T q;
//     dq: one block per (64 queries, head, sequence), per key tile S and dP again and dq += dS k.
//   The dq kernel recomputes S and dP once more (7 matmuls of a tile in the backward where one
//   kernel with atomic dq sums would do 5): the price of a backward that sums in a fixed order.
// Where D is a multiple of 16 (every Llama shape) the wrappers round q, k, v and dout to bf16 once
// per call (with_bf16_copies), and the kernels copy those tiles as they are with cp.async, double
// buffered (TilePairs: the next tile in flight while this one is used); half the bytes of the fp32
// arrays, which every query (key) block would otherwise read and round again, tile by tile.
// Head dimensions up to 128: the kernels work on P, D rounded up to a multiple of 16 (the tensor
// cores' k), with zero columns past D. Shared rows are P + 8 bf16 long: ldmatrix's eight 16-byte rows
// then fall in distinct banks.
// Mask: key u is visible to query t iff u <= t, t - u < window (window > 0) and, with documents,
// doc_start[t] <= u (doc_start: per token, the position its document starts at in its sequence).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::ldmatrix_x4;
using detail::mma_bf16_16x8x16;
using detail::pack_bf16x2;

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kQueries = 16 * kWarps;  // per forward and dq block
constexpr int kKeys = 64;              // per tile (forward, dq) and per dkv block (16 per warp)
static_assert(kKeys == kQueries, "check_shape counts tiles of either");
constexpr int kBwdQueries = 32;  // per tile of the dkv kernel
constexpr int kMaxD = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int P>
constexpr int kStride = P + 8;  // bf16 per shared row

struct Mask {
  int T, window;
  const int32_t* doc;  // this sequence's doc_start, or nullptr

  __device__ __forceinline__ bool visible(int t, int u) const {
    return u <= t && t < T && (window <= 0 || t - u < window) && (doc == nullptr || doc[t] <= u);
  }
  // The first key query t0 sees (queries after t0 see no earlier key).
  __device__ __forceinline__ int first_key(int t0) const {
    int u = window > 0 ? max(0, t0 - window + 1) : 0;
    if (doc != nullptr) u = max(u, int(doc[t0]));
    return u;
  }
  // Whether every query of [t0, t0 + rows) sees every key of [u0, u0 + cols), all inside [0, T):
  // such a tile needs no mask.
  __device__ __forceinline__ bool all_visible(int t0, int rows, int u0, int cols) const {
    const int t1 = t0 + rows - 1, u1 = u0 + cols - 1;
    if (t1 >= T || u1 > t0) return false;
    if (window > 0 && t1 - u0 >= window) return false;
    return doc == nullptr || doc[t1] <= u0;
  }
};

// The order blocks start in. Under the causal mask a block's work varies with its tile (query tile i
// of the forward and dq kernels walks i + 1 key tiles; key tile j of the dk/dv kernel sees every query
// tile from j on), and the GPU starts blocks in the order of their index (x fastest, then y, then z)
// as slots free up. So the grid is (head, sequence, tile) with the heaviest tiles first: the last
// blocks to start are the lightest, and no long block runs on alone at the end while the rest of the
// GPU idles (longest first, as FlashAttention-3's scheduler orders its tiles). With a (tile, head,
// sequence) grid the last heads' longest blocks start last: a list-scheduling model of Llama-2-7B's
// forward at seq 4096 (2048 blocks of 1 to 64 key tiles on 132 x 2 slots) ends 16% after the ideal in
// that order and 0.3% after it in this one (bench/attention_block_order.py). blockIdx is read as it
// is (no division by the grid's sizes).
template <bool kHeaviestLast>  // query tiles: the last is the heaviest; key tiles: the first is
__device__ __forceinline__ int heaviest_first_tile() {
  return kHeaviestLast ? int(gridDim.z - 1 - blockIdx.z) : int(blockIdx.z);
}
dim3 heaviest_first_grid(int tiles, int heads, int seqs) {
  return dim3(unsigned(heads), unsigned(seqs), unsigned(tiles));
}

// ROWS x D values of a row-major fp32 matrix (row stride `stride`, rows first.. of a sequence of T)
// into shared memory as bf16 rows of P (D rounded up to a multiple of 16), zero past D and past T.
// Where D is P and the rows are 16-byte aligned (every Llama shape), each thread reads 16 bytes at a
// time, a batch of them in flight before the first is converted and stored; else 4 bytes at a time.
template <int P, int ROWS>
__device__ __forceinline__ void load_rows(uint16_t* dst, const float* src, int64_t stride, int first, int T, int D) {
  constexpr int kPieces = ROWS * P / 4;  // of 4 floats
  static_assert(kPieces % kThreads == 0, "each thread loads the same number of pieces");
  constexpr int kEach = kPieces / kThreads, kBatch = kEach < 4 ? kEach : 4;
  if (D == P && (reinterpret_cast<uintptr_t>(src) | uintptr_t(stride) * sizeof(float)) % 16 == 0) {
#pragma unroll
    for (int b0 = 0; b0 < kEach; b0 += kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; j++) {
        if (b0 + j >= kEach) break;  // (the last batch may be short: known when unrolled)
        const int c = (b0 + j) * kThreads + int(threadIdx.x), t = first + c / (P / 4);
        v[j] = t < T ? *reinterpret_cast<const float4*>(src + int64_t(t) * stride + c % (P / 4) * 4)
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int j = 0; j < kBatch; j++) {
        if (b0 + j >= kEach) break;
        const int c = (b0 + j) * kThreads + int(threadIdx.x);
        *reinterpret_cast<uint2*>(dst + c / (P / 4) * kStride<P> + c % (P / 4) * 4) =
            make_uint2(pack_bf16x2(v[j].x, v[j].y), pack_bf16x2(v[j].z, v[j].w));
      }
    }
    return;
  }
  for (int i = 2 * int(threadIdx.x); i < ROWS * P; i += 2 * kThreads) {
    const int r = i / P, d = i % P, t = first + r;
    float lo = 0.0f, hi = 0.0f;
    if (t < T) {
      const float* p = src + int64_t(t) * stride + d;
      if (d < D) lo = p[0];
      if (d + 1 < D) hi = p[1];
    }
    *reinterpret_cast<uint32_t*>(dst + r * kStride<P> + d) = pack_bf16x2(lo, hi);
  }
}

// The same from a bf16 copy of the matrix (the wrappers round q, k, v and dout once per call where D
// is P): 16 bytes (8 values) a thread at a time, copied as they are; else 2 values at a time.
template <int P, int ROWS>
__device__ __forceinline__ void load_rows(uint16_t* dst, const bf16* src, int64_t stride, int first, int T, int D) {
  constexpr int kPieces = ROWS * P / 8;  // of 8 bf16
  constexpr int kEach = (kPieces + kThreads - 1) / kThreads, kBatch = kEach < 4 ? kEach : 4;
  if (D == P && (reinterpret_cast<uintptr_t>(src) | uintptr_t(stride) * sizeof(bf16)) % 16 == 0) {
#pragma unroll
    for (int b0 = 0; b0 < kEach; b0 += kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; j++) {
        if (b0 + j >= kEach) break;
        const int c = (b0 + j) * kThreads + int(threadIdx.x), t = first + c / (P / 8);
        v[j] = c < kPieces && t < T ? *reinterpret_cast<const float4*>(src + int64_t(t) * stride + c % (P / 8) * 8)
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int j = 0; j < kBatch; j++) {
        if (b0 + j >= kEach) break;
        const int c = (b0 + j) * kThreads + int(threadIdx.x);
        if (c >= kPieces) break;
        uint16_t* d = dst + c / (P / 8) * kStride<P> + c % (P / 8) * 8;
        *reinterpret_cast<uint2*>(d) = make_uint2(__float_as_uint(v[j].x), __float_as_uint(v[j].y));
        *reinterpret_cast<uint2*>(d + 4) = make_uint2(__float_as_uint(v[j].z), __float_as_uint(v[j].w));
      }
    }
    return;
  }
  for (int i = 2 * int(threadIdx.x); i < ROWS * P; i += 2 * kThreads) {
    const int r = i / P, d = i % P, t = first + r;
    uint32_t lo = 0, hi = 0;
    if (t < T) {
      const bf16* p = src + int64_t(t) * stride + d;
      if (d < D) lo = p[0].bits;
      if (d + 1 < D) hi = p[1].bits;
    }
    *reinterpret_cast<uint32_t*>(dst + r * kStride<P> + d) = lo | (hi << 16);
  }
}

// ROWS x P values of a bf16 matrix (D == P, 16-byte aligned rows) into shared rows by cp.async, 16
// bytes a copy; rows past T zeroed with plain stores. The copies land at the caller's cp_async_wait.
template <int P, int ROWS>
__device__ __forceinline__ void load_rows_async(uint16_t* dst, const bf16* src, int64_t stride, int first, int T) {
  constexpr int kPieces = ROWS * P / 8;
  for (int c = int(threadIdx.x); c < kPieces; c += kThreads) {
    const int r = c / (P / 8), t = first + r;
    uint16_t* d = dst + r * kStride<P> + c % (P / 8) * 8;
    if (t < T) {
      detail::cp_async_16(d, src + int64_t(t) * stride + c % (P / 8) * 8);
    } else {
      *reinterpret_cast<uint2*>(d) = make_uint2(0u, 0u);
      *reinterpret_cast<uint2*>(d + 4) = make_uint2(0u, 0u);
    }
  }
}

// Where tile i of a loop comes from: two matrices (k and v, or q and dout), ROWS rows from `first`.
template <typename Src>
struct TileSource {
  const Src* a;
  int64_t a_stride;
  const Src* b;
  int64_t b_stride;
  int first;
};

// The pairs of tiles a loop walks (k and v over key tiles in the forward and dq kernels, q and dout
// over query tiles in the dk/dv kernel). From bf16 copies, two buffers: tile i + 1 is copied by
// cp.async while tile i is used (FlashAttention-2's double buffering); from fp32, one buffer, each
// tile loaded and rounded in place. Iteration i: a __syncthreads (the previous tile is read), next(),
// a __syncthreads, then a(i) and b(i) hold tile i. `where(i)` gives tile i's TileSource.
template <int P, int ROWS, typename Src>
struct TilePairs {
  static constexpr bool kAsync = std::is_same_v<Src, bf16>;
  static constexpr int kBuffers = kAsync ? 2 : 1;
  static constexpr int kTile = ROWS * kStride<P>;  // bf16 per tile
  uint16_t* buf;                                   // kBuffers x (a tile, b tile)
  int T, D, count;                                 // tiles 0 .. count - 1

  template <typename Where>
  __device__ __forceinline__ void load(const Where& where, int i, int slot) const {
    const TileSource<Src> w = where(i);
    uint16_t* a = buf + slot * 2 * kTile;
    if constexpr (kAsync) {
      load_rows_async<P, ROWS>(a, w.a, w.a_stride, w.first, T);
      load_rows_async<P, ROWS>(a + kTile, w.b, w.b_stride, w.first, T);
      detail::cp_async_commit();
    } else {
      load_rows<P, ROWS>(a, w.a, w.a_stride, w.first, T, D);
      load_rows<P, ROWS>(a + kTile, w.b, w.b_stride, w.first, T, D);
    }
  }
  // Before the loop: the first tile's copy starts.
  template <typename Where>
  __device__ __forceinline__ void start(const Where& where) const {
    if constexpr (kAsync)
      if (count > 0) load(where, 0, 0);
  }
  template <typename Where>
  __device__ __forceinline__ void next(const Where& where, int i) const {
    if constexpr (kAsync) {
      if (i + 1 < count) {
        load(where, i + 1, (i + 1) % 2);
        detail::cp_async_wait<1>();
      } else {
        detail::cp_async_wait<0>();
      }
    } else {
      load(where, i, 0);
    }
  }
  __device__ __forceinline__ const uint16_t* a(int i) const { return buf + (i % kBuffers) * 2 * kTile; }
  __device__ __forceinline__ const uint16_t* b(int i) const { return a(i) + kTile; }
};

// a: this warp's fragment of 16 shared rows (from `rows`), columns kc*16 to kc*16 + 15.
template <int P>
__device__ __forceinline__ void load_a(uint32_t a[4], const uint16_t* rows, int kc) {
  const int lane = threadIdx.x % 32;
  ldmatrix_x4(a, rows + (lane % 16) * kStride<P> + kc * 16 + (lane / 16) * 8, false);
}

// c[n] += a * (rows n*8.. of `rows`, columns kc*16..)^T: one 16-wide slice of the 16 x (8 * N)
// product of a warp's 16 rows with N*8 rows of a shared matrix (each a column of the product).
template <int P, int N>
__device__ __forceinline__ void mma_a_rows_t(float (*c)[4], const uint32_t a[4], const uint16_t* rows, int kc) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < N; n += 2) {
    uint32_t b[4];
    ldmatrix_x4(b, rows + (n * 8 + (lane / 16) * 8 + lane % 8) * kStride<P> + kc * 16 + ((lane / 8) % 2) * 8, false);
    mma_bf16_16x8x16(c[n], a, b);
    mma_bf16_16x8x16(c[n + 1], a, b + 2);
  }
}

// The whole product over D, with a's fragments in registers (one per 16 columns) ...
template <int P, int N>
__device__ __forceinline__ void mma_rows_t(float (*c)[4], const uint32_t (*a)[4], const uint16_t* rows) {
#pragma unroll
  for (int kc = 0; kc < P / 16; kc++) mma_a_rows_t<P, N>(c, a[kc], rows, kc);
}

// ... or read from 16 shared rows (from a_rows) as it goes.
template <int P, int N>
__device__ __forceinline__ void mma_shared_rows_t(float (*c)[4], const uint16_t* a_rows, const uint16_t* rows) {
#pragma unroll
  for (int kc = 0; kc < P / 16; kc++) {
    uint32_t a[4];
    load_a<P>(a, a_rows, kc);
    mma_a_rows_t<P, N>(c, a, rows, kc);
  }
}

// o[d] += p * rows: p a warp's 16 x (16 * K) probabilities in score registers (8-column blocks,
// rounded to bf16 here), rows K*16 shared rows of D.
template <int P, int K>
__device__ __forceinline__ void mma_p_rows(float (*o)[4], const float (*p)[4], const uint16_t* rows) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kc = 0; kc < K; kc++) {
    const uint32_t a[4] = {pack_bf16x2(p[2 * kc][0], p[2 * kc][1]), pack_bf16x2(p[2 * kc][2], p[2 * kc][3]),
                           pack_bf16x2(p[2 * kc + 1][0], p[2 * kc + 1][1]),
                           pack_bf16x2(p[2 * kc + 1][2], p[2 * kc + 1][3])};
#pragma unroll
    for (int db = 0; db < P / 8; db += 2) {
      uint32_t b[4];
      ldmatrix_x4(b, rows + (kc * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kStride<P> + (db + lane / 16) * 8, true);
      mma_bf16_16x8x16(o[db], a, b);
      mma_bf16_16x8x16(o[db + 1], a, b + 2);
    }
  }
}

template <int P, typename Src>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(float* out, float* lse, const Src* qkv, const int32_t* doc_start, int T, int H, int Hkv, int D,
                         int window, float scale_log2) {
  extern __shared__ float smem[];
  constexpr int S = kStride<P>;
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem);
  const int t0 = heaviest_first_tile<true>() * kQueries, h = blockIdx.x, b = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tl = lane % 4;
  const int64_t W = int64_t(H + 2 * Hkv) * D;
  const int kvh = h / (H / Hkv);
  const Src* base = qkv + int64_t(b) * T * W;
  const Mask mask{T, window, doc_start != nullptr ? doc_start + int64_t(b) * T : nullptr};
  const int last = min(T, t0 + kQueries) - 1, first = mask.first_key(t0) / kKeys * kKeys;
  const TilePairs<P, kKeys, Src> kv{sq + kQueries * S, T, D, first <= last ? (last - first) / kKeys + 1 : 0};
  const auto key_tile = [&](int i) {
    return TileSource<Src>{base + int64_t(H + kvh) * D, W, base + int64_t(H + Hkv + kvh) * D, W, first + i * kKeys};
  };
  kv.start(key_tile);  // in flight while q loads

  load_rows<P, kQueries>(sq, base + int64_t(h) * D, W, t0, T, D);
  __syncthreads();
  uint32_t qf[P / 16][4];
#pragma unroll
  for (int kc = 0; kc < P / 16; kc++) load_a<P>(qf[kc], sq + warp * 16 * S, kc);

  float o[P / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8 of the warp
  for (int it = 0; it < kv.count; it++) {
    const int u0 = first + it * kKeys;
    __syncthreads();  // the previous tile is read
    kv.next(key_tile, it);
    __syncthreads();
    const uint16_t *sk = kv.a(it), *sv = kv.b(it);
    float s[kKeys / 8][4] = {};
    mma_rows_t<P, kKeys / 8>(s, qf, sk);
    const bool full = mask.all_visible(t0, kQueries, u0, kKeys);
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int t = t0 + warp * 16 + g + 8 * i;
      float mx = m[i];
#pragma unroll
      for (int n = 0; n < kKeys / 8; n++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
          float& v = s[n][2 * i + j];
          v = full || mask.visible(t, u0 + n * 8 + 2 * tl + j) ? v * scale_log2 : -INFINITY;
          mx = fmaxf(mx, v);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float base_max = mx == -INFINITY ? 0.0f : mx;  // a row that sees nothing yet keeps p = 0
      const float corr = exp2f(m[i] - base_max);
      m[i] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeys / 8; n++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
          const float p = exp2f(s[n][2 * i + j] - base_max);
          s[n][2 * i + j] = p;
          sum += p;
        }
      l[i] = l[i] * corr + sum;
#pragma unroll
      for (int db = 0; db < P / 8; db++) {
        o[db][2 * i] *= corr;
        o[db][2 * i + 1] *= corr;
      }
    }
    mma_p_rows<P, kKeys / 16>(o, s, sv);
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    const int t = t0 + warp * 16 + g + 8 * i;
    if (t >= T) continue;
    const float inv = 1.0f / l[i];
    float* row = out + (int64_t(b) * T + t) * H * D + int64_t(h) * D;
#pragma unroll
    for (int db = 0; db < P / 8; db++)
#pragma unroll
      for (int j = 0; j < 2; j++)
        if (db * 8 + 2 * tl + j < D) row[db * 8 + 2 * tl + j] = o[db][2 * i + j] * inv;
    if (tl == 0) lse[(int64_t(b) * H + h) * T + t] = (m[i] + log2f(l[i])) * kLn2;
  }
}

// delta[b, h, t] = sum_d bf16(dout) * out over one head's row: a warp per row.
__global__ void flash_delta_kernel(float* delta, const float* dout, const float* out, int B, int T, int H, int D) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;  // (b, t, h)
  const int lane = threadIdx.x % 32;
  if (row >= int64_t(B) * T * H) return;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32)
    s += rng::bf16_bits_to_float(rng::bf16_bits_rne(dout[row * D + d])) * out[row * D + d];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const int h = int(row % H);
  const int64_t bt = row / H, b = bt / T, t = bt % T;
  if (lane == 0) delta[(b * H + h) * T + t] = s;
}

// (At head dimension 64 and below, 4 blocks a multiprocessor: 128 registers without a spill, where
// ptxas left to itself takes 156 and so fits 3.)
template <int P, typename Src>
__global__ void __launch_bounds__(kThreads, P <= 64 ? 4 : 0)
    flash_backward_dkv_kernel(float* dqkv, const Src* dout, const Src* qkv, const float* lse, const float* delta,
                              const int32_t* doc_start, int T, int H, int Hkv, int D, int window, float scale,
                              float scale_log2) {
  extern __shared__ float smem[];
  constexpr int S = kStride<P>;
  uint16_t* sk = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sv = sk + kKeys * S;
  float* slse = reinterpret_cast<float*>(sv + kKeys * S);  // (kBwdQueries), times log2(e)
  float* sdelta = slse + kBwdQueries;                      // (kBwdQueries)
  const int u0 = heaviest_first_tile<false>() * kKeys, kvh = blockIdx.x, b = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tl = lane % 4;
  const int64_t W = int64_t(H + 2 * Hkv) * D;
  const int group = H / Hkv;
  const Src* base = qkv + int64_t(b) * T * W;
  const Mask mask{T, window, doc_start != nullptr ? doc_start + int64_t(b) * T : nullptr};
  const int u_last = min(T, u0 + kKeys) - 1;
  // The query tiles that see these keys: from the first that holds u0 up to the end of the sequence,
  // the window (later queries see none) or the document (nor past it); the same for every head.
  const int t_first = u0 / kBwdQueries * kBwdQueries;
  int t_end = t_first;
  while (t_end < T && !(window > 0 && t_end - u_last >= window) && !(mask.doc != nullptr && mask.doc[t_end] > u_last))
    t_end += kBwdQueries;
  const int tiles = (t_end - t_first) / kBwdQueries;
  const TilePairs<P, kBwdQueries, Src> qd{reinterpret_cast<uint16_t*>(sdelta + kBwdQueries), T, D, group * tiles};
  const Src* dout_base = dout + int64_t(b) * T * H * D;
  const auto query_tile = [&](int i) {  // head kvh * group + i / tiles, tile i % tiles
    const int h = kvh * group + i / tiles;
    return TileSource<Src>{base + int64_t(h) * D, W, dout_base + int64_t(h) * D, int64_t(H) * D,
                           t_first + i % tiles * kBwdQueries};
  };
  qd.start(query_tile);  // in flight while k and v load

  load_rows<P, kKeys>(sk, base + int64_t(H + kvh) * D, W, u0, T, D);
  load_rows<P, kKeys>(sv, base + int64_t(H + Hkv + kvh) * D, W, u0, T, D);
  float dk[P / 8][4] = {}, dv[P / 8][4] = {};
  for (int it = 0; it < qd.count; it++) {
    const int h = kvh * group + it / tiles, t0 = t_first + it % tiles * kBwdQueries;
    __syncthreads();  // the previous tile is read (and sk, sv written, the first time)
    qd.next(query_tile, it);
    const uint16_t *sq = qd.a(it), *sdo = qd.b(it);
    for (int i = threadIdx.x; i < kBwdQueries; i += kThreads) {
      const int t = t0 + i;
      const int64_t row = (int64_t(b) * H + h) * T + t;
      slse[i] = t < T ? lse[row] * kLog2e : 0.0f;
      sdelta[i] = t < T ? delta[row] : 0.0f;
    }
    __syncthreads();
    // Rows: this warp's 16 keys; columns: the tile's queries.
    float s[kBwdQueries / 8][4] = {}, dp[kBwdQueries / 8][4] = {};
    mma_shared_rows_t<P, kBwdQueries / 8>(s, sk + warp * 16 * S, sq);
    mma_shared_rows_t<P, kBwdQueries / 8>(dp, sv + warp * 16 * S, sdo);
    const bool full = mask.all_visible(t0, kBwdQueries, u0, kKeys);
#pragma unroll
    for (int n = 0; n < kBwdQueries / 8; n++)
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const int u = u0 + warp * 16 + g + 8 * (r / 2), c = n * 8 + 2 * tl + r % 2;
        const float p = full || mask.visible(t0 + c, u) ? exp2f(s[n][r] * scale_log2 - slse[c]) : 0.0f;
        s[n][r] = p;
        dp[n][r] = p * (dp[n][r] - sdelta[c]) * scale;
      }
    mma_p_rows<P, kBwdQueries / 16>(dv, s, sdo);
    mma_p_rows<P, kBwdQueries / 16>(dk, dp, sq);
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int u = u0 + warp * 16 + g + 8 * i;
    if (u >= T) continue;
    float* row = dqkv + (int64_t(b) * T + u) * W;
#pragma unroll
    for (int db = 0; db < P / 8; db++)
#pragma unroll
      for (int j = 0; j < 2; j++) {
        const int d = db * 8 + 2 * tl + j;
        if (d >= D) continue;
        row[int64_t(H + kvh) * D + d] = dk[db][2 * i + j];
        row[int64_t(H + Hkv + kvh) * D + d] = dv[db][2 * i + j];
      }
  }
}

template <int P, typename Src>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dq_kernel(float* dqkv, const Src* dout, const Src* qkv, const float* lse, const float* delta,
                             const int32_t* doc_start, int T, int H, int Hkv, int D, int window, float scale,
                             float scale_log2) {
  extern __shared__ float smem[];
  constexpr int S = kStride<P>;
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sdo = sq + kQueries * S;
  const int t0 = heaviest_first_tile<true>() * kQueries, h = blockIdx.x, b = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tl = lane % 4;
  const int64_t W = int64_t(H + 2 * Hkv) * D;
  const int kvh = h / (H / Hkv);
  const Src* base = qkv + int64_t(b) * T * W;
  const Mask mask{T, window, doc_start != nullptr ? doc_start + int64_t(b) * T : nullptr};
  const int last = min(T, t0 + kQueries) - 1, first = mask.first_key(t0) / kKeys * kKeys;
  const TilePairs<P, kKeys, Src> kv{sdo + kQueries * S, T, D, first <= last ? (last - first) / kKeys + 1 : 0};
  const auto key_tile = [&](int i) {
    return TileSource<Src>{base + int64_t(H + kvh) * D, W, base + int64_t(H + Hkv + kvh) * D, W, first + i * kKeys};
  };
  kv.start(key_tile);  // in flight while q and dout load

  load_rows<P, kQueries>(sq, base + int64_t(h) * D, W, t0, T, D);
  load_rows<P, kQueries>(sdo, dout + int64_t(b) * T * H * D + int64_t(h) * D, int64_t(H) * D, t0, T, D);
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int t = t0 + warp * 16 + g + 8 * i;
    const int64_t row = (int64_t(b) * H + h) * T + t;
    row_lse[i] = t < T ? lse[row] * kLog2e : 0.0f;
    row_delta[i] = t < T ? delta[row] : 0.0f;
  }
  float dq[P / 8][4] = {};
  for (int it = 0; it < kv.count; it++) {
    const int u0 = first + it * kKeys;
    __syncthreads();  // the previous tile is read (and sq, sdo written, the first time)
    kv.next(key_tile, it);
    __syncthreads();
    const uint16_t *sk = kv.a(it), *sv = kv.b(it);
    float s[kKeys / 8][4] = {}, dp[kKeys / 8][4] = {};
    mma_shared_rows_t<P, kKeys / 8>(s, sq + warp * 16 * S, sk);
    mma_shared_rows_t<P, kKeys / 8>(dp, sdo + warp * 16 * S, sv);
    const bool full = mask.all_visible(t0, kQueries, u0, kKeys);
#pragma unroll
    for (int n = 0; n < kKeys / 8; n++)
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const int i = r / 2, t = t0 + warp * 16 + g + 8 * i, u = u0 + n * 8 + 2 * tl + r % 2;
        const float p = full || mask.visible(t, u) ? exp2f(s[n][r] * scale_log2 - row_lse[i]) : 0.0f;
        dp[n][r] = p * (dp[n][r] - row_delta[i]) * scale;
      }
    mma_p_rows<P, kKeys / 16>(dq, dp, sk);
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int t = t0 + warp * 16 + g + 8 * i;
    if (t >= T) continue;
    float* row = dqkv + (int64_t(b) * T + t) * W + int64_t(h) * D;
#pragma unroll
    for (int db = 0; db < P / 8; db++)
#pragma unroll
      for (int j = 0; j < 2; j++)
        if (db * 8 + 2 * tl + j < D) row[db * 8 + 2 * tl + j] = dq[db][2 * i + j];
  }
}

template <int P, typename Src>
constexpr size_t forward_shared() {
  return size_t(kQueries + 2 * TilePairs<P, kKeys, Src>::kBuffers * kKeys) * kStride<P> * 2;
}
template <int P, typename Src>
constexpr size_t dkv_shared() {
  return size_t(2 * kKeys + 2 * TilePairs<P, kBwdQueries, Src>::kBuffers * kBwdQueries) * kStride<P> * 2 +
         2 * kBwdQueries * sizeof(float);
}
template <int P, typename Src>
constexpr size_t dq_shared() {
  return size_t(2 * kQueries + 2 * TilePairs<P, kKeys, Src>::kBuffers * kKeys) * kStride<P> * 2;
}

// Kernels above 48 KiB of dynamic shared memory must ask for it once per kernel.
template <typename K>
void allow_shared(K kernel, size_t bytes) {
  if (bytes > size_t(48) << 10)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// q, k, v (and dout) as bf16 for the kernels: where D is P, rounded once per call into scratch (the
// matmul operand slots, free between matmuls; at most N x the widest row), so each tile is half the
// bytes and copied as it is (the values the fp32 path rounds tile by tile: the same bits); else the
// fp32 arrays, rounded as each tile is loaded.
template <int P, typename F>
void with_bf16_copies(const float* qkv, int64_t n_qkv, const float* dout, int64_t n_dout, int D, F&& launch) {
  if (D != P) return launch(qkv, dout);
  auto* q16 = static_cast<bf16*>(detail::scratch(detail::kScratchInpBf16, size_t(n_qkv) * sizeof(bf16)));
  cuda::bf16_from_float(q16, qkv, n_qkv);
  bf16* d16 = nullptr;
  if (dout != nullptr) {
    d16 = static_cast<bf16*>(detail::scratch(detail::kScratchDoutBf16, size_t(n_dout) * sizeof(bf16)));
    cuda::bf16_from_float(d16, dout, n_dout);
  }
  launch(static_cast<const bf16*>(q16), static_cast<const bf16*>(d16));
}

template <int P>
void forward(float* out, float* lse, const float* qkv, const int32_t* doc_start, int B, int T, int H, int Hkv, int D,
             int window, float scale) {
  static const bool ready = (allow_shared(flash_forward_kernel<P, float>, forward_shared<P, float>()),
                             allow_shared(flash_forward_kernel<P, bf16>, forward_shared<P, bf16>()), true);
  (void)ready;
  const dim3 grid = heaviest_first_grid((T + kQueries - 1) / kQueries, H, B);
  const int64_t n_qkv = int64_t(B) * T * (H + 2 * Hkv) * D;
  with_bf16_copies<P>(qkv, n_qkv, nullptr, 0, D, [&](const auto* q, const auto*) {
    using Src = std::remove_cv_t<std::remove_pointer_t<decltype(q)>>;
    flash_forward_kernel<P, Src><<<grid, kThreads, forward_shared<P, Src>(), cuda_stream()>>>(
        out, lse, q, doc_start, T, H, Hkv, D, window, scale * kLog2e);
    CUDA_CHECK_LAUNCH("flash_forward_kernel");
  });
}

template <int P>
void backward(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta,
              const int32_t* doc_start, int B, int T, int H, int Hkv, int D, int window, float scale) {
  static const bool ready = (allow_shared(flash_backward_dkv_kernel<P, float>, dkv_shared<P, float>()),
                             allow_shared(flash_backward_dq_kernel<P, float>, dq_shared<P, float>()),
                             allow_shared(flash_backward_dkv_kernel<P, bf16>, dkv_shared<P, bf16>()),
                             allow_shared(flash_backward_dq_kernel<P, bf16>, dq_shared<P, bf16>()), true);
  (void)ready;
  const int64_t n_qkv = int64_t(B) * T * (H + 2 * Hkv) * D, n_dout = int64_t(B) * T * H * D;
  with_bf16_copies<P>(qkv, n_qkv, dout, n_dout, D, [&](const auto* q, const auto* d) {
    using Src = std::remove_cv_t<std::remove_pointer_t<decltype(q)>>;
    flash_backward_dkv_kernel<P, Src>
        <<<heaviest_first_grid((T + kKeys - 1) / kKeys, Hkv, B), kThreads, dkv_shared<P, Src>(), cuda_stream()>>>(
            dqkv, d, q, lse, delta, doc_start, T, H, Hkv, D, window, scale, scale * kLog2e);
    CUDA_CHECK_LAUNCH("flash_backward_dkv_kernel");
    flash_backward_dq_kernel<P, Src>
        <<<heaviest_first_grid((T + kQueries - 1) / kQueries, H, B), kThreads, dq_shared<P, Src>(), cuda_stream()>>>(
            dqkv, d, q, lse, delta, doc_start, T, H, Hkv, D, window, scale, scale * kLog2e);
    CUDA_CHECK_LAUNCH("flash_backward_dq_kernel");
  });
}

// Calls f.template operator()<P>() with P the head dimension D rounded up to a multiple of 16 (the
// tensor cores' k): the columns past D are zero in shared memory and never written back.
template <typename F>
void with_head_dim(const char* op, int D, F&& f) {
  switch (D > 0 ? (D + 15) / 16 * 16 : 0) {
    case 16: return f.template operator()<16>();
    case 32: return f.template operator()<32>();
    case 48: return f.template operator()<48>();
    case 64: return f.template operator()<64>();
    case 80: return f.template operator()<80>();
    case 96: return f.template operator()<96>();
    case 112: return f.template operator()<112>();
    case 128: return f.template operator()<128>();
  }
  detail::raise_error(std::string("cuda::") + op + ": head dimension " + std::to_string(D) +
                      " not supported by the tensor-core attention (at most " + std::to_string(kMaxD) +
                      "); the plain kernel (cuda::attention_forward) takes it");
}

void check_shape(const char* op, int B, int T, int H, int Hkv) {
  const int64_t tiles = (int64_t(T) + kKeys - 1) / kKeys;  // (kQueries == kKeys)
  if (Hkv > 0 && H % Hkv == 0 && B <= 65535 && tiles <= 65535) return;
  detail::raise_error(std::string("cuda::") + op + ": unsupported shape B=" + std::to_string(B) +
                      " T=" + std::to_string(T) + " H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv) +
                      ", expected H a multiple of Hkv, B <= 65535 and T <= 65535 x 64");
}

}  // namespace

bool flash_attention_supports(int D) { return D > 0 && D <= kMaxD; }

void flash_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int H, int Hkv, int D, int window,
                             const int32_t* doc_start) {
  if (B <= 0 || T <= 0 || H <= 0) return;
  check_shape("flash_attention_forward", B, T, H, Hkv);
  const float scale = float(1.0 / std::sqrt(double(D)));
  with_head_dim("flash_attention_forward", D,
                [&]<int kP>() { forward<kP>(out, lse, qkv, doc_start, B, T, H, Hkv, D, window, scale); });
}

void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                              int B, int T, int H, int Hkv, int D, int window, const int32_t* doc_start) {
  if (B <= 0 || T <= 0 || H <= 0) return;
  check_shape("flash_attention_backward", B, T, H, Hkv);
  const float scale = float(1.0 / std::sqrt(double(D)));
  auto* delta = static_cast<float*>(detail::scratch(detail::kScratchAttention, size_t(B) * H * T * sizeof(float)));
  const int64_t rows = int64_t(B) * T * H;
  flash_delta_kernel<<<unsigned((rows + kWarps - 1) / kWarps), kThreads, 0, cuda_stream()>>>(delta, dout, out, B, T, H,
                                                                                             D);
  CUDA_CHECK_LAUNCH("flash_delta_kernel");
  with_head_dim("flash_attention_backward", D, [&]<int kP>() {
    backward<kP>(dqkv, dout, qkv, lse, delta, doc_start, B, T, H, Hkv, D, window, scale);
  });
}

}  // namespace llamatrain::cuda
