// Micro-benchmarks of the cpu:: kernels that are not matmuls or attention (those have
// matmul_shapes.cpp and attention_bench.cpp), on Google Benchmark: one benchmark per op and
// direction at a layer of stories110m (C 768, F 2048, H 12 x D 64) with N = B*T = 2048 tokens, and
// the model's optimizer and lm-head-adjacent ops at its 110M parameters or vocabulary of 32000. Each
// reports the bytes it must move (bytes_per_second), since these kernels are memory bound: compare
// that with the machine's memory bandwidth, and one build with another side by side. Figures, not
// tests. Run: build/release/elementwise_bench [--benchmark_filter=rmsnorm] [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/bf16.h"
#include "core/rng.h"
#include "kernels/cpu/ops.h"

namespace llamatrain {
namespace {

constexpr int kN = 2048, kC = 768, kF = 2048, kH = 12, kD = 64, kV = 32000;
constexpr int64_t kParams = 110 << 20;

std::vector<float> values(size_t n, uint32_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = random_normal(5, stream, i);
  return v;
}

std::vector<int32_t> positions() {
  std::vector<int32_t> pos(kN);
  for (int n = 0; n < kN; n++) pos[size_t(n)] = n % 256;
  return pos;
}

std::vector<int32_t> tokens(int V) {
  std::vector<int32_t> t(kN);
  for (int n = 0; n < kN; n++) t[size_t(n)] = int32_t(random_u32(5, 0, 9, uint64_t(n)) % uint32_t(V));
  return t;
}

void bytes(benchmark::State& state, int64_t per_call) {
  state.SetBytesProcessed(int64_t(state.iterations()) * per_call);
}

template <typename T>
void rmsnorm_forward(benchmark::State& state) {
  const auto x = values(size_t(kN) * kC, 1), w = values(kC, 2);
  std::vector<T> out(size_t(kN) * kC);
  std::vector<float> rstd(kN);
  for (auto _ : state) cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), kN, kC, 1e-5f);
  bytes(state, int64_t(kN) * kC * (4 + int64_t(sizeof(T))));
}
BENCHMARK(rmsnorm_forward<float>);
BENCHMARK(rmsnorm_forward<bf16>);

void rmsnorm_backward(benchmark::State& state) {
  const auto x = values(size_t(kN) * kC, 1), w = values(kC, 2), dout = values(size_t(kN) * kC, 3);
  const auto rstd = values(kN, 4);
  std::vector<float> dx(size_t(kN) * kC), dw(kC);
  for (auto _ : state)
    cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), kN, kC);
  bytes(state, int64_t(kN) * kC * 4 * 4);  // dout, x, dx read, dx written
}
BENCHMARK(rmsnorm_backward);

void rope(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const int QKV = 3 * kH * kD;
  auto x = values(size_t(kN) * QKV, 5);
  const auto pos = positions();
  for (auto _ : state) {
    if (backward)
      cpu::rope_backward(x.data(), pos.data(), kN, 2 * kH, QKV, kD, 10000.0f);
    else
      cpu::rope_forward(x.data(), pos.data(), kN, 2 * kH, QKV, kD, 10000.0f);
  }
  bytes(state, int64_t(kN) * 2 * kH * kD * 4 * 2);  // q and k heads, read and written
}
BENCHMARK(rope)->ArgName("backward")->Arg(0)->Arg(1);

template <typename T>
void swiglu_forward(benchmark::State& state) {
  const auto h13 = values(size_t(kN) * 2 * kF, 6);
  std::vector<T> out(size_t(kN) * kF);
  for (auto _ : state) cpu::swiglu_forward(out.data(), h13.data(), kN, kF);
  bytes(state, int64_t(kN) * kF * (8 + int64_t(sizeof(T))));
}
BENCHMARK(swiglu_forward<float>);
BENCHMARK(swiglu_forward<bf16>);

template <typename T>
void swiglu_backward(benchmark::State& state) {
  const auto h13 = values(size_t(kN) * 2 * kF, 6), dout = values(size_t(kN) * kF, 7);
  std::vector<T> dh13(size_t(kN) * 2 * kF);
  for (auto _ : state) cpu::swiglu_backward(dh13.data(), dout.data(), h13.data(), kN, kF);
  bytes(state, int64_t(kN) * kF * (12 + 2 * int64_t(sizeof(T))));
}
BENCHMARK(swiglu_backward<float>);
BENCHMARK(swiglu_backward<bf16>);

void residual_forward(benchmark::State& state) {
  const auto a = values(size_t(kN) * kC, 8), b = values(size_t(kN) * kC, 9);
  std::vector<float> out(size_t(kN) * kC);
  for (auto _ : state) cpu::residual_forward(out.data(), a.data(), b.data(), int64_t(kN) * kC);
  bytes(state, int64_t(kN) * kC * 12);
}
BENCHMARK(residual_forward);

void embedding(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const auto wte = values(size_t(kV) * kC, 10), dout = values(size_t(kN) * kC, 11);
  const auto t = tokens(kV);
  std::vector<float> out(size_t(kN) * kC), dwte(size_t(kV) * kC);
  for (auto _ : state) {
    if (backward)
      cpu::embedding_backward(dwte.data(), dout.data(), t.data(), kN, kC);
    else
      cpu::embedding_forward(out.data(), t.data(), wte.data(), kN, kC);
  }
  bytes(state, int64_t(kN) * kC * (backward ? 12 : 8));
}
BENCHMARK(embedding)->ArgName("backward")->Arg(0)->Arg(1);

void vocab_parallel_embedding(benchmark::State& state) {  // half the vocabulary: TP 2
  const bool backward = state.range(0) != 0;
  const int V = kV / 2;
  const auto wte = values(size_t(V) * kC, 10), dout = values(size_t(kN) * kC, 11);
  const auto t = tokens(kV);
  std::vector<float> out(size_t(kN) * kC), dwte(size_t(V) * kC);
  for (auto _ : state) {
    if (backward)
      cpu::vocab_parallel_embedding_backward(dwte.data(), dout.data(), t.data(), V, V, kN, kC);
    else
      cpu::vocab_parallel_embedding_forward(out.data(), t.data(), wte.data(), V, V, kN, kC);
  }
  bytes(state, int64_t(kN) * kC * (backward ? 12 : 8) / (backward ? 2 : 1));
}
BENCHMARK(vocab_parallel_embedding)->ArgName("backward")->Arg(0)->Arg(1);

// One row block of the vocabulary-parallel cross-entropy at TP 2: its max, exponentials and gradient.
void vocab_parallel_ce(benchmark::State& state) {
  const int N = 256, V = kV / 2;
  const auto logits0 = values(size_t(N) * V, 12);
  const auto t = tokens(kV);
  std::vector<float> logits = logits0, maxima(2 * size_t(N)), partials(2 * size_t(N)), gmax(N), losses(N);
  for (auto _ : state) {
    std::memcpy(logits.data(), logits0.data(), sizeof(float) * logits.size());  // (g++ 13 misreads a vector copy here)
    cpu::vocab_parallel_ce_max(maxima.data(), logits.data(), N, V);
    std::copy(maxima.begin(), maxima.begin() + N, maxima.begin() + N);
    cpu::vocab_parallel_ce_partials(partials.data(), gmax.data(), logits.data(), maxima.data(), 2, t.data(), 0, N, V);
    cpu::vocab_parallel_ce_forward(losses.data(), gmax.data(), partials.data(), t.data(), N);
    cpu::vocab_parallel_ce_backward(logits.data(), partials.data(), t.data(), 0, 1e-3f, N, V, false);
  }
  bytes(state, int64_t(N) * V * 4 * 6);  // the copy, then max, exp, scale passes over the logits
}
BENCHMARK(vocab_parallel_ce);

void adamw(benchmark::State& state) {
  const int mode = int(state.range(0));  // 0 fp32, 1 bf16-mixed (bf16 copy), 2 bf16-sr
  const int64_t n = kParams;
  std::vector<float> p = values(size_t(n), 13), g = values(size_t(n), 14);
  std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
  std::vector<bf16> pb(static_cast<size_t>(n)), mb(static_cast<size_t>(n)), vb(static_cast<size_t>(n));
  int step = 0;
  for (auto _ : state) {
    step++;
    if (mode == 0)
      cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 1.0f);
    else if (mode == 1)
      cpu::adamw_update_bf16_copy(p.data(), pb.data(), m.data(), v.data(), g.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                                  step, 1.0f);
    else
      cpu::adamw_update_bf16_sr(pb.data(), mb.data(), vb.data(), p.data(), g.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                                step, 1.0f, 5, 0);
  }
  const int64_t per_param[] = {4 * 7, 4 * 7 + 2, 2 * 6 + 4 * 2};
  bytes(state, n * per_param[mode]);
}
BENCHMARK(adamw)->ArgName("mode")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

void sum_squares(benchmark::State& state) {
  const auto g = values(size_t(kParams), 15);
  for (auto _ : state) benchmark::DoNotOptimize(cpu::sum_squares(g.data(), kParams));
  bytes(state, kParams * 4);
}
BENCHMARK(sum_squares)->Unit(benchmark::kMillisecond);

void fill_normal(benchmark::State& state) {
  std::vector<float> w(size_t(kC) * kF);
  for (auto _ : state) cpu::fill_normal(w.data(), int64_t(w.size()), 0.02f, 1, 2, 0);
  bytes(state, int64_t(w.size()) * 4);
}
BENCHMARK(fill_normal);

}  // namespace
}  // namespace llamatrain

BENCHMARK_MAIN();
