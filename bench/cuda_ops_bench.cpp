// Times the CUDA backend's ops besides the matmuls and attention, one at a layer's shape (default:
// Llama-2-7B, 4096 tokens): the memory-bound ones in GB/s of the bytes each must move at least,
// beside the device's own copy rate measured in the same run (a device-to-device copy of 1 GiB, read
// and written); the lm head + cross-entropy in TFLOP/s (forward 2NCV, backward with its recomputed
// logits 6NCV); AdamW over one layer's parameters (bf16-mixed: param, moments and gradient read,
// param and moments written, the bf16 copy written). Median of --iters timed calls after two warmup
// calls, each waited for. Figures, not tests: scripts/device_check.sh runs it on the GPU machine, and
// the emulated build runs it once on a tiny shape (the figures come out whole).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/cuda/ops.h"
#include "timing.h"

namespace {

using namespace llamatrain;

struct Args {
  int tokens = 4096, hidden = 4096, ffn = 11008, heads = 32, kv_heads = 32, head_dim = 128, vocab = 32000, iters = 10;
  int64_t copy_bytes = int64_t(1) << 30;
  bool json = false;
};

[[noreturn]] void usage(int code) {
  std::fprintf(
      code == 0 ? stdout : stderr,
      "usage: cuda_ops_bench [--tokens N] [--hidden C] [--ffn F] [--heads H] [--kv-heads HKV]\n"
      "                      [--head-dim D] [--vocab V] [--copy-bytes B] [--iters N] [--json]\n"
      "Times the GPU's norm, RoPE, SwiGLU, residual, lm head + CE and AdamW kernels at one layer's shape\n"
      "(default: Llama-2-7B, 4096 tokens), against the device's measured copy rate.\n"
      "example: cuda_ops_bench --tokens 16384 --hidden 2048 --ffn 5632 --heads 32 --kv-heads 4 --head-dim 64\n");
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
    if (k == "--tokens")
      a.tokens = std::atoi(v);
    else if (k == "--hidden")
      a.hidden = std::atoi(v);
    else if (k == "--ffn")
      a.ffn = std::atoi(v);
    else if (k == "--heads")
      a.heads = std::atoi(v);
    else if (k == "--kv-heads")
      a.kv_heads = std::atoi(v);
    else if (k == "--head-dim")
      a.head_dim = std::atoi(v);
    else if (k == "--vocab")
      a.vocab = std::atoi(v);
    else if (k == "--copy-bytes")
      a.copy_bytes = std::atoll(v);
    else if (k == "--iters")
      a.iters = std::atoi(v);
    else
      usage(2);
  }
  if (a.tokens < 1 || a.hidden < 1 || a.ffn < 1 || a.heads < 1 || a.kv_heads < 1 || a.heads % a.kv_heads != 0 ||
      a.head_dim < 2 || a.head_dim % 2 != 0 || a.vocab < 1 || a.iters < 1 || a.copy_bytes < 4)
    usage(2);
  return a;
}

template <typename F>
double median_ms(int iters, F&& call) {
  return bench::median_ms(iters, std::forward<F>(call), [] { cuda::synchronize(); });
}

// Device arrays freed at exit.
class Arena {
 public:
  ~Arena() {
    for (void* p : blocks_) cuda::device_free(p);
  }
  template <typename T>
  T* get(int64_t n) {
    void* p = cuda::device_alloc(size_t(std::max<int64_t>(n, 1)) * sizeof(T));
    blocks_.push_back(p);
    return static_cast<T*>(p);
  }
  float* normal(int64_t n, uint32_t stream, float std = 1.0f) {
    float* p = get<float>(n);
    cuda::fill_normal(p, n, std, 4321, stream, 0);
    return p;
  }

 private:
  std::vector<void*> blocks_;
};

struct Row {
  std::string name, unit;
  double ms, rate;  // rate in GB/s or TFLOP/s
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    if (!cuda::available()) {
      std::fprintf(stderr, "cuda_ops_bench: no GPU: %s\n", cuda::no_device_reason().c_str());
      return 1;
    }
    const int64_t N = a.tokens, C = a.hidden, F = a.ffn, H = a.heads, Hkv = a.kv_heads, D = a.head_dim, V = a.vocab;
    const int64_t QKV = (H + 2 * Hkv) * D, layer_params = C * QKV + C * H * D + 3 * C * F + 2 * C;
    Arena m;
    std::vector<Row> rows;
    auto bandwidth = [&](const std::string& name, double bytes, auto&& call) {
      const double ms = median_ms(a.iters, call);
      rows.push_back({name, "GB/s", ms, bytes / (ms * 1e6)});
    };

    // The ceiling: a device-to-device copy (read + write).
    const int64_t copy_floats = a.copy_bytes / 4;
    float *src = m.normal(copy_floats, 1), *dst = m.get<float>(copy_floats);
    bandwidth("copy (ceiling)", 2.0 * double(copy_floats) * 4,
              [&] { cuda::copy_device(dst, src, size_t(copy_floats) * 4); });
    const double ceiling = rows.back().rate;

    float *x = m.normal(N * C, 2), *y = m.normal(N * C, 3), *resid = m.get<float>(N * C), *w = m.normal(C, 4);
    float *rstd = m.get<float>(N), *dx = m.normal(N * C, 5), *dw = m.get<float>(C), *dout = m.normal(N * C, 6);
    bf16* ln = m.get<bf16>(N * C);
    cuda::fill_zero(dw, size_t(C) * 4);
    bandwidth("rmsnorm forward (bf16 out)", double(N * C) * 6,
              [&] { cuda::rmsnorm_forward(ln, rstd, x, w, int(N), int(C), 1e-5f); });
    bandwidth("residual + rmsnorm forward", double(N * C) * 14,
              [&] { cuda::residual_rmsnorm_forward(resid, ln, rstd, x, y, w, int(N), int(C), 1e-5f); });
    bandwidth("residual", double(N * C) * 12, [&] { cuda::residual_forward(resid, x, y, N * C); });
    bandwidth("rmsnorm backward (dx, dweight)", double(N * C) * 24,
              [&] { cuda::rmsnorm_backward(dx, dw, dout, x, w, rstd, int(N), int(C)); });

    float* qkv = m.normal(N * QKV, 7);
    std::vector<int32_t> pos_host(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; n++) pos_host[size_t(n)] = int32_t(n % 4096);
    int32_t* pos = m.get<int32_t>(N);
    cuda::copy_to_device(pos, pos_host.data(), pos_host.size() * sizeof(int32_t));
    const double rope_bytes = double(N * (H + Hkv) * D) * 8;
    bandwidth("rope forward", rope_bytes,
              [&] { cuda::rope_forward(qkv, pos, int(N), int(H + Hkv), int(QKV), int(D), 10000.0f); });
    bandwidth("rope backward", rope_bytes,
              [&] { cuda::rope_backward(qkv, pos, int(N), int(H + Hkv), int(QKV), int(D), 10000.0f); });

    float *h13 = m.normal(N * 2 * F, 8), *dmid = m.normal(N * F, 9);
    bf16 *mid = m.get<bf16>(N * F), *dh13 = m.get<bf16>(N * 2 * F);
    bandwidth("swiglu forward (bf16 out)", double(N * F) * 10, [&] { cuda::swiglu_forward(mid, h13, int(N), int(F)); });
    bandwidth("swiglu backward (bf16 out)", double(N * F) * 16,
              [&] { cuda::swiglu_backward(dh13, dmid, h13, int(N), int(F)); });

    float *param = m.normal(layer_params, 10, 0.02f), *mom = m.get<float>(layer_params),
          *var = m.get<float>(layer_params);
    float* grad = m.normal(layer_params, 11, 1e-3f);
    bf16* copy = m.get<bf16>(layer_params);
    cuda::fill_zero(mom, size_t(layer_params) * 4);
    cuda::fill_zero(var, size_t(layer_params) * 4);
    int step = 0;
    bandwidth("adamw bf16-mixed (one layer)", double(layer_params) * 30, [&] {
      cuda::adamw_update_bf16_copy(param, copy, mom, var, grad, layer_params, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step,
                                   1.0f);
    });

    // The lm head + cross-entropy over N rows (bf16 compute).
    const int64_t lm_rows = std::min<int64_t>(N, 4096);
    float *wout = m.normal(V * C, 12, 0.02f), *losses = m.get<float>(lm_rows), *dwout = m.get<float>(V * C);
    bf16* wout_bf16 = m.get<bf16>(V * C);
    cuda::bf16_from_float(wout_bf16, wout, V * C);
    std::vector<int32_t> targets_host(static_cast<size_t>(lm_rows));
    for (int64_t n = 0; n < lm_rows; n++) targets_host[size_t(n)] = int32_t((n * 7919) % V);
    int32_t* targets = m.get<int32_t>(lm_rows);
    cuda::copy_to_device(targets, targets_host.data(), targets_host.size() * sizeof(int32_t));
    const double lm_flops = 2.0 * double(lm_rows) * double(C) * double(V);
    const double lf = median_ms(a.iters, [&] {
      cuda::lmhead_ce_forward(losses, x, wout, cuda::Bf16Weight(wout_bf16), targets, int(lm_rows), int(C), int(V),
                              cuda::ComputeType::bf16);
    });
    rows.push_back({"lm head + ce forward", "TFLOP/s", lf, lm_flops / (lf * 1e9)});
    const double lb = median_ms(a.iters, [&] {
      cuda::lmhead_ce_backward(losses, dx, dwout, x, wout, cuda::Bf16Weight(wout_bf16), targets, 1.0f / float(lm_rows),
                               int(lm_rows), int(C), int(V), cuda::ComputeType::bf16);
    });
    rows.push_back({"lm head + ce backward", "TFLOP/s", lb, 3.0 * lm_flops / (lb * 1e9)});

    if (a.json) {
      std::string json = "{\"bench\":\"cuda_ops\",\"device\":\"" + cuda::device_name() +
                         "\",\"tokens\":" + std::to_string(N) + ",\"hidden\":" + std::to_string(C) +
                         ",\"ffn\":" + std::to_string(F) + ",\"copy_gbps\":" + std::to_string(ceiling);
      json += ",\"ops\":[";
      for (size_t i = 0; i < rows.size(); i++) {
        const bool gbps = rows[i].unit == "GB/s";
        char buf[320], of_copy[64] = "";
        if (gbps) std::snprintf(of_copy, sizeof of_copy, ",\"of_copy\":%.3f", rows[i].rate / ceiling);
        std::snprintf(buf, sizeof buf, "%s{\"op\":\"%s\",\"ms\":%.4f,\"%s\":%.2f%s}", i ? "," : "",
                      rows[i].name.c_str(), rows[i].ms, gbps ? "gbps" : "tflops", rows[i].rate, of_copy);
        json += buf;
      }
      std::printf("%s]}\n", json.c_str());
    } else {
      std::printf("ops at N=%lld C=%lld F=%lld H=%lld Hkv=%lld D=%lld V=%lld on %s\n", (long long)N, (long long)C,
                  (long long)F, (long long)H, (long long)Hkv, (long long)D, (long long)V, cuda::device_name().c_str());
      for (const Row& r : rows) {
        if (r.unit == "GB/s")
          std::printf("  %-32s %9.3f ms %8.1f GB/s  %5.2f of the copy rate\n", r.name.c_str(), r.ms, r.rate,
                      r.rate / ceiling);
        else
          std::printf("  %-32s %9.3f ms %8.1f TFLOP/s\n", r.name.c_str(), r.ms, r.rate);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_ops_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
