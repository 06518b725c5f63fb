// Fast matmul (nn.Linear without bias) through oneDNN 2.6; must match ref::matmul_* (kernels/ref/matmul.cpp).
//   forward   out (N,OC)     = inp (N,IC) @ W^T      W^T is W (OC,IC) read with format tag ba
//   backward  dinp (N,IC)    = dout (N,OC) @ W       plain ab operands
//             dweight (OC,IC) += dout^T @ inp       dout^T is dout read with tag ba; += is a sum post-op
// ComputeType::bf16 converts the activation operands (inp, dout) into per-thread bf16 scratch and uses
// the caller's bf16 weight copy; accumulation and every output stay fp32 (oneDNN picks the
// avx512_core_bf16 / AMX brgemm kernels when the CPU has them). One engine and stream per process; one
// primitive per (shape, dtype, transposes, accumulate), created on first use and cached.
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "core/error.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/ops.h"

namespace llamatrain::cpu {

namespace {

struct GemmKey {
  int M, N, K;
  bool is_bf16, trans_a, trans_b, accumulate;
  bool operator==(const GemmKey&) const = default;
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    uint64_t h = uint64_t(k.M) * 0x9E3779B97F4A7C15ull;
    h ^= uint64_t(k.N) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= uint64_t(k.K) + 0x85EBCA77C2B2AE63ull + (h << 6) + (h >> 2);
    h ^= uint64_t(k.is_bf16) | uint64_t(k.trans_a) << 1 | uint64_t(k.trans_b) << 2 | uint64_t(k.accumulate) << 3;
    return size_t(h);
  }
};

struct GemmPlan {
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, c_md, pad_md;
};

struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mutex;
  std::unordered_map<GemmKey, std::unique_ptr<GemmPlan>, GemmKeyHash> plans;
  // One user-managed scratchpad shared by all primitives (calls are serialized by the caller:
  // kernels are not called concurrently). oneDNN's default mode allocates and first-touches a
  // fresh scratchpad on every execute, which cost ~20% of a training step in page faults.
  std::unique_ptr<uint8_t[]> scratchpad;
  size_t scratchpad_size = 0;
};

Dnnl& dnnl_state() {
  static Dnnl state;
  return state;
}

// A row-major (rows, cols) matrix, or the transpose of a stored (cols, rows) one (tag ba: strides {1, rows}).
dnnl::memory::desc matrix_md(int rows, int cols, bool transposed, dnnl::memory::data_type dt) {
  using dims = dnnl::memory::dims;
  dims strides = transposed ? dims{1, rows} : dims{cols, 1};
  return dnnl::memory::desc(dims{rows, cols}, dt, strides);
}

const GemmPlan& gemm_plan(const GemmKey& key) {
  Dnnl& d = dnnl_state();
  std::lock_guard<std::mutex> lock(d.mutex);
  auto it = d.plans.find(key);
  if (it != d.plans.end()) return *it->second;
  auto dt = key.is_bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  auto plan = std::make_unique<GemmPlan>();
  plan->a_md = matrix_md(key.M, key.K, key.trans_a, dt);
  plan->b_md = matrix_md(key.K, key.N, key.trans_b, dt);
  plan->c_md = matrix_md(key.M, key.N, false, dnnl::memory::data_type::f32);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::desc desc(plan->a_md, plan->b_md, plan->c_md);
  dnnl::matmul::primitive_desc pd(desc, attr, d.engine);
  plan->prim = dnnl::matmul(pd);
  plan->pad_md = pd.scratchpad_desc();
  if (plan->pad_md.get_size() > d.scratchpad_size) {
    d.scratchpad_size = plan->pad_md.get_size();
    d.scratchpad.reset(new uint8_t[d.scratchpad_size]);
  }
  return *d.plans.emplace(key, std::move(plan)).first->second;
}

// Per-thread growable scratch of trivially constructible T (left uninitialized).
template <typename T, int kSlots>
T* scratch(int slot, int64_t n) {
  struct Buf {
    std::unique_ptr<T[]> data;
    int64_t size = 0;
  };
  thread_local Buf bufs[kSlots];
  CHECK(slot >= 0 && slot < kSlots, "scratch slot {} out of range", slot);
  Buf& b = bufs[slot];
  if (b.size < n) {
    b.data.reset(new T[size_t(n)]);
    b.size = n;
  }
  return b.data.get();
}

}  // namespace

namespace detail {

void gemm(float* c, const void* a, bool trans_a, const void* b, bool trans_b, int M, int N, int K, bool is_bf16,
          bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // empty sum: c = 0, or c unchanged when accumulating
    if (!accumulate)
      for (int64_t i = 0; i < int64_t(M) * N; i++) c[i] = 0.0f;
    return;
  }
  const GemmPlan& plan = gemm_plan(GemmKey{M, N, K, is_bf16, trans_a, trans_b, accumulate});
  Dnnl& d = dnnl_state();
  dnnl::memory a_mem(plan.a_md, d.engine, const_cast<void*>(a));
  dnnl::memory b_mem(plan.b_md, d.engine, const_cast<void*>(b));
  dnnl::memory c_mem(plan.c_md, d.engine, c);
  dnnl::memory pad_mem(plan.pad_md, d.engine, d.scratchpad.get());
  plan.prim.execute(d.stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem},
                               {DNNL_ARG_SCRATCHPAD, pad_mem}});
  d.stream.wait();
}

bf16* bf16_scratch(int slot, int64_t n) { return scratch<bf16, 4>(slot, n); }
float* f32_scratch(int slot, int64_t n) { return scratch<float, 2>(slot, n); }

}  // namespace detail

void matmul_forward(float* out /*(N,OC)*/, const float* inp /*(N,IC)*/, const float* weight /*(OC,IC)*/,
                    const bf16* weight_bf16 /*(OC,IC)*/, int N, int IC, int OC, ComputeType ct) {
  if (ct == ComputeType::f32) {
    detail::gemm(out, inp, false, weight, true, N, OC, IC, false, false);
    return;
  }
  CHECK(weight_bf16 != nullptr, "matmul_forward: bf16 compute needs weight_bf16");
  bf16* inp_b = detail::bf16_scratch(0, int64_t(N) * IC);  // (N,IC)
  bf16_from_float(inp_b, inp, int64_t(N) * IC);
  detail::gemm(out, inp_b, false, weight_bf16, true, N, OC, IC, true, false);
}

void matmul_backward(float* dinp /*(N,IC)*/, float* dweight /*(OC,IC)*/, const float* dout /*(N,OC)*/,
                     const float* inp /*(N,IC)*/, const float* weight /*(OC,IC)*/,
                     const bf16* weight_bf16 /*(OC,IC)*/, int N, int IC, int OC, ComputeType ct) {
  if (ct == ComputeType::f32) {
    if (dinp != nullptr) detail::gemm(dinp, dout, false, weight, false, N, IC, OC, false, false);
    detail::gemm(dweight, dout, true, inp, false, OC, IC, N, false, true);
    return;
  }
  bf16* dout_b = detail::bf16_scratch(0, int64_t(N) * OC);  // (N,OC)
  bf16_from_float(dout_b, dout, int64_t(N) * OC);
  if (dinp != nullptr) {
    CHECK(weight_bf16 != nullptr, "matmul_backward: bf16 compute needs weight_bf16");
    detail::gemm(dinp, dout_b, false, weight_bf16, false, N, IC, OC, true, false);
  }
  bf16* inp_b = detail::bf16_scratch(1, int64_t(N) * IC);  // (N,IC)
  bf16_from_float(inp_b, inp, int64_t(N) * IC);
  detail::gemm(dweight, dout_b, true, inp_b, false, OC, IC, N, true, true);
}

}  // namespace llamatrain::cpu
