// Fused lm head + cross-entropy (+ backward); must match ref::matmul_forward followed by
// ref::cross_entropy_forward/backward and ref::matmul_backward, without ever holding (N,V) fp32 logits.
// Algorithm, per block of G rows (all N rows when G*V dlogits fit in 128 MiB), per chunk of R rows in it:
//   logits (R,V) = x_c @ wout^T                     oneDNN, into a chunk buffer (fp32 dlogits: straight
//                                                   into the fp32 dlogits block)
//   per row (OpenMP over rows): max, e = exp(l - max) kept in place, lse = max + log(sum e),
//   loss = lse - l[target]; backward only: dlogits = dloss * (e / sum - onehot) (0 for target < 0)
//   into the block's dlogits (G,V);
// then, once per block: dx_g (G,C) = dlogits @ wout and dwout (V,C) += dlogits^T @ x_g (K = G).
// One dwout update per block instead of one per chunk: the (V,C) fp32 dwout is streamed once per call
// at G = N, and both backward matmuls run at their full size. Evaluation (dx == nullptr) keeps only
// the chunk. bf16 compute multiplies bf16 values (x, dlogits, wout_bf16) through the kernel chosen
// for the call's shape (matmul_choice.h, one choice for all three gemms since they share dlogits):
// oneDNN's bf16 kernel on bf16 x and dlogits, or its fp32 kernel on float x and dlogits rounded to
// bf16 values and wout_bf16 widened to float, or read as is when held as bf16_in_f32 (the fp32
// layout, G for 4-byte dlogits); a bf16_in_f32 wout_bf16 is narrowed for the bf16 kernel. Softmax and
// accumulation are fp32. Each row's softmax is independent of the thread count. exp is
// kernels/cpu/fast_exp.h.
#include "kernels/cpu/lmhead_ce.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "core/cpu_caches.h"
#include "core/error.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/matmul_choice.h"
#include "kernels/cpu/ops.h"

namespace llamatrain::cpu {

namespace detail {

// R = largest multiple of 16 with R*V*4 bytes within one instance of the last-level cache (sysfs; 32
// MiB, one Zen CCD's L3, where unknown), clamped to [64, 256]: so the softmax reads the logits the gemm
// just wrote from cache. 256 rows for V = 32000 with a 32 MiB L3, 64 with an 8 MiB one. Larger R gained
// nothing measurable once the backward matmuls left the chunk loop (bench_matmul, M = 2048).
int lmhead_chunk_rows_for(int V, int64_t cache_bytes) {
  if (cache_bytes <= 0) cache_bytes = int64_t(32) << 20;
  int64_t r = cache_bytes / (4 * int64_t(std::max(V, 1)));
  r = r / 16 * 16;
  return int(std::clamp<int64_t>(r, 64, 256));
}

int lmhead_chunk_rows(int V) {
  if (lmhead_chunk_rows_override() > 0) return lmhead_chunk_rows_override();
  return lmhead_chunk_rows_for(V, last_level_cache_bytes());
}

// G = N when G*V dlogits (bf16: 2 bytes, fp32: 4) fit in 128 MiB, else the largest multiple of R that
// fits: memory stays bounded whatever B*T. N = 2048, V = 32000: bf16 one block of 2048 rows (131 MB);
// fp32 two blocks of 1024 (131 MB), measured as fast as one of 2048 (262 MB) and ~3% faster than
// blocks of 256 (bench_matmul, interleaved, 2 threads).
int lmhead_block_rows(int N, int V, ComputeType ct) {
  const int R = lmhead_chunk_rows(V);
  if (lmhead_block_rows_override() > 0) return (lmhead_block_rows_override() + R - 1) / R * R;
  const int64_t elem = ct == ComputeType::bf16 ? 2 : 4;
  const int64_t fit = (int64_t(128) << 20) / (elem * int64_t(std::max(V, 1)));
  if (N <= fit) return std::max(N, 1);
  return int(std::max<int64_t>(fit / R, 1) * R);
}

int& lmhead_chunk_rows_override() {
  static int rows = 0;
  return rows;
}

int& lmhead_block_rows_override() {
  static int rows = 0;
  return rows;
}

}  // namespace detail

namespace {

using detail::Bf16Operand;
using detail::Scratch;

std::string lmhead_shape(int N, int C, int V, bool backward, bool f32_weight = false) {
  return fmt::format("lmhead N={} C={} V={} {}{}", N, C, V, backward ? "train" : "eval",
                     f32_weight ? " w=f32exact" : "");
}

// Estimated seconds of one bf16-compute lmhead_ce_forward / lmhead_ce_backward call through kernel
// k, from probes of its gemms on row slices (detail::GemmProbe): wout converted to k's form once,
// the logits of all N rows (x converted on the way), and for training dx and dwout from synthetic
// dlogits (which do not exist before the softmax) at the block size G that k's dlogits dtype gives.
// The softmax, the same work for both kernels, is left out.
class LmheadProbe {
 public:
  LmheadProbe(const float* x, Bf16Weight wout_bf16, int N, int C, int V, bool backward)
      : x_(x), wout_bf16_(wout_bf16), N_(N), C_(C), V_(V), backward_(backward) {}

  double seconds(MatmulKernel k) {
    const int ki = k == MatmulKernel::bf16 ? 0 : 1;
    const Bf16Operand w = detail::bf16_operand(wout_bf16_);
    const auto t0 = std::chrono::steady_clock::now();
    const void* wk = detail::kernel_operand(k, w, int64_t(V_) * C_, Scratch::weight);  // (V,C)
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int R = std::min(detail::lmhead_chunk_rows(V_), N_);
    if (!logits_[ki])
      logits_[ki].emplace(detail::bf16_operand(x_), false, w, true, N_, V_, C_, false, Scratch::act0, Scratch::weight,
                          R);
    t += logits_[ki]->seconds(k, wk);
    if (!backward_) return t;

    const bool b16 = k == MatmulKernel::bf16;
    const int G = std::min(detail::lmhead_block_rows(N_, V_, b16 ? ComputeType::bf16 : ComputeType::f32), N_);
    const Bf16Operand::Form dform = b16 ? Bf16Operand::Form::bf16 : Bf16Operand::Form::f32_exact;
    if (!dx_[ki])
      dx_[ki].emplace(Bf16Operand{nullptr, dform}, false, w, false, N_, C_, V_, false, Scratch::act0, Scratch::weight,
                      G);
    t += dx_[ki]->seconds(k, wk);
    if (!dw_[ki]) {
      // x's first G rows in k's form: what the kernel hands to the dwout gemm
      if (b16) {
        x_b_.resize(size_t(G) * C_);
        bf16_from_float(x_b_.data(), x_, int64_t(G) * C_);
      } else {
        x_f_.resize(size_t(G) * C_);
        detail::round_to_bf16_values(x_f_.data(), x_, int64_t(G) * C_);
      }
      const Bf16Operand xg{b16 ? static_cast<const void*>(x_b_.data()) : x_f_.data(), dform};
      dw_[ki].emplace(Bf16Operand{nullptr, dform}, true, xg, false, V_, C_, G, true, Scratch::act0, Scratch::act1, V_);
    }
    const void* xk = b16 ? static_cast<const void*>(x_b_.data()) : x_f_.data();
    t += dw_[ki]->seconds(k, xk) * double(N_) / G;  // one dwout gemm per block
    return t;
  }

 private:
  const float* x_;
  Bf16Weight wout_bf16_;
  int N_, C_, V_;
  bool backward_;
  std::optional<detail::GemmProbe> logits_[2], dx_[2], dw_[2];  // per kernel: bf16, f32
  ArenaVector<bf16> x_b_;
  ArenaVector<float> x_f_;
};

}  // namespace

int64_t lmhead_ce_scratch_bytes(int N, int C, int V, ComputeType ct, bool float_weight) {
  const int64_t R = std::min(detail::lmhead_chunk_rows(V), std::max(N, 1));
  const int64_t G4 = std::min(detail::lmhead_block_rows(N, V, ComputeType::f32), std::max(N, 1));
  if (ct == ComputeType::f32) return 4 * G4 * V;  // the dlogits block doubles as the logits chunk
  const int64_t G2 = std::min(detail::lmhead_block_rows(N, V, ComputeType::bf16), std::max(N, 1));
  // logits chunk, bf16 dlogits and x blocks (and wout narrowed from floats)
  const int64_t bf16_kernel = 4 * R * V + 2 * G2 * V + 2 * G2 * C + (float_weight ? 2 * int64_t(V) * C : 0);
  // fp32 dlogits and x (and wout widened from bf16)
  const int64_t f32_kernel = 4 * G4 * V + 4 * G4 * C + (float_weight ? 0 : 4 * int64_t(V) * C);
  const auto k = detail::known_kernel(lmhead_shape(N, C, V, true, float_weight), N, V, C,
                                      float_weight ? MatmulKernel::f32 : MatmulKernel::bf16);
  if (!k) return std::max(bf16_kernel, f32_kernel);
  return *k == MatmulKernel::bf16 ? bf16_kernel : f32_kernel;
}

// The one pass behind lmhead_ce_forward (dx == nullptr) and lmhead_ce_backward.
static void lmhead_ce_pass(float* losses /*(N)*/, float* dx /*(N,C)*/, float* dwout /*(V,C)*/, const float* x /*(N,C)*/,
                           const float* wout /*(V,C)*/, Bf16Weight wout_bf16 /*(V,C)*/, const int32_t* targets /*(N)*/,
                           float dloss, int N, int C, int V, ComputeType ct) {
  const bool backward = dx != nullptr;
  MatmulKernel k = MatmulKernel::f32;
  if (ct == ComputeType::bf16) {
    CHECK(wout_bf16.data != nullptr, "lmhead_ce: bf16 compute needs wout_bf16");
    std::optional<LmheadProbe> probe;
    k = detail::choose_kernel(
        lmhead_shape(N, C, V, backward, !wout_bf16.is_bf16), N, V, C,
        [&](MatmulKernel kk) {
          if (!probe) probe.emplace(x, wout_bf16, N, C, V, backward);
          return probe->seconds(kk);
        },
        wout_bf16.is_bf16 ? MatmulKernel::bf16 : MatmulKernel::f32);
  }
  const bool is_bf16 = k == MatmulKernel::bf16;                           // bf16 operands
  const bool rounds = ct == ComputeType::bf16 && k == MatmulKernel::f32;  // fp32 operands holding bf16 values
  const ComputeType storage = is_bf16 ? ComputeType::bf16 : ComputeType::f32;
  const int R = std::min(detail::lmhead_chunk_rows(V), std::max(N, 1));
  const int G = backward ? std::min(detail::lmhead_block_rows(N, V, storage), std::max(N, 1)) : R;
  const int64_t elem = is_bf16 ? 2 : 4;
  const void* w = is_bf16 || rounds
                      ? detail::kernel_operand(k, detail::bf16_operand(wout_bf16), int64_t(V) * C, Scratch::weight)
                      : static_cast<const void*>(wout);
  // fp32 dlogits: the logits gemm writes straight into the dlogits block, the softmax works in place.
  float* dlog_f = !is_bf16 && backward ? detail::f32_scratch(0, int64_t(G) * V) : nullptr;  // (G,V)
  float* logits = dlog_f != nullptr ? nullptr : detail::f32_scratch(0, int64_t(R) * V);     // (R,V)
  bf16* dlog_b = is_bf16 && backward ? detail::bf16_scratch(1, int64_t(G) * V) : nullptr;   // (G,V)

  for (int g0 = 0; g0 < N; g0 += G) {
    const int rows_g = std::min(G, N - g0);
    const float* x_g = x + int64_t(g0) * C;  // (rows_g,C)
    const void* xg = ct == ComputeType::bf16
                         ? detail::kernel_operand(k, detail::bf16_operand(x_g), int64_t(rows_g) * C, Scratch::act0)
                         : x_g;
    for (int r0 = g0; r0 < g0 + rows_g; r0 += R) {
      const int rows = std::min(R, g0 + rows_g - r0);
      float* lc = dlog_f != nullptr ? dlog_f + int64_t(r0 - g0) * V : logits;  // (rows,V)
      detail::gemm(lc, static_cast<const char*>(xg) + (r0 - g0) * int64_t(C) * elem, false, w, true, rows, V, C,
                   is_bf16, false);
      // the softmax of each row, in the CPU variant's kernel; one exp per logit, and evaluation takes the
      // same steps, so its losses are bitwise the same
      detail::lmhead_ce_rows(losses, lc, dlog_b != nullptr ? dlog_b + int64_t(r0 - g0) * V : nullptr, targets, r0, rows,
                             V, dloss, backward, rounds);
    }
    if (!backward) continue;

    const void* da = is_bf16 ? static_cast<const void*>(dlog_b) : static_cast<const void*>(dlog_f);
    // dx_g (rows_g,C) = dlogits (rows_g,V) @ wout (V,C)
    detail::gemm(dx + int64_t(g0) * C, da, false, w, false, rows_g, C, V, is_bf16, false);
    // dwout (V,C) += dlogits^T (V,rows_g) @ x_g (rows_g,C)
    if (dwout != nullptr) detail::gemm(dwout, da, true, xg, false, V, C, rows_g, is_bf16, true);
  }
}

}  // namespace llamatrain::cpu

namespace llamatrain::cpu {

void lmhead_ce_forward(float* losses, const float* x, const float* wout, Bf16Weight wout_bf16, const int32_t* targets,
                       int N, int C, int V, ComputeType ct) {
  lmhead_ce_pass(losses, nullptr, nullptr, x, wout, wout_bf16, targets, 0.0f, N, C, V, ct);
}

void lmhead_ce_backward(float* losses, float* dx, float* dwout, const float* x, const float* wout, Bf16Weight wout_bf16,
                        const int32_t* targets, float dloss, int N, int C, int V, ComputeType ct) {
  CHECK(dx != nullptr, "lmhead_ce_backward without dx");
  lmhead_ce_pass(losses, dx, dwout, x, wout, wout_bf16, targets, dloss, N, C, V, ct);
}

}  // namespace llamatrain::cpu
