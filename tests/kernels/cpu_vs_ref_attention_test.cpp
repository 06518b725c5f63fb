// cpu::attention_forward / attention_backward against ref:: on awkward sizes (T not a multiple of
// the 64-row tile, D with and without a compiled-in specialization, MHA and GQA groups of 2..6),
// and bitwise equality across 1, 2, 3, 4 and 7 OpenMP threads on shapes chosen so that the
// backward's one-pass and two-pass schedules both occur among the runs compared; then sliding
// windows (shorter than a tile, a tile's width and around it, several tiles) on the same kinds of
// shapes, and the windowed decode step against the reference; then packed documents (attention stops
// at each document's start: one-token documents, documents inside a tile, across tiles, aligned with
// them, longer than several), alone and with a window, and their thread-count invariance.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using testing::all_within_bound;
using testing::bitwise_equal;
using testing::mt19937_uniform;

struct Shape {
  int B, T, H, Hkv, D;
  int window = 0;
  std::vector<int> doc_lengths = {};  // packed documents: lengths repeated along each sequence (rotated per b)
  int64_t qkv_size() const { return int64_t(B) * T * (H + 2 * Hkv) * D; }
  int64_t out_size() const { return int64_t(B) * T * H * D; }
  int64_t lse_size() const { return int64_t(B) * H * T; }
  std::string name() const {
    return fmt::format("B={} T={} H={} Hkv={} D={} window={} docs=[{}]", B, T, H, Hkv, D, window,
                       fmt::join(doc_lengths, ","));
  }
};

// doc_start (B,T) of s's packed documents: sequence b holds documents of lengths doc_lengths[(b + k)
// % size] for k = 0, 1, ..., the last one cut at T. Empty without documents.
std::vector<int32_t> doc_starts(const Shape& s) {
  std::vector<int32_t> starts;
  if (s.doc_lengths.empty()) return starts;
  const size_t n = s.doc_lengths.size();
  for (int b = 0; b < s.B; b++) {
    int start = 0, end = s.doc_lengths[size_t(b) % n];
    for (int t = 0, k = b; t < s.T; t++) {
      if (t == end) start = end, end += s.doc_lengths[size_t(++k) % n];
      starts.push_back(start);
    }
  }
  return starts;
}

// Largest err / (|want| + max|want|) seen per tensor name, printed at the end of a test.
std::map<std::string, double>& worst_seen() {
  static std::map<std::string, double> m;
  return m;
}

// |got - want| <= tol * (|want| + max|want|) everywhere; the first mismatches printed.
// The max|want| term is the "-ish" in relative-ish: gradients are differences of O(1) terms
// (dS = P (dP - Di)), so an entry near 0 carries the absolute error of its largest neighbours.
::testing::AssertionResult close_relative_ish(const char* what, const std::vector<float>& got,
                                              const std::vector<float>& want, double tol, const std::string& shape) {
  double max_abs = 0.0;
  for (float w : want) max_abs = std::max(max_abs, double(std::abs(w)));
  double worst = 0.0;  // largest err / bound
  auto result = all_within_bound(
      shape + " " + what, got, want, [&](size_t i) { return tol * (std::abs(double(want[i])) + max_abs); }, &worst);
  double& w = worst_seen()[what];
  w = std::max(w, worst * tol);
  return result;
}

// fp32 with u = 6e-8: each output sums at most T*H/Hkv = 1200 products in fp32, whose error grows
// like sqrt(n) u ~ 2e-6 for random signs, plus ~2 ulp from the polynomial exp; 1e-5 leaves a margin
// of ~5x over the worst error seen and is far below a wrong mask, scale or group mapping (O(1e-2+)).
constexpr double kTol = 1e-5;

void check_shape(const Shape& s) {
  const auto starts = doc_starts(s);
  const int32_t* docs = starts.empty() ? nullptr : starts.data();
  const auto qkv = mt19937_uniform(size_t(s.qkv_size()), 11, -2.0f, 2.0f);
  const auto dout = mt19937_uniform(size_t(s.out_size()), 12, -1.0f, 1.0f);
  std::vector<float> out_r(s.out_size()), lse_r(s.lse_size()), dqkv_r(s.qkv_size());
  ref::attention_forward(out_r.data(), lse_r.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window, docs);
  ref::attention_backward(dqkv_r.data(), dout.data(), qkv.data(), out_r.data(), lse_r.data(), s.B, s.T, s.H, s.Hkv, s.D,
                          s.window, docs);
  std::vector<float> out_c(s.out_size(), NAN), lse_c(s.lse_size(), NAN), dqkv_c(s.qkv_size(), NAN);
  cpu::attention_forward(out_c.data(), lse_c.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window, docs);
  EXPECT_TRUE(close_relative_ish("out", out_c, out_r, kTol, s.name()));
  EXPECT_TRUE(close_relative_ish("lse", lse_c, lse_r, kTol, s.name()));
  // Backward from cpu's own saved out and lse, as the model will call it.
  cpu::attention_backward(dqkv_c.data(), dout.data(), qkv.data(), out_c.data(), lse_c.data(), s.B, s.T, s.H, s.Hkv, s.D,
                          s.window, docs);
  EXPECT_TRUE(close_relative_ish("dqkv", dqkv_c, dqkv_r, kTol, s.name()));
}

TEST(CpuVsRefAttention, AwkwardSizes) {
  const int Ts[] = {1, 17, 127, 200};
  const int Ds[] = {8, 16, 64};
  const int heads[][2] = {{4, 4}, {8, 2}, {6, 1}, {5, 5}};
  for (int B : {1, 3})
    for (int T : Ts)
      for (int D : Ds)
        for (const auto& hh : heads) {
          const Shape s{B, T, hh[0], hh[1], D};
          SCOPED_TRACE(s.name());
          check_shape(s);
        }
  for (const auto& [what, w] : worst_seen())
    std::printf("worst scaled error of %s: %.3g (tolerance %.0e)\n", what.c_str(), w, kTol);
}

TEST(CpuVsRefAttention, SlidingWindow) {
  // Windows within a tile (1, 5), at and around its width (63, 64, 65), over several tiles (130),
  // and as long as the sequence (no change): the tiles wholly before a window are skipped, those it
  // cuts masked, and a query row may see no key of the first tile its query tile processes.
  const int windows[] = {1, 5, 63, 64, 65, 130};
  const int Ts[] = {17, 127, 200, 300};
  const int heads[][2] = {{4, 4}, {8, 2}, {6, 1}};
  for (int window : windows)
    for (int T : Ts)
      for (const auto& hh : heads) {
        if (T == 300 && hh[1] != 2) continue;  // the longest sequence once per window (the reference is slow)
        const Shape s{T == 127 ? 3 : 1, T, hh[0], hh[1], window % 2 ? 16 : 64, window};
        SCOPED_TRACE(s.name());
        check_shape(s);
      }
  check_shape(Shape{2, 40, 4, 2, 16, 40});
  check_shape(Shape{2, 40, 4, 2, 16, 1000});
}

TEST(CpuVsRefAttention, SlidingWindowDecode) {
  // The decode step over the cache sees positions pos - window + 1..pos, as attention_forward's row pos.
  for (const auto& [pos, H, Hkv, D, window] : std::vector<std::tuple<int, int, int, int, int>>{
           {0, 2, 1, 16, 3}, {9, 4, 2, 16, 3}, {40, 8, 2, 64, 17}, {40, 4, 4, 8, 41}, {40, 4, 4, 8, 1}}) {
    SCOPED_TRACE(fmt::format("pos={} H={} Hkv={} D={} window={}", pos, H, Hkv, D, window));
    const int T = pos + 1;
    const int64_t W = int64_t(H + 2 * Hkv) * D, KV = 2 * int64_t(Hkv) * D;
    const auto qkv = mt19937_uniform(size_t(T) * W, 31, -2.0f, 2.0f);
    std::vector<float> out(size_t(T) * H * D), lse(size_t(H) * T);
    ref::attention_forward(out.data(), lse.data(), qkv.data(), 1, T, H, Hkv, D, window);
    std::vector<float> cache(size_t(T) * KV);
    for (int t = 0; t < T; t++)
      std::copy(qkv.begin() + t * W + int64_t(H) * D, qkv.begin() + (t + 1) * W, cache.begin() + t * KV);
    const std::vector<float> q(qkv.begin() + pos * W, qkv.begin() + pos * W + int64_t(H) * D);
    const std::vector<float> want(out.begin() + int64_t(pos) * H * D, out.end());
    std::vector<float> scores(size_t(H) * T), got_ref(size_t(H) * D, NAN), got_cpu(size_t(H) * D, NAN);
    ref::attention_decode(got_ref.data(), scores.data(), q.data(), cache.data(), pos, H, Hkv, D, window);
    cpu::attention_decode(got_cpu.data(), scores.data(), q.data(), cache.data(), pos, H, Hkv, D, window);
    EXPECT_TRUE(close_relative_ish("decode ref", got_ref, want, kTol, "decode"));
    EXPECT_TRUE(close_relative_ish("decode cpu", got_cpu, want, kTol, "decode"));
  }
}

TEST(CpuVsRefAttention, HeadDim128) {
  check_shape(Shape{1, 130, 8, 2, 128});
  check_shape(Shape{2, 65, 2, 2, 128});
}

// Every value is summed in a fixed order and the backward's two schedules share one routine per tile
// pair, so neither the thread count nor the schedule it selects may change a single bit. The backward
// runs one pass when B*Hkv >= 2*threads (attention.cpp) and two otherwise; each shape below crosses
// that switch between 1 and 7 threads (n_kv = B*Hkv of 2..9), with T not a multiple of 64, GQA groups
// 1, 2, 4, D 8, 16, 64, 128 and B 1, 3. Threads beyond the 2 cores are fine: only bits are compared.
TEST(CpuVsRefAttention, ThreadCountIsBitwiseInvariant) {
  const int saved = omp_get_max_threads();
  const int thread_counts[] = {1, 2, 3, 4, 7};
  const Shape shapes[] = {
      {1, 300, 4, 2, 8},                          // n_kv 2: one pass at 1 thread only
      {1, 130, 4, 4, 16},                         // n_kv 4: one pass at 1, 2
      {3, 127, 8, 2, 64},                         // n_kv 6: one pass at 1..3; group 4
      {3, 77, 6, 3, 8},                           // n_kv 9: one pass at 1..4
      {1, 100, 8, 2, 128},                        // n_kv 2, group 4, D 128
      {3, 33, 3, 3, 128},                         // n_kv 9, MHA, a single partial tile
      {3, 191, 4, 1, 16},                         // n_kv 3, group 4
      {1, 300, 4, 2, 8, 70},                      // windows: n_kv 2, several skipped and cut tiles
      {3, 127, 8, 2, 64, 5},                      // n_kv 6, a window inside every diagonal tile
      {3, 200, 6, 3, 16, 64},                     // n_kv 9, a window of one tile's width
      {1, 300, 4, 2, 8, 0, {1, 70, 5, 64, 100}},  // documents: n_kv 2, skipped and cut tiles
      {3, 127, 8, 2, 64, 0, {20, 44, 3}},         // n_kv 6, boundaries inside every tile
      {3, 200, 6, 3, 16, 50, {130, 7, 64}},       // n_kv 9, documents and a window
  };
  for (const Shape& s : shapes) {
    SCOPED_TRACE(s.name());
    const auto qkv = mt19937_uniform(size_t(s.qkv_size()), 21, -2.0f, 2.0f);
    const auto dout = mt19937_uniform(size_t(s.out_size()), 22, -1.0f, 1.0f);
    const auto starts = doc_starts(s);
    const int32_t* docs = starts.empty() ? nullptr : starts.data();
    std::vector<float> out_first, lse_first, dqkv_first;
    bool saw_one_pass = false, saw_two_pass = false;
    for (int threads : thread_counts) {
      const bool one_pass = s.B * s.Hkv >= 2 * threads;
      SCOPED_TRACE(fmt::format("{} threads ({} backward)", threads, one_pass ? "one-pass" : "two-pass"));
      (one_pass ? saw_one_pass : saw_two_pass) = true;
      omp_set_num_threads(threads);
      std::vector<float> out(s.out_size(), NAN), lse(s.lse_size(), NAN), dqkv(s.qkv_size(), NAN);
      cpu::attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window, docs);
      cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.H, s.Hkv, s.D,
                              s.window, docs);
      if (threads == thread_counts[0]) {  // the run the others are compared with must itself be right
        std::vector<float> out_r(s.out_size()), lse_r(s.lse_size()), dqkv_r(s.qkv_size());
        ref::attention_forward(out_r.data(), lse_r.data(), qkv.data(), s.B, s.T, s.H, s.Hkv, s.D, s.window, docs);
        ref::attention_backward(dqkv_r.data(), dout.data(), qkv.data(), out_r.data(), lse_r.data(), s.B, s.T, s.H,
                                s.Hkv, s.D, s.window, docs);
        EXPECT_TRUE(close_relative_ish("dqkv", dqkv, dqkv_r, kTol, s.name()));
        out_first = out;
        lse_first = lse;
        dqkv_first = dqkv;
        continue;
      }
      const std::string against = fmt::format(" (want: with {} thread)", thread_counts[0]);
      EXPECT_TRUE(bitwise_equal("out" + against, out, out_first));
      EXPECT_TRUE(bitwise_equal("lse" + against, lse, lse_first));
      EXPECT_TRUE(bitwise_equal("dqkv" + against, dqkv, dqkv_first));
    }
    EXPECT_TRUE(saw_one_pass && saw_two_pass) << "the shape must put the schedule switch between 1 and 7 threads";
  }
  omp_set_num_threads(saved);
}

TEST(CpuVsRefAttention, PackedDocuments) {
  // Documents of one token, inside a tile, crossing tile boundaries, aligned with them (64, 128) and
  // longer than several; with GQA and MHA, head dims with and without a specialization, alone and
  // with a sliding window shorter and longer than the documents.
  const std::vector<std::vector<int>> patterns = {{1}, {1, 2, 3}, {17, 40, 9}, {64}, {64, 128, 1}, {100, 30, 200}};
  const int heads[][2] = {{4, 4}, {8, 2}, {6, 1}};
  for (const auto& docs : patterns)
    for (int T : {127, 300})
      for (const auto& hh : heads) {
        if (T == 300 && hh[1] != 2) continue;  // the reference is slow
        for (int window : {0, 50}) {
          if (window && hh[1] == 4) continue;
          const Shape s{T == 127 ? 3 : 1, T, hh[0], hh[1], hh[1] == 1 ? 16 : 64, window, docs};
          SCOPED_TRACE(s.name());
          check_shape(s);
        }
      }
}

TEST(CpuVsRefAttention, PackedDocumentsMatchSeparateSequences) {
  // A sequence of documents gives each document what it gives on its own (positions are not the
  // kernel's business: q and k arrive rotated), and the gradients of separate runs.
  const int H = 4, Hkv = 2, D = 16, W = (H + 2 * Hkv) * D;
  const std::vector<int> lengths = {5, 70, 1, 64, 33};
  int T = 0;
  for (int n : lengths) T += n;
  const Shape s{1, T, H, Hkv, D, 0, lengths};
  const auto starts = doc_starts(s);
  const auto qkv = mt19937_uniform(size_t(s.qkv_size()), 31, -2.0f, 2.0f);
  const auto dout = mt19937_uniform(size_t(s.out_size()), 32, -1.0f, 1.0f);
  std::vector<float> out(s.out_size()), lse(s.lse_size()), dqkv(s.qkv_size());
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), 1, T, H, Hkv, D, 0, starts.data());
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), 1, T, H, Hkv, D, 0,
                          starts.data());
  int at = 0;
  for (int n : lengths) {
    SCOPED_TRACE(fmt::format("document at {} of {} tokens", at, n));
    const std::vector<float> q1(qkv.begin() + int64_t(at) * W, qkv.begin() + int64_t(at + n) * W);
    const std::vector<float> d1(dout.begin() + int64_t(at) * H * D, dout.begin() + int64_t(at + n) * H * D);
    std::vector<float> o1(size_t(n) * H * D), l1(size_t(n) * H), g1(size_t(n) * W);
    cpu::attention_forward(o1.data(), l1.data(), q1.data(), 1, n, H, Hkv, D);
    cpu::attention_backward(g1.data(), d1.data(), q1.data(), o1.data(), l1.data(), 1, n, H, Hkv, D);
    const std::vector<float> o_packed(out.begin() + int64_t(at) * H * D, out.begin() + int64_t(at + n) * H * D);
    const std::vector<float> g_packed(dqkv.begin() + int64_t(at) * W, dqkv.begin() + int64_t(at + n) * W);
    std::vector<float> l_packed;
    for (int h = 0; h < H; h++)
      for (int t = 0; t < n; t++) l_packed.push_back(lse[size_t(h) * T + size_t(at + t)]);
    std::vector<float> l1_ordered;  // (H, n)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < n; t++) l1_ordered.push_back(l1[size_t(h) * n + size_t(t)]);
    EXPECT_TRUE(close_relative_ish("out", o_packed, o1, kTol, s.name()));
    EXPECT_TRUE(close_relative_ish("lse", l_packed, l1_ordered, kTol, s.name()));
    EXPECT_TRUE(close_relative_ish("dqkv", g_packed, g1, kTol, s.name()));
    at += n;
  }
}

}  // namespace
}  // namespace llamatrain
