// Packed documents on the CPU's attention kernel: one sequence of T tokens holding T/len documents of
// len tokens each, forward + backward, three ways side by side in one process (interleaved, the first
// of each round rotating, medians over `reps` rounds after one warmup):
//   masked:   cpu::attention_* with doc_start, the tiles wholly before a query's document skipped;
//   causal:   the same tokens without document masking, causal over all T (what packing without a
//             mask costs, and what a kernel that only masks, never skips, would cost at least);
//   separate: the documents as a batch of T/len sequences of len tokens (the floor packing can reach).
// Prints medians of wall and CPU time and the ratios causal/masked and masked/separate. The machine
// may be shared: only the ratios are meaningful. Asserts nothing.
//   cmake --build build/release --target packed_attention_bench
//   OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 build/release/packed_attention_bench [reps] [T len H Hkv D]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <random>
#include <vector>

#include "timing.h"
#include "kernels/cpu/ops.h"

using namespace llamatrain;
using bench::median;
using bench::seconds;
using bench::Seconds;

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 7;
  int T = 2048, len = 64, H = 12, Hkv = 12, D = 64;
  if (argc > 6)
    T = std::atoi(argv[2]), len = std::atoi(argv[3]), H = std::atoi(argv[4]), Hkv = std::atoi(argv[5]),
    D = std::atoi(argv[6]);
  if (T % len != 0) {
    std::fprintf(stderr, "T %d must be a multiple of the document length %d\n", T, len);
    return 2;
  }
  const int64_t W = int64_t(H + 2 * Hkv) * D, n_qkv = int64_t(T) * W, n_out = int64_t(T) * H * D;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> qkv(static_cast<size_t>(n_qkv)), dout(static_cast<size_t>(n_out));
  for (auto& x : qkv) x = u(rng);
  for (auto& x : dout) x = u(rng);
  std::vector<int32_t> doc_start(static_cast<size_t>(T));
  for (int t = 0; t < T; t++) doc_start[size_t(t)] = t / len * len;
  std::vector<float> out(static_cast<size_t>(n_out)), lse(static_cast<size_t>(T) * H), dqkv(static_cast<size_t>(n_qkv));
  // The three ways, on the same tokens: qkv rows of one sequence of T are those of T/len sequences of len.
  auto masked = [&] {
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), 1, T, H, Hkv, D, 0, doc_start.data());
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), 1, T, H, Hkv, D, 0,
                            doc_start.data());
  };
  auto causal = [&] {
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), 1, T, H, Hkv, D);
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), 1, T, H, Hkv, D);
  };
  auto separate = [&] {
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), T / len, len, H, Hkv, D);
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), T / len, len, H, Hkv, D);
  };
  const std::vector<std::pair<const char*, std::function<void()>>> ways = {
      {"masked", masked}, {"causal", causal}, {"separate", separate}};
  std::vector<std::vector<double>> wall(ways.size()), cpu(ways.size());
  for (auto& w : ways) w.second();  // warmup
  for (int r = 0; r < reps; r++)
    for (size_t k = 0; k < ways.size(); k++) {
      const size_t i = (k + size_t(r)) % ways.size();
      const Seconds s = seconds(ways[i].second);
      wall[i].push_back(s.wall);
      cpu[i].push_back(s.cpu);
    }
  std::printf("attention forward+backward, one sequence of %d tokens = %d documents of %d, H %d Hkv %d D %d, "
              "%d threads, median of %d\n",
              T, T / len, len, H, Hkv, D, omp_get_max_threads(), reps);
  for (size_t i = 0; i < ways.size(); i++)
    std::printf("  %-9s wall %8.2f ms  cpu %8.2f ms\n", ways[i].first, 1e3 * median(wall[i]), 1e3 * median(cpu[i]));
  std::printf("  causal / masked: %.1fx wall, %.1fx cpu; masked / separate: %.2fx wall, %.2fx cpu\n",
              median(wall[1]) / median(wall[0]), median(cpu[1]) / median(cpu[0]), median(wall[0]) / median(wall[2]),
              median(cpu[0]) / median(cpu[2]));
  return 0;
}
