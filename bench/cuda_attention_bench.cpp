// Times causal GQA attention forward and backward on the GPU: the tensor-core kernels
// (cuda::flash_attention_*) beside the plain fp32 ones (cuda::attention_*), the peer of
// tools/reference/gpu_attention.py (PyTorch's scaled_dot_product_attention on the same shape).
// TFLOP/s counts what FlashAttention's papers count: the forward's two matmuls over the visible
// (causal) half, 4 * B * H * T^2 * D / 2 flops, the backward 2.5 times that (five matmuls), whatever
// a kernel recomputes. Median of --iters timed calls after two warmup calls, each call waited for.
// Built where CUDA is; scripts/device_check.sh runs it on the GPU machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/ops.h"
#include "timing.h"

namespace {

using namespace llamatrain;

struct Args {
  int batch = 1, seq = 4096, heads = 32, kv_heads = 32, head_dim = 128, window = 0, iters = 10;
  std::string kernel = "both";
  bool json = false;
};

[[noreturn]] void usage(int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: cuda_attention_bench [--batch B] [--seq T] [--heads H] [--kv-heads HKV] [--head-dim D]\n"
               "                            [--window W] [--iters N] [--kernel flash|plain|both] [--json]\n"
               "Times causal attention forward and backward on the GPU (default: Llama-2-7B's shape at seq 4096).\n"
               "example: cuda_attention_bench --seq 2048 --heads 32 --kv-heads 4 --head-dim 64 --json\n");
  std::exit(code);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i++) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") usage(0);
    if (k == "--json") {
      a.json = true;
      continue;
    }
    if (i + 1 >= argc) usage(2);
    const char* v = argv[++i];
    if (k == "--batch")
      a.batch = std::atoi(v);
    else if (k == "--seq")
      a.seq = std::atoi(v);
    else if (k == "--heads")
      a.heads = std::atoi(v);
    else if (k == "--kv-heads")
      a.kv_heads = std::atoi(v);
    else if (k == "--head-dim")
      a.head_dim = std::atoi(v);
    else if (k == "--window")
      a.window = std::atoi(v);
    else if (k == "--iters")
      a.iters = std::atoi(v);
    else if (k == "--kernel")
      a.kernel = v;
    else
      usage(2);
  }
  if (a.batch < 1 || a.seq < 1 || a.heads < 1 || a.kv_heads < 1 || a.heads % a.kv_heads != 0 || a.head_dim < 1 ||
      a.iters < 1 || (a.kernel != "flash" && a.kernel != "plain" && a.kernel != "both"))
    usage(2);
  return a;
}

template <typename F>
double median_ms(int iters, F&& call) {
  return bench::median_ms(iters, std::forward<F>(call), [] { cuda::synchronize(); });
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    if (!cuda::available()) {
      std::fprintf(stderr, "cuda_attention_bench: no GPU: %s\n", cuda::no_device_reason().c_str());
      return 1;
    }
    const int B = a.batch, T = a.seq, H = a.heads, Hkv = a.kv_heads, D = a.head_dim;
    const int64_t W = int64_t(H + 2 * Hkv) * D, n_qkv = int64_t(B) * T * W, n_out = int64_t(B) * T * H * D;
    auto alloc = [](int64_t n) { return static_cast<float*>(cuda::device_alloc(size_t(n) * sizeof(float))); };
    float *qkv = alloc(n_qkv), *dqkv = alloc(n_qkv), *out = alloc(n_out), *dout = alloc(n_out),
          *lse = alloc(int64_t(B) * H * T);
    cuda::fill_normal(qkv, n_qkv, 1.0f, 1234, 1, 0);
    cuda::fill_normal(dout, n_out, 1.0f, 1234, 2, 0);
    const double visible = a.window > 0 ? std::min<double>(a.window, T) * T -
                                              0.5 * std::min<double>(a.window, T) * std::min<double>(a.window, T)
                                        : 0.5 * double(T) * T;
    const double fwd_flops = 4.0 * B * H * visible * D, bwd_flops = 2.5 * fwd_flops;
    std::string json = "{\"bench\":\"cuda_attention\",\"device\":\"" + cuda::device_name() +
                       "\",\"batch\":" + std::to_string(B) + ",\"seq\":" + std::to_string(T) +
                       ",\"heads\":" + std::to_string(H) + ",\"kv_heads\":" + std::to_string(Hkv) +
                       ",\"head_dim\":" + std::to_string(D) + ",\"window\":" + std::to_string(a.window);
    if (!a.json)
      std::printf("attention B=%d T=%d H=%d Hkv=%d D=%d window=%d on %s\n", B, T, H, Hkv, D, a.window,
                  cuda::device_name().c_str());
    for (const std::string kernel : {"flash", "plain"}) {
      if (a.kernel != "both" && a.kernel != kernel) continue;
      const bool flash = kernel == "flash";
      if (flash && !cuda::flash_attention_supports(D)) continue;
      const double f = median_ms(a.iters, [&] {
        if (flash)
          cuda::flash_attention_forward(out, lse, qkv, B, T, H, Hkv, D, a.window);
        else
          cuda::attention_forward(out, lse, qkv, B, T, H, Hkv, D, a.window);
      });
      const double b = median_ms(a.iters, [&] {
        if (flash)
          cuda::flash_attention_backward(dqkv, dout, qkv, out, lse, B, T, H, Hkv, D, a.window);
        else
          cuda::attention_backward(dqkv, dout, qkv, out, lse, B, T, H, Hkv, D, a.window);
      });
      const double tf = fwd_flops / (f * 1e9), tb = bwd_flops / (b * 1e9),
                   tt = (fwd_flops + bwd_flops) / ((f + b) * 1e9);
      if (a.json) {
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      ",\"%s_fwd_ms\":%.4f,\"%s_bwd_ms\":%.4f,\"%s_fwd_tflops\":%.2f,\"%s_bwd_tflops\":%.2f,"
                      "\"%s_tflops\":%.2f",
                      kernel.c_str(), f, kernel.c_str(), b, kernel.c_str(), tf, kernel.c_str(), tb, kernel.c_str(), tt);
        json += buf;
      } else {
        std::printf("  %-5s forward %8.3f ms %7.1f TFLOP/s | backward %8.3f ms %7.1f TFLOP/s | both %7.1f TFLOP/s\n",
                    kernel.c_str(), f, tf, b, tb, tt);
      }
    }
    if (a.json) std::printf("%s}\n", json.c_str());
    for (float* p : {qkv, dqkv, out, dout, lse}) cuda::device_free(p);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
