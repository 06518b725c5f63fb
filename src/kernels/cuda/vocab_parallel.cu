// Vocabulary-parallel embedding and cross-entropy (Megatron's), as ref::vocab_parallel_*: this
// rank's rows [vocab_begin, vocab_begin + V) of the table and of the logits. One thread per element
// for the embedding's forward and the backward's dlogits, one per column for the embedding's backward
// (the tokens in order: deterministic), one block per row for the max and the partials (exp in fp64
// rounded once and their sum in fp64, as ref), one thread per row for the losses.
#include <cuda_runtime.h>

#include "core/bf16.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/rng_device.cuh"

namespace llamatrain::cuda {

using detail::cuda_stream;
using detail::grid_for;

namespace {

constexpr int kRowThreads = 256;

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void vp_embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin,
                                            int V, int N, int C) {
  GRID_STRIDE(i, int64_t(N) * C) {
    const int64_t row = int64_t(tokens[i / C]) - vocab_begin;
    out[i] = row < 0 || row >= V ? 0.0f : wte[row * C + i % C];  // tokens of other ranks: 0
  }
}

// One thread per column, over the tokens in order (as embedding_backward: deterministic).
__global__ void vp_embedding_backward_kernel(float* dwte, const float* __restrict__ dout,
                                             const int32_t* __restrict__ tokens, int64_t vocab_begin, int V, int N,
                                             int C) {
  GRID_STRIDE(c, int64_t(C)) {
    for (int n = 0; n < N; n++) {
      const int64_t row = int64_t(tokens[n]) - vocab_begin;
      if (row >= 0 && row < V) dwte[row * C + c] += dout[int64_t(n) * C + c];
    }
  }
}

__global__ void ce_max_kernel(float* local_max, const float* logits, int V) {
  __shared__ float red[32];
  const float* row = logits + int64_t(blockIdx.x) * V;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, row[v]);
  mx = detail::block_max(mx, red);
  if (threadIdx.x == 0) local_max[blockIdx.x] = mx;
}

// global_max = max over the P maxima; row <- exp(row - global_max); partials = (sum, target logit or 0).
__global__ void ce_partials_kernel(float* partials, float* global_max, float* logits, const float* maxima, int P,
                                   const int32_t* targets, int64_t vocab_begin, int N, int V) {
  __shared__ double red[32];
  const int n = blockIdx.x;
  float* row = logits + int64_t(n) * V;
  float mx = maxima[n];
  for (int p = 1; p < P; p++) mx = fmaxf(mx, maxima[int64_t(p) * N + n]);
  const int64_t t = int64_t(targets[n]) - vocab_begin;
  const float target_logit = targets[n] >= 0 && t >= 0 && t < V ? row[t] : 0.0f;
  __syncthreads();  // the target logit is read before the row turns into exps
  double sum = 0.0;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float e = float(exp(double(row[v]) - double(mx)));
    row[v] = e;
    sum += e;
  }
  sum = detail::block_sum(sum, red);
  if (threadIdx.x == 0) {
    global_max[n] = mx;
    partials[2 * n] = float(sum);
    partials[2 * n + 1] = target_logit;
  }
}

__global__ void ce_forward_kernel(float* losses, const float* global_max, const float* partials, const int32_t* targets,
                                  int N) {
  GRID_STRIDE(n, N) {
    losses[n] =
        targets[n] < 0 ? 0.0f : float(double(global_max[n]) + log(double(partials[2 * n])) - partials[2 * n + 1]);
  }
}

__global__ void ce_backward_kernel(float* exps, const float* partials, const int32_t* targets, int64_t vocab_begin,
                                   float dloss, int N, int V, bool bf16_values) {
  GRID_STRIDE(i, int64_t(N) * V) {
    const int64_t n = i / V, v = i % V;
    const int64_t t = int64_t(targets[n]) - vocab_begin;
    const float d =
        targets[n] < 0 ? 0.0f : float(double(dloss) * (double(exps[i]) / partials[2 * n] - (v == t ? 1.0 : 0.0)));
    exps[i] = bf16_values ? rng::bf16_bits_to_float(rng::bf16_bits_rne(d)) : d;
  }
}

}  // namespace

void vocab_parallel_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_begin, int V,
                                      int N, int C) {
  if (int64_t(N) * C == 0) return;
  vp_embedding_forward_kernel<<<grid_for(int64_t(N) * C), 256, 0, cuda_stream()>>>(out, tokens, wte, vocab_begin, V, N,
                                                                                   C);
  CUDA_CHECK_LAUNCH("vp_embedding_forward_kernel");
}

void vocab_parallel_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t vocab_begin,
                                       int V, int N, int C) {
  if (int64_t(N) * C == 0) return;
  vp_embedding_backward_kernel<<<grid_for(C, 128), 128, 0, cuda_stream()>>>(dwte, dout, tokens, vocab_begin, V, N, C);
  CUDA_CHECK_LAUNCH("vp_embedding_backward_kernel");
}

void vocab_parallel_ce_max(float* local_max, const float* logits, int N, int V) {
  if (N <= 0) return;
  ce_max_kernel<<<N, kRowThreads, 0, cuda_stream()>>>(local_max, logits, V);
  CUDA_CHECK_LAUNCH("ce_max_kernel");
}

void vocab_parallel_ce_partials(float* partials, float* global_max, float* logits, const float* maxima, int P,
                                const int32_t* targets, int64_t vocab_begin, int N, int V) {
  if (N <= 0) return;
  ce_partials_kernel<<<N, kRowThreads, 0, cuda_stream()>>>(partials, global_max, logits, maxima, P, targets,
                                                           vocab_begin, N, V);
  CUDA_CHECK_LAUNCH("ce_partials_kernel");
}

void vocab_parallel_ce_forward(float* losses, const float* global_max, const float* partials, const int32_t* targets,
                               int N) {
  if (N <= 0) return;
  ce_forward_kernel<<<grid_for(N), 256, 0, cuda_stream()>>>(losses, global_max, partials, targets, N);
  CUDA_CHECK_LAUNCH("ce_forward_kernel");
}

void vocab_parallel_ce_backward(float* exps, const float* partials, const int32_t* targets, int64_t vocab_begin,
                                float dloss, int N, int V, bool bf16_values) {
  if (int64_t(N) * V == 0) return;
  ce_backward_kernel<<<grid_for(int64_t(N) * V), 256, 0, cuda_stream()>>>(exps, partials, targets, vocab_begin, dloss,
                                                                          N, V, bf16_values);
  CUDA_CHECK_LAUNCH("ce_backward_kernel");
}

}  // namespace llamatrain::cuda
