// Checks of the parallel runtime that run on any Communicator: the same functions run on
// LocalCommunicator threads (local_communicator_test, comm_pairs_test, data_parallel_test) and on MPI
// ranks (mpi_communicator_test under mpirun). Every rank calls them with the same arguments; they use
// EXPECT (never ASSERT), so a failure on one rank never skips a collective the others wait in.
// Expected values come from a single-rank computation of the same thing: every rank's inputs are a
// pure function of (rank, index), so any rank can compute all of them. Tests only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "parallel/comm_pairs.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/layout.h"
#include "test_util.h"

namespace llamatrain::parallel::testing {

// Options of the thread-rank worlds in tests: a bug that hangs fails in a minute, not five.
inline CommOptions test_options() {
  CommOptions o;
  o.watchdog_timeout_s = 60;
  return o;
}

// A value in [-1, 1) from (seed, index): splitmix64.
inline float noise(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(z >> 40) / float(1 << 23) - 1.0f;
}

inline std::vector<float> noise_vector(uint64_t seed, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = noise(seed, i);
  return v;
}

// A small integer-valued element (exact in float and double sums over a few ranks).
inline double exact_value(int rank, size_t i) { return double((rank + 1) * int(i % 7 + 1)) + 0.5 * (rank % 2); }

template <typename T>
void check_collectives_typed(Communicator& c, const std::string& where) {
  const int P = c.size(), me = c.rank();
  for (size_t count : {size_t(0), size_t(1), size_t(17), size_t(1000)}) {
    SCOPED_TRACE(where + " count " + std::to_string(count) + (sizeof(T) == 4 ? " f32" : " f64"));
    std::vector<T> want_sum(count, 0);
    for (size_t i = 0; i < count; ++i)
      for (int r = 0; r < P; ++r) want_sum[i] += T(exact_value(r, i));

    // all_reduce and two overlapping iall_reduce, waited in reverse order
    std::vector<T> a(count), b(count), d(count);
    for (size_t i = 0; i < count; ++i) a[i] = b[i] = d[i] = T(exact_value(me, i));
    c.all_reduce(a.data(), count);
    EXPECT_EQ(a, want_sum);
    Request rb = c.iall_reduce(b.data(), count);
    Request rd = c.iall_reduce(d.data(), count);
    rd.wait();
    rb.wait();
    EXPECT_FALSE(rb.pending());
    EXPECT_EQ(b, want_sum);
    EXPECT_EQ(d, want_sum);

    // all_gather, separate buffers and in place
    std::vector<T> mine(count), gathered(count * size_t(P), T(-7)), want_gathered;
    for (size_t i = 0; i < count; ++i) mine[i] = T(exact_value(me, i));
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < count; ++i) want_gathered.push_back(T(exact_value(r, i)));
    c.all_gather(gathered.data(), mine.data(), count);
    EXPECT_EQ(gathered, want_gathered);
    std::vector<T> in_place(count * size_t(P), T(-7));
    std::copy(mine.begin(), mine.end(), in_place.begin() + ptrdiff_t(size_t(me) * count));
    c.all_gather(in_place.data(), in_place.data() + size_t(me) * count, count);
    EXPECT_EQ(in_place, want_gathered);

    // reduce_scatter: block j of rank r's input is exact_value(r, j*count + i)
    std::vector<T> blocks(count * size_t(P)), scattered(count, T(-7)), want_scattered(count, 0);
    for (size_t k = 0; k < blocks.size(); ++k) blocks[k] = T(exact_value(me, k));
    for (size_t i = 0; i < count; ++i)
      for (int r = 0; r < P; ++r) want_scattered[i] += T(exact_value(r, size_t(me) * count + i));
    c.reduce_scatter(scattered.data(), blocks.data(), count);
    EXPECT_EQ(scattered, want_scattered);
    std::vector<T> own_block(blocks);
    c.reduce_scatter(own_block.data() + size_t(me) * count, own_block.data(), count);
    EXPECT_EQ(std::vector<T>(own_block.begin() + ptrdiff_t(size_t(me) * count),
                             own_block.begin() + ptrdiff_t(size_t(me + 1) * count)),
              want_scattered);
  }
}

inline void check_collectives(Communicator& c, const std::string& where) {
  check_collectives_typed<float>(c, where);
  check_collectives_typed<double>(c, where);
  const int P = c.size(), me = c.rank();

  // broadcast of an odd number of bytes from every root
  for (int root = 0; root < P; ++root) {
    const std::string message = "from root " + std::to_string(root) + "!";
    std::string s = me == root ? message : std::string(message.size(), '?');
    c.broadcast(s.data(), s.size(), root);
    EXPECT_EQ(s, message) << where << " rank " << me;
  }
  c.barrier();

  // point to point around a ring; two tags posted in the opposite order of the sends
  if (P > 1) {
    const int next = (me + 1) % P, prev = (me + P - 1) % P;
    for (size_t bytes : {size_t(0), size_t(5), size_t(1001)}) {
      std::vector<uint8_t> out1(bytes), out2(bytes), in1(bytes, 0), in2(bytes, 0);
      for (size_t i = 0; i < bytes; ++i) {
        out1[i] = uint8_t(me * 31 + int(i));
        out2[i] = uint8_t(me * 17 + 3 * int(i));
      }
      Request r2 = c.irecv(in2.data(), bytes, prev, 2);
      Request r1 = c.irecv(in1.data(), bytes, prev, 1);
      Request s1 = c.isend(out1.data(), bytes, next, 1);
      Request s2 = c.isend(out2.data(), bytes, next, 2);
      r1.wait();
      r2.wait();
      s1.wait();
      s2.wait();
      for (size_t i = 0; i < bytes; ++i) {
        EXPECT_EQ(in1[i], uint8_t(prev * 31 + int(i))) << where << " byte " << i;
        EXPECT_EQ(in2[i], uint8_t(prev * 17 + 3 * int(i))) << where << " byte " << i;
      }
    }
  }

  // split by parity, members ordered by descending rank; rank 0 joins none
  auto sub = c.split(me == 0 ? -1 : me % 2, -me, "parity");
  EXPECT_EQ(sub == nullptr, me == 0) << where;
  if (sub) {
    std::vector<int> want;
    for (int r = P - 1; r >= 1; --r)
      if (r % 2 == me % 2) want.push_back(c.world_ranks()[size_t(r)]);
    EXPECT_EQ(sub->world_ranks(), want) << where;
    EXPECT_EQ(sub->world_rank(), c.world_rank());
    EXPECT_EQ(sub->name(), "parity");
    double sum = me;
    sub->all_reduce(&sum, 1);
    double want_sum = 0;
    for (int r = 1; r < P; ++r)
      if (r % 2 == me % 2) want_sum += r;
    EXPECT_EQ(sum, want_sum) << where;
  }
}

// Builds the layout and groups for (tp, pp) on `world` and checks every group against the layout:
// members, order, and an all-reduce over each group that sums its members' world ranks.
inline void check_parallel_groups(Communicator& world, int tp, int pp) {
  const std::string where =
      "TP" + std::to_string(tp) + " PP" + std::to_string(pp) + " on " + std::to_string(world.size()) + " ranks";
  const ParallelLayout l = ParallelLayout::make(world.size(), tp, pp, world.rank());
  ParallelGroups g = ParallelGroups::make(world, l);
  auto check = [&](Communicator* c, const std::vector<int>& members, int coordinate, const char* kind) {
    ASSERT_NE(c, nullptr) << where << " " << kind;
    EXPECT_EQ(c->world_ranks(), members) << where << " " << kind;
    if (coordinate >= 0) {
      EXPECT_EQ(c->rank(), coordinate) << where << " " << kind;
    }
    double sum = world.rank();
    c->all_reduce(&sum, 1);
    EXPECT_EQ(sum, std::accumulate(members.begin(), members.end(), 0.0)) << where << " " << kind;
  };
  check(g.tp.get(), l.tp_group(), l.tp_rank, "tp");
  check(g.pp.get(), l.pp_group(), l.pp_rank, "pp");
  check(g.dp.get(), l.dp_group(), l.dp_rank, "dp");
  check(g.mp.get(), l.mp_group(), l.pp_rank * tp + l.tp_rank, "mp");
  EXPECT_EQ(g.embedding != nullptr, !l.embedding_group().empty()) << where;
  if (g.embedding) check(g.embedding.get(), l.embedding_group(), -1, "embedding");
}

// Every (tp, pp) whose product divides the world's size.
inline void check_all_layouts(Communicator& world) {
  for (int tp = 1; tp <= world.size(); ++tp)
    for (int pp = 1; tp * pp <= world.size(); ++pp)
      if (world.size() % (tp * pp) == 0) check_parallel_groups(world, tp, pp);
}

// ---- tensor parallelism: a tiny MLP, sharded vs whole ----

// y (n, m) = A (n, k) @ B (k, m), accumulated in double, where element (i, t) of A is
// a[i * a_row + t * a_col] and element (t, j) of B is b[t * b_row + j * b_col].
inline std::vector<float> matmul_strided(const std::vector<float>& a, size_t a_row, size_t a_col,
                                         const std::vector<float>& b, size_t b_row, size_t b_col, size_t n, size_t k,
                                         size_t m) {
  std::vector<float> y(n * m);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < m; ++j) {
      double s = 0;
      for (size_t t = 0; t < k; ++t) s += double(a[i * a_row + t * a_col]) * b[t * b_row + j * b_col];
      y[i * m + j] = float(s);
    }
  return y;
}
// y (n, m) = x (n, k) @ w^T, w (m, k)
inline std::vector<float> matmul_nt(const std::vector<float>& x, const std::vector<float>& w, size_t n, size_t k,
                                    size_t m) {
  return matmul_strided(x, k, 1, w, 1, k, n, k, m);
}
// y (n, m) = x (n, k) @ w, w (k, m)
inline std::vector<float> matmul_nn(const std::vector<float>& x, const std::vector<float>& w, size_t n, size_t k,
                                    size_t m) {
  return matmul_strided(x, k, 1, w, m, 1, n, k, m);
}
// y (m, k) = a^T (m, n) @ b (n, k), a (n, m)
inline std::vector<float> matmul_tn(const std::vector<float>& a, const std::vector<float>& b, size_t n, size_t m,
                                    size_t k) {
  return matmul_strided(a, 1, m, b, k, 1, m, n, k);
}
// rows [r0, r0 + nr) of a (rows, cols) matrix
inline std::vector<float> rows_of(const std::vector<float>& a, size_t cols, size_t r0, size_t nr) {
  return std::vector<float>(a.begin() + ptrdiff_t(r0 * cols), a.begin() + ptrdiff_t((r0 + nr) * cols));
}
// columns [c0, c0 + nc) of a (rows, cols) matrix
inline std::vector<float> cols_of(const std::vector<float>& a, size_t rows, size_t cols, size_t c0, size_t nc) {
  std::vector<float> out;
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = c0; j < c0 + nc; ++j) out.push_back(a[i * cols + j]);
  return out;
}

// got == want within 2e-5 (1 + |want|) everywhere (a NaN, such as a poisoned receive buffer read, never is).
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  EXPECT_TRUE(llamatrain::testing::all_within_bound(what, got, want,
                                                    [&](size_t i) { return 2e-5 * (1.0 + std::fabs(want[i])); }));
}

// Each pair alone, forward and backward, against its definition. n_local rows per rank, c columns.
inline void check_each_pair(Communicator& tp, size_t n_local, size_t c) {
  const size_t P = size_t(tp.size()), r = size_t(tp.rank()), n = n_local * P;
  const std::string where =
      "TP" + std::to_string(P) + " n_local " + std::to_string(n_local) + " c " + std::to_string(c);
  auto of_rank = [](size_t rank, uint64_t salt, size_t count) { return noise_vector(salt * 100 + rank, count); };
  auto sum_over_ranks = [&](uint64_t salt, size_t count) {
    std::vector<float> s(count, 0.0f);
    std::vector<double> acc(count, 0.0);
    for (size_t q = 0; q < P; ++q) {
      auto v = of_rank(q, salt, count);
      for (size_t i = 0; i < count; ++i) acc[i] += v[i];
    }
    for (size_t i = 0; i < count; ++i) s[i] = float(acc[i]);
    return s;
  };
  // copy_to_tp / reduce_from_tp on (n, c), in place and not
  {
    auto x = of_rank(r, 1, n * c), y = std::vector<float>(n * c);
    copy_to_tp_forward(y.data(), x.data(), n * c, tp);
    expect_close(y, x, where + " copy_to_tp forward");
    auto dy = of_rank(r, 2, n * c);
    copy_to_tp_backward(dy.data(), dy.data(), n * c, tp);
    expect_close(dy, sum_over_ranks(2, n * c), where + " copy_to_tp backward");
    reduce_from_tp_forward(y.data(), x.data(), n * c, tp);
    expect_close(y, sum_over_ranks(1, n * c), where + " reduce_from_tp forward");
    auto dx = std::vector<float>(n * c);
    auto g = of_rank(r, 3, n * c);
    reduce_from_tp_backward(dx.data(), g.data(), n * c, tp);
    expect_close(dx, g, where + " reduce_from_tp backward");
  }
  // gather_from_tp / scatter_to_tp: rank q's (n, c) block is of_rank(q, 4); the whole is (n, P*c)
  {
    std::vector<float> whole(n * P * c);
    for (size_t q = 0; q < P; ++q) {
      auto part = of_rank(q, 4, n * c);
      for (size_t i = 0; i < n; ++i)
        std::copy_n(part.begin() + ptrdiff_t(i * c), c, whole.begin() + ptrdiff_t(i * P * c + q * c));
    }
    std::vector<float> y(n * P * c), part(n * c);
    gather_from_tp_forward(y.data(), of_rank(r, 4, n * c).data(), n, c, tp);
    expect_close(y, whole, where + " gather_from_tp forward");
    gather_from_tp_backward(part.data(), whole.data(), n, c, tp);
    expect_close(part, of_rank(r, 4, n * c), where + " gather_from_tp backward");
    scatter_to_tp_forward(part.data(), whole.data(), n, c, tp);
    expect_close(part, of_rank(r, 4, n * c), where + " scatter_to_tp forward");
    scatter_to_tp_backward(y.data(), of_rank(r, 4, n * c).data(), n, c, tp);
    expect_close(y, whole, where + " scatter_to_tp backward");
  }
  // gather_from_sp / reduce_scatter_to_sp: rank q's rows are of_rank(q, 5); partial sums of_rank(q, 6)
  {
    std::vector<float> stacked;
    for (size_t q = 0; q < P; ++q) {
      auto part = of_rank(q, 5, n_local * c);
      stacked.insert(stacked.end(), part.begin(), part.end());
    }
    std::vector<float> y(n * c), part(n_local * c);
    gather_from_sp_forward(y.data(), of_rank(r, 5, n_local * c).data(), n_local, c, tp);
    expect_close(y, stacked, where + " gather_from_sp forward");
    reduce_scatter_to_sp_backward(y.data(), of_rank(r, 5, n_local * c).data(), n_local, c, tp);
    expect_close(y, stacked, where + " reduce_scatter_to_sp backward");
    const auto total = sum_over_ranks(6, n * c);
    gather_from_sp_backward(part.data(), of_rank(r, 6, n * c).data(), n_local, c, tp);
    expect_close(part, rows_of(total, c, r * n_local, n_local), where + " gather_from_sp backward");
    reduce_scatter_to_sp_forward(part.data(), of_rank(r, 6, n * c).data(), n_local, c, tp);
    expect_close(part, rows_of(total, c, r * n_local, n_local), where + " reduce_scatter_to_sp forward");
  }
}

// A two-layer MLP y = tanh(x W1^T) W2^T on N tokens, column-parallel W1 (F/P rows each), row-parallel
// W2 (F/P columns each), with loss sum(g * y). Forward and every gradient match the unsharded MLP:
// once with TP's pairs (copy_to_tp, reduce_from_tp), once with SP's (gather_from_sp,
// reduce_scatter_to_sp), and a gathered / scattered variant (gather_from_tp, scatter_to_tp).
inline void check_tp_mlp(Communicator& tp, size_t n_local, size_t C, size_t f_local) {
  const size_t P = size_t(tp.size()), r = size_t(tp.rank()), N = n_local * P, F = f_local * P;
  const std::string where =
      "TP" + std::to_string(P) + " N " + std::to_string(N) + " C " + std::to_string(C) + " F " + std::to_string(F);
  const auto x = noise_vector(11, N * C), w1 = noise_vector(12, F * C), w2 = noise_vector(13, C * F),
             g = noise_vector(14, N * C);
  // Unsharded reference.
  const auto h = matmul_nt(x, w1, N, C, F);
  std::vector<float> a(h.size());
  for (size_t i = 0; i < h.size(); ++i) a[i] = std::tanh(h[i]);
  const auto y = matmul_nt(a, w2, N, F, C);
  const auto da = matmul_nn(g, w2, N, C, F);
  std::vector<float> dh(da.size());
  for (size_t i = 0; i < da.size(); ++i) dh[i] = da[i] * (1 - a[i] * a[i]);
  const auto dx = matmul_nn(dh, w1, N, F, C);
  const auto dw1 = matmul_tn(dh, x, N, F, C);  // (F, C)
  const auto dw2 = matmul_tn(g, a, N, C, F);   // (C, F)

  // This rank's shards: W1 rows [r*f_local, ...), W2 columns [r*f_local, ...).
  const auto w1_r = rows_of(w1, C, r * f_local, f_local);
  const auto w2_r = cols_of(w2, C, F, r * f_local, f_local);
  // The sharded MLP body on the full token set: x_full (N, C) -> partial y (N, C) and, backward from
  // the full g, partial dx (N, C), dW1_r, dW2_r.
  auto body = [&](const std::vector<float>& x_full, const std::vector<float>& g_full, std::vector<float>& y_partial,
                  std::vector<float>& dx_partial, std::vector<float>& dw1_r, std::vector<float>& dw2_r) {
    const auto h_r = matmul_nt(x_full, w1_r, N, C, f_local);
    std::vector<float> a_r(h_r.size());
    for (size_t i = 0; i < h_r.size(); ++i) a_r[i] = std::tanh(h_r[i]);
    y_partial = matmul_nt(a_r, w2_r, N, f_local, C);
    const auto da_r = matmul_nn(g_full, w2_r, N, C, f_local);
    std::vector<float> dh_r(da_r.size());
    for (size_t i = 0; i < da_r.size(); ++i) dh_r[i] = da_r[i] * (1 - a_r[i] * a_r[i]);
    dx_partial = matmul_nn(dh_r, w1_r, N, f_local, C);
    dw1_r = matmul_tn(dh_r, x_full, N, f_local, C);
    dw2_r = matmul_tn(g_full, a_r, N, C, f_local);
  };

  // Tensor parallel: every rank holds all N tokens.
  {
    std::vector<float> x_in(N * C), y_tp(N * C), g_in(N * C), dx_tp(N * C), y_partial, dx_partial, dw1_r, dw2_r;
    copy_to_tp_forward(x_in.data(), x.data(), N * C, tp);
    body(x_in, g, y_partial, dx_partial, dw1_r, dw2_r);
    reduce_from_tp_forward(y_tp.data(), y_partial.data(), N * C, tp);
    reduce_from_tp_backward(g_in.data(), g.data(), N * C, tp);
    expect_close(g_in, g, where + " TP dy");
    copy_to_tp_backward(dx_tp.data(), dx_partial.data(), N * C, tp);
    expect_close(y_tp, y, where + " TP y");
    expect_close(dx_tp, dx, where + " TP dx");
    expect_close(dw1_r, rows_of(dw1, C, r * f_local, f_local), where + " TP dW1 shard");
    expect_close(dw2_r, cols_of(dw2, C, F, r * f_local, f_local), where + " TP dW2 shard");
  }
  // Sequence parallel: rank r holds tokens [r*n_local, (r+1)*n_local) outside the MLP.
  {
    const auto x_local = rows_of(x, C, r * n_local, n_local), g_local = rows_of(g, C, r * n_local, n_local);
    std::vector<float> x_full(N * C), g_full(N * C), y_local(n_local * C), dx_local(n_local * C), y_partial, dx_partial,
        dw1_r, dw2_r;
    gather_from_sp_forward(x_full.data(), x_local.data(), n_local, C, tp);
    reduce_scatter_to_sp_backward(g_full.data(), g_local.data(), n_local, C, tp);
    body(x_full, g_full, y_partial, dx_partial, dw1_r, dw2_r);
    reduce_scatter_to_sp_forward(y_local.data(), y_partial.data(), n_local, C, tp);
    gather_from_sp_backward(dx_local.data(), dx_partial.data(), n_local, C, tp);
    expect_close(y_local, rows_of(y, C, r * n_local, n_local), where + " SP y rows");
    expect_close(dx_local, rows_of(dx, C, r * n_local, n_local), where + " SP dx rows");
    expect_close(dw1_r, rows_of(dw1, C, r * f_local, f_local), where + " SP dW1 shard");
    expect_close(dw2_r, cols_of(dw2, C, F, r * f_local, f_local), where + " SP dW2 shard");
  }
  // Gathered output and scattered input: the first layer alone with its output gathered
  // (h = x W1^T, as a vocab-parallel head would be), then the second alone fed a scattered input.
  {
    std::vector<float> x_in(N * C), h_full(N * F), dh_r(N * f_local), dx_tp(N * C);
    copy_to_tp_forward(x_in.data(), x.data(), N * C, tp);
    const auto h_r = matmul_nt(x_in, w1_r, N, C, f_local);
    gather_from_tp_forward(h_full.data(), h_r.data(), N, f_local, tp);
    expect_close(h_full, h, where + " gathered h");
    const auto gh = noise_vector(15, N * F);  // dL/dh for a loss sum(gh * h)
    gather_from_tp_backward(dh_r.data(), gh.data(), N, f_local, tp);
    copy_to_tp_backward(dx_tp.data(), matmul_nn(dh_r, w1_r, N, f_local, C).data(), N * C, tp);
    expect_close(dx_tp, matmul_nn(gh, w1, N, F, C), where + " gathered-h dx");

    std::vector<float> a_r(N * f_local), y_tp(N * C), da_full(N * F);
    scatter_to_tp_forward(a_r.data(), a.data(), N, f_local, tp);
    reduce_from_tp_forward(y_tp.data(), matmul_nt(a_r, w2_r, N, f_local, C).data(), N * C, tp);
    expect_close(y_tp, y, where + " scattered-a y");
    scatter_to_tp_backward(da_full.data(), matmul_nn(g, w2_r, N, C, f_local).data(), N, f_local, tp);
    expect_close(da_full, da, where + " scattered-a da");
  }
}

// ---- data parallelism ----

// GradReducer over `dp` with the arena filled per rank; ready() reported backward in chunks of
// `chunk`, two steps on one reducer; the result is the mean over ranks.
inline void check_grad_reducer(Communicator& dp, size_t n, size_t bucket, size_t chunk) {
  const size_t P = size_t(dp.size()), r = size_t(dp.rank());
  const std::string where = "DP" + std::to_string(P) + " n " + std::to_string(n) + " bucket " + std::to_string(bucket) +
                            " chunk " + std::to_string(chunk);
  std::vector<float> grads(n);
  GradReducer reducer(dp, grads.data(), n, bucket);
  EXPECT_EQ(reducer.bucket_count(), n == 0 ? 0 : bucket == 0 ? 1 : (n + bucket - 1) / bucket) << where;
  for (uint64_t step = 0; step < 2; ++step) {
    const auto mine = noise_vector(1000 * step + r, n);
    std::copy(mine.begin(), mine.end(), grads.begin());  // the reducer holds grads.data()
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) {
      double s = 0;
      for (size_t q = 0; q < P; ++q) s += noise(1000 * step + q, i);
      want[i] = float(s / double(P));
    }
    for (size_t end = n; end > 0;) {  // backward: the arena's tail is final first
      const size_t begin = end > chunk ? end - chunk : 0;
      reducer.ready(begin, end);
      end = begin;
    }
    reducer.finish();
    expect_close(grads, want, where + " step " + std::to_string(step));
  }
  auto once = noise_vector(7000 + r, n);
  all_reduce_gradients(dp, once.data(), n, bucket);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (size_t q = 0; q < P; ++q) s += noise(7000 + q, i);
    want[i] = float(s / double(P));
  }
  expect_close(once, want, where + " all_reduce_gradients");
}

// GradReducer with buckets cut along an explicit order of ranges (what a model's backward reports):
// the arena of n is split into `pieces` ranges, listed in a scrambled order that leaves every third
// range out; ready() is reported for the first `reported` ranges of the order only. Every element
// still ends up the mean over ranks (unlisted and unreported ones in finish()), and exactly the
// buckets whose ranges were all reported started early.
inline void check_grad_reducer_in_order(Communicator& dp, size_t n, size_t pieces, size_t bucket, size_t reported) {
  const size_t P = size_t(dp.size()), r = size_t(dp.rank());
  const std::string where = fmt::format("DP{} n {} pieces {} bucket {} reported {}", P, n, pieces, bucket, reported);
  std::vector<GradRange> ranges;
  for (size_t i = 0; i < pieces; ++i) ranges.push_back({n * i / pieces, n * (i + 1) / pieces});
  std::vector<GradRange> order;
  for (size_t k = 0; k < pieces; ++k) {
    const size_t i = (k * 7 + 3) % pieces;  // a permutation when gcd(7, pieces) = 1
    if (i % 3 != 2) order.push_back(ranges[i]);
  }
  std::vector<float> grads(n);
  GradReducer reducer(dp, grads.data(), n, bucket, order);
  for (uint64_t step = 0; step < 2; ++step) {
    const auto mine = noise_vector(300 * step + r, n);
    std::copy(mine.begin(), mine.end(), grads.begin());
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) {
      double sum = 0;
      for (size_t q = 0; q < P; ++q) sum += noise(300 * step + q, i);
      want[i] = float(sum / double(P));
    }
    // The buckets a reducer along `order` would form, and which the reported ranges complete.
    size_t complete = 0, in_bucket = 0;
    const size_t cap = bucket == 0 ? std::max<size_t>(n, 1) : bucket;
    size_t total = 0;
    for (const auto& g : order) total += g.end - g.begin;
    size_t reported_elements = 0;
    for (size_t k = 0; k < reported && k < order.size(); ++k) reported_elements += order[k].end - order[k].begin;
    for (size_t at = 0; at < total; at += in_bucket) {
      in_bucket = std::min(cap, total - at);
      if (at + in_bucket <= reported_elements) complete++;
    }
    for (size_t k = 0; k < reported && k < order.size(); ++k) reducer.ready(order[k].begin, order[k].end);
    EXPECT_EQ(reducer.started_count(), complete) << where;
    reducer.finish();
    expect_close(grads, want, where + " step " + std::to_string(step));
  }
}

// ZeRO-1 on `dp`: reduce-scatter the gradients, update this rank's shard (p -= lr * g), all-gather:
// every rank ends with the single-rank update of the whole arena.
inline void check_zero1(Communicator& dp, size_t n, size_t align) {
  const size_t P = size_t(dp.size()), r = size_t(dp.rank());
  const std::string where = "DP" + std::to_string(P) + " n " + std::to_string(n) + " align " + std::to_string(align);
  const ZeroShards shards(n, int(P), align);
  std::vector<float> grads(shards.padded_size(), 0.0f), params(shards.padded_size(), 0.0f);
  const auto g = noise_vector(500 + r, n), p0 = noise_vector(99, n);
  std::copy(g.begin(), g.end(), grads.begin());
  std::copy(p0.begin(), p0.end(), params.begin());
  reduce_scatter_gradients(dp, grads.data(), shards);
  const float lr = 0.5f;
  const ShardRange mine = shards.range(int(r));
  for (size_t i = mine.begin; i < mine.end; ++i) params[i] -= lr * grads[i];
  all_gather_parameters(dp, params.data(), shards);
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (size_t q = 0; q < P; ++q) s += noise(500 + q, i);
    want[i] = p0[i] - lr * float(s / double(P));
  }
  expect_close(std::vector<float>(params.begin(), params.begin() + ptrdiff_t(n)), want, where);
}

}  // namespace llamatrain::parallel::testing
