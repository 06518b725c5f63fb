// Timing helpers of the kernel benches (attention_bench, packed_attention_bench, the CUDA benches):
// wall and process CPU seconds of one call, and the median of repeated figures.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <vector>

namespace llamatrain::bench {

// Process CPU seconds (all threads): on a shared machine wall time includes time spent descheduled,
// CPU time does not (run with OMP_WAIT_POLICY=passive so barrier spinning is not counted as work).
inline double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct Seconds {
  double wall, cpu;
};

template <typename F>
Seconds seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_seconds();
  f();
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), cpu_seconds() - c0};
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The median wall milliseconds of `iters` calls after two warmup calls, `wait()` after each (a GPU
// bench waits for the device: cuda::synchronize).
template <typename F, typename W>
double median_ms(int iters, F&& call, W&& wait) {
  for (int i = 0; i < 2; i++) call();
  wait();
  std::vector<double> ms;
  for (int i = 0; i < iters; i++) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    wait();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(std::move(ms));
}

}  // namespace llamatrain::bench
