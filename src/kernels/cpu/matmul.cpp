// Fast matmul (nn.Linear without bias) through oneDNN 2.6; must match ref::matmul_* (kernels/ref/matmul.cpp).
//   forward   out (N,OC)     = inp (N,IC) @ W^T      W^T is W (OC,IC) read with format tag ba
//   backward  dinp (N,IC)    = dout (N,OC) @ W       plain ab operands
//             dweight (OC,IC) += dout^T @ inp       dout^T is dout read with tag ba (fp32, or bf16 dout),
//                                                   or a transposed bf16 copy; += is a sum post-op
// ComputeType::bf16 uses bf16 activation operands (inp, dout) as they are, converts float ones into
// per-thread bf16 scratch (a float dout also into a transposed copy: oneDNN 2.6 runs the dweight gemm
// 5-10% faster with a plain A), and uses the caller's bf16 weight copy; accumulation and every output
// stay fp32 (oneDNN picks the avx512_core_bf16 / AMX brgemm kernels when the CPU has them). One engine
// and stream per process; one primitive per (shape, dtype, transposes, accumulate), created on first
// use and cached.
#include <algorithm>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <type_traits>
#include <unordered_map>

#include "core/arena.h"
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
  ArenaVector<uint8_t> scratchpad;
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
  if (plan->pad_md.get_size() > d.scratchpad.size()) {
    d.scratchpad = ArenaVector<uint8_t>();
    d.scratchpad.resize(plan->pad_md.get_size());
  }
  return *d.plans.emplace(key, std::move(plan)).first->second;
}

// Per-thread growable scratch of trivially constructible T (huge-page arenas, zeroed when grown).
template <typename T, int kSlots>
T* scratch(int slot, int64_t n) {
  thread_local ArenaVector<T> bufs[kSlots];
  CHECK(slot >= 0 && slot < kSlots, "scratch slot {} out of range", slot);
  ArenaVector<T>& b = bufs[slot];
  if (int64_t(b.size()) < n) {
    b = ArenaVector<T>();  // release first: no old + new copy alive at once
    b.resize(size_t(n));
  }
  return b.data();
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
  dnnl::memory pad_mem(plan.pad_md, d.engine, d.scratchpad.data());
  plan.prim.execute(d.stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem},
                               {DNNL_ARG_SCRATCHPAD, pad_mem}});
  d.stream.wait();
}

bf16* bf16_scratch(int slot, int64_t n) { return scratch<bf16, 4>(slot, n); }
float* f32_scratch(int slot, int64_t n) { return scratch<float, 2>(slot, n); }

}  // namespace detail

namespace {

// The bf16 operand for a gemm: a float x is converted into the calling thread's scratch slot, a bf16
// one is passed through untouched.
const bf16* as_bf16(const float* x, int64_t n, int slot) {
  bf16* b = detail::bf16_scratch(slot, n);
  bf16_from_float(b, x, n);
  return b;
}
const bf16* as_bf16(const bf16* x, int64_t, int) { return x; }

// x (R,C) fp32 -> xt (C,R) bf16, round to nearest even, in 32 x 32 blocks (rows of both sides stay
// in cache while a block is transposed).
void bf16_transpose_from_float(bf16* xt /*(C,R)*/, const float* x /*(R,C)*/, int R, int C) {
  constexpr int kT = 32;
  const int rb = (R + kT - 1) / kT, cb = (C + kT - 1) / kT;
#pragma omp parallel for schedule(static) if (int64_t(R) * C >= (1 << 16))
  for (int b = 0; b < rb * cb; b++) {
    const int r0 = b / cb * kT, c0 = b % cb * kT;
    const int r1 = std::min(R, r0 + kT), c1 = std::min(C, c0 + kT);
    for (int c = c0; c < c1; c++)
      for (int r = r0; r < r1; r++) xt[int64_t(c) * R + r] = to_bf16(x[int64_t(r) * C + c]);
  }
}

}  // namespace

template <typename TI>
void matmul_forward(float* out /*(N,OC)*/, const TI* inp /*(N,IC)*/, const float* weight /*(OC,IC)*/,
                    const bf16* weight_bf16 /*(OC,IC)*/, int N, int IC, int OC, ComputeType ct) {
  if (ct == ComputeType::f32) {
    if constexpr (std::is_same_v<TI, float>) {
      detail::gemm(out, inp, false, weight, true, N, OC, IC, false, false);
      return;
    }
    CHECK(false, "matmul_forward: fp32 compute needs a float input");
  }
  CHECK(weight_bf16 != nullptr, "matmul_forward: bf16 compute needs weight_bf16");
  const bf16* inp_b = as_bf16(inp, int64_t(N) * IC, 0);  // (N,IC)
  detail::gemm(out, inp_b, false, weight_bf16, true, N, OC, IC, true, false);
}

template <typename TD, typename TI>
void matmul_backward(float* dinp /*(N,IC)*/, float* dweight /*(OC,IC)*/, const TD* dout /*(N,OC)*/,
                     const TI* inp /*(N,IC)*/, const float* weight /*(OC,IC)*/,
                     const bf16* weight_bf16 /*(OC,IC)*/, int N, int IC, int OC, ComputeType ct) {
  if (ct == ComputeType::f32) {
    if constexpr (std::is_same_v<TD, float> && std::is_same_v<TI, float>) {
      if (dinp != nullptr) detail::gemm(dinp, dout, false, weight, false, N, IC, OC, false, false);
      detail::gemm(dweight, dout, true, inp, false, OC, IC, N, false, true);
      return;
    }
    CHECK(false, "matmul_backward: fp32 compute needs float dout and inp");
  }
  const bf16* dout_b = as_bf16(dout, int64_t(N) * OC, 0);  // (N,OC)
  if (dinp != nullptr) {
    CHECK(weight_bf16 != nullptr, "matmul_backward: bf16 compute needs weight_bf16");
    detail::gemm(dinp, dout_b, false, weight_bf16, false, N, IC, OC, true, false);
  }
  const bf16* inp_b = as_bf16(inp, int64_t(N) * IC, 1);  // (N,IC)
  if constexpr (std::is_same_v<TD, float>) {
    // dout is being converted anyway: its transposed copy lets dweight read a plain row-major A
    bf16* dout_t = detail::bf16_scratch(2, int64_t(N) * OC);  // (OC,N)
    bf16_transpose_from_float(dout_t, dout, N, OC);
    detail::gemm(dweight, dout_t, false, inp_b, false, OC, IC, N, true, true);
  } else {
    detail::gemm(dweight, dout_b, true, inp_b, false, OC, IC, N, true, true);
  }
}

template void matmul_forward(float*, const float*, const float*, const bf16*, int, int, int, ComputeType);
template void matmul_forward(float*, const bf16*, const float*, const bf16*, int, int, int, ComputeType);
template void matmul_backward(float*, float*, const float*, const float*, const float*, const bf16*, int, int, int,
                              ComputeType);
template void matmul_backward(float*, float*, const float*, const bf16*, const float*, const bf16*, int, int, int,
                              ComputeType);
template void matmul_backward(float*, float*, const bf16*, const bf16*, const float*, const bf16*, int, int, int,
                              ComputeType);

}  // namespace llamatrain::cpu
