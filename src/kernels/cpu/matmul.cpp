// Fast matmul (nn.Linear without bias) through oneDNN (2.6 on Debian 12, 3.x on newer systems); must match
// ref::matmul_* (kernels/ref/matmul.cpp).
//   forward   out (N,OC)     = inp (N,IC) @ W^T      W^T is W (OC,IC) read with format tag ba
//   backward  dinp (N,IC)    = dout (N,OC) @ W       plain ab operands
//             dweight (OC,IC) += dout^T @ inp       dout^T is dout read with tag ba, or (bf16 kernel) a
//                                                   transposed bf16 copy; += is a sum post-op
// ComputeType::bf16 multiplies bf16 values (inp, dout and the caller's bf16 weight copy) with fp32
// accumulation, through one of two kernels chosen per shape (matmul_choice.h): oneDNN's bf16 kernel
// (float operands converted into per-thread bf16 scratch; avx512_core_bf16 / AMX brgemm when the CPU
// has them), or oneDNN's fp32 kernel on float copies of the same bf16 values (bf16 x bf16 products
// are exact in fp32, so the two agree up to summation order). Every output stays fp32. One engine
// and stream per process; one primitive per (shape, dtype, transposes, accumulate), created on first
// use and cached. Also here: the scratch, the conversions and the probe shared with lmhead_ce.cpp.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <type_traits>
#include <unordered_map>

#include "core/arena.h"
#include "core/error.h"
#include "kernels/cpu/dnnl_gemm.h"
#include "kernels/cpu/operand_types.h"
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
  std::string impl;  // oneDNN's name of the implementation it picked, e.g. "brg:avx512_core_bf16"
};

struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;
  std::unordered_map<GemmKey, std::unique_ptr<GemmPlan>, GemmKeyHash> plans;
};

Dnnl& dnnl_state() {
  static Dnnl state;
  return state;
}

// A stream and a user-managed scratchpad per calling thread (a process calls from one thread; tests
// that run ranks as threads call from several at once). oneDNN's default mode allocates and
// first-touches a fresh scratchpad on every execute, which cost ~20% of a training step in page faults.
struct DnnlThread {
  dnnl::stream stream{dnnl_state().engine};
  ArenaVector<uint8_t> scratchpad;
};

DnnlThread& dnnl_thread() {
  thread_local DnnlThread t;
  return t;
}

// A row-major (rows, cols) matrix, or the transpose of a stored (cols, rows) one (tag ba: strides {1, rows}).
dnnl::memory::desc matrix_md(int rows, int cols, bool transposed, dnnl::memory::data_type dt) {
  using dims = dnnl::memory::dims;
  dims strides = transposed ? dims{1, rows} : dims{cols, 1};
  return dnnl::memory::desc(dims{rows, cols}, dt, strides);
}

// The plan for key, created on first use. Returned by pointer: the plan lives in the cache, not in
// anything the caller passed, so no caller can mistake it for a reference into a temporary.
const GemmPlan* gemm_plan(const GemmKey& key) {
  Dnnl& d = dnnl_state();
  std::lock_guard<std::mutex> lock(d.mutex);
  auto it = d.plans.find(key);
  if (it != d.plans.end()) return it->second.get();
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
  dnnl::matmul::primitive_desc pd;
  try {
#if DNNL_VERSION_MAJOR >= 3  // oneDNN 3 dropped the operation descriptors (dnnl::matmul::desc)
    pd = dnnl::matmul::primitive_desc(d.engine, plan->a_md, plan->b_md, plan->c_md, attr);
#else
    dnnl::matmul::desc desc(plan->a_md, plan->b_md, plan->c_md);
    pd = dnnl::matmul::primitive_desc(desc, attr, d.engine);
#endif
  } catch (const dnnl::error& e) {
    const dnnl_version_t* v = dnnl::version();
    fail("oneDNN {}.{}.{} has no {} matmul for {}x{}x{} on this CPU ({})\nhint: {}", v->major, v->minor, v->patch,
         key.is_bf16 ? "bf16" : "fp32", key.M, key.N, key.K, e.what(),
         key.is_bf16 ? fmt::format("set {}=fp32 to run bf16 compute on the fp32 kernel", kMatmulPolicyEnv)
                     : std::string("check that oneDNN (libdnnl) is installed intact"));
  }
  plan->prim = dnnl::matmul(pd);
  plan->pad_md = pd.scratchpad_desc();
  plan->impl = pd.impl_info_str();
  return d.plans.emplace(key, std::move(plan)).first->second.get();
}

// Per-thread growable scratch of trivially constructible T (huge-page arenas, zeroed when grown).
template <typename T, int kSlots>
ArenaVector<T>& scratch_slot(int slot) {
  thread_local ArenaVector<T> bufs[kSlots];
  CHECK(slot >= 0 && slot < kSlots, "scratch slot {} out of range", slot);
  return bufs[slot];
}
template <typename T, int kSlots>
T* scratch(int slot, int64_t n) {
  ArenaVector<T>& b = scratch_slot<T, kSlots>(slot);
  if (int64_t(b.size()) < n) {
    b = ArenaVector<T>();  // release first: no old + new copy alive at once
    b.resize(size_t(n));
  }
  return b.data();
}
constexpr int kBf16Slots = 4, kF32Slots = 4;
// A probe times a slice of at most this many flops per OpenMP thread; calls below kProbeMinFlops run
// the bf16 kernel unprobed (too small for the choice to matter).
constexpr double kProbeFlopsPerThread = 2e9, kProbeMinFlops = 1e8;

// "AMD EPYC 9R14 | oneDNN 2.6.3 avx512_core_bf16": what a probed timing depends on besides the shape
// and the thread count (ONEDNN_MAX_CPU_ISA changes the ISA on the same CPU). The ISAs named are those
// of oneDNN 2.6 and the ones 3.0 kept; any other (3.x adds some in minor releases) is shown by value.
std::string machine_description() {
  std::string model = "unknown CPU";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) model = line.substr(colon + 2);
    break;
  }
  const dnnl::cpu_isa effective = dnnl::get_effective_cpu_isa();
  std::string isa = fmt::format("isa{:#x}", unsigned(effective));
  switch (effective) {
#if DNNL_VERSION_MAJOR >= 3
    case dnnl::cpu_isa::isa_default: isa = "isa_default"; break;
#else
    case dnnl::cpu_isa::all: isa = "all"; break;
    case dnnl::cpu_isa::avx512_mic: isa = "avx512_mic"; break;
    case dnnl::cpu_isa::avx512_mic_4ops: isa = "avx512_mic_4ops"; break;
#endif
    case dnnl::cpu_isa::sse41: isa = "sse41"; break;
    case dnnl::cpu_isa::avx: isa = "avx"; break;
    case dnnl::cpu_isa::avx2: isa = "avx2"; break;
    case dnnl::cpu_isa::avx512_core: isa = "avx512_core"; break;
    case dnnl::cpu_isa::avx512_core_vnni: isa = "avx512_core_vnni"; break;
    case dnnl::cpu_isa::avx512_core_bf16: isa = "avx512_core_bf16"; break;
    case dnnl::cpu_isa::avx512_core_amx: isa = "avx512_core_amx"; break;
    case dnnl::cpu_isa::avx2_vnni: isa = "avx2_vnni"; break;
    default: break;  // an ISA this list does not name keeps its value
  }
  const dnnl_version_t* v = dnnl::version();
  return fmt::format("{} | oneDNN {}.{}.{} {}", model, v->major, v->minor, v->patch, isa);
}

// Whether oneDNN creates a bf16 matmul on this CPU: not on one without AVX-512 (oneDNN 2.6 has bf16
// kernels for avx512_core and up only; ONEDNN_MAX_CPU_ISA=AVX2 shows the same on any x86 CPU).
bool bf16_matmul_available() {
  try {
    gemm_plan(GemmKey{16, 16, 16, true, false, true, false});
    return true;
  } catch (const Error&) {
    return false;
  }
}

MatmulChooser make_chooser() {
  const char* env = std::getenv(kMatmulPolicyEnv);
  const MatmulPolicy policy = env == nullptr || env[0] == '\0'
                                  ? MatmulPolicy::automatic
                                  : parse_matmul_policy(env, std::string("environment variable ") + kMatmulPolicyEnv);
  return MatmulChooser(machine_description(), default_matmul_cache_path(), policy, bf16_matmul_available());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

MatmulChooser& matmul_chooser() {
  static MatmulChooser chooser = make_chooser();  // a throw leaves it unset: the next call tries again
  return chooser;
}

namespace detail {

void gemm(float* c, const void* a, bool trans_a, const void* b, bool trans_b, int M, int N, int K, bool is_bf16,
          bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // empty sum: c = 0, or c unchanged when accumulating
    if (!accumulate)
      for (int64_t i = 0; i < int64_t(M) * N; i++) c[i] = 0.0f;
    return;
  }
  const GemmKey key{M, N, K, is_bf16, trans_a, trans_b, accumulate};
  const GemmPlan* plan = gemm_plan(key);
  Dnnl& d = dnnl_state();
  dnnl::memory a_mem(plan->a_md, d.engine, const_cast<void*>(a));
  dnnl::memory b_mem(plan->b_md, d.engine, const_cast<void*>(b));
  dnnl::memory c_mem(plan->c_md, d.engine, c);
  DnnlThread& t = dnnl_thread();
  if (plan->pad_md.get_size() > t.scratchpad.size()) {
    t.scratchpad = ArenaVector<uint8_t>();
    t.scratchpad.resize(plan->pad_md.get_size());
  }
  dnnl::memory pad_mem(plan->pad_md, d.engine, t.scratchpad.data());
  plan->prim.execute(
      t.stream,
      {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}, {DNNL_ARG_SCRATCHPAD, pad_mem}});
  t.stream.wait();
}

std::string gemm_impl(bool trans_a, bool trans_b, int M, int N, int K, bool is_bf16, bool accumulate) {
  if (M <= 0 || N <= 0 || K <= 0) return "none";
  return gemm_plan(GemmKey{M, N, K, is_bf16, trans_a, trans_b, accumulate})->impl;
}

bf16* bf16_scratch(int slot, int64_t n) { return scratch<bf16, kBf16Slots>(slot, n); }
float* f32_scratch(int slot, int64_t n) { return scratch<float, kF32Slots>(slot, n); }

const char* form_name(Bf16Operand::Form f) {
  switch (f) {
    case Bf16Operand::Form::f32: return "f32";
    case Bf16Operand::Form::bf16: return "bf16";
    case Bf16Operand::Form::f32_exact: return "f32exact";
  }
  return "?";
}

const void* OperandBatch::add(MatmulKernel k, Bf16Operand x, int64_t n, Scratch s) {
  using Form = Bf16Operand::Form;
  using Kind = OperandConversion::Kind;
  CHECK(count_ < 4, "OperandBatch: more than 4 conversions");
  if (k == MatmulKernel::bf16) {
    if (x.form == Form::bf16) return x.data;
    bf16* b = bf16_scratch(s == Scratch::act0 ? 0 : s == Scratch::act1 ? 1 : 3, n);
    jobs_[count_++] = {Kind::to_bf16, x.data, b, n};  // exact for f32_exact
    return b;
  }
  if (x.form == Form::f32_exact) return x.data;
  float* f = f32_scratch(s == Scratch::act0 ? 1 : s == Scratch::act1 ? 2 : 3, n);
  jobs_[count_++] = {x.form == Form::bf16 ? Kind::widen : Kind::round, x.data, f, n};
  return f;
}

void OperandBatch::run() {
  convert_operands(jobs_, count_);
  count_ = 0;
}

const void* kernel_operand(MatmulKernel k, Bf16Operand x, int64_t n, Scratch s) {
  OperandBatch batch;
  const void* p = batch.add(k, x, n, s);
  batch.run();
  return p;
}

void gemm_bf16_values(MatmulKernel k, float* c, Bf16Operand a, bool trans_a, const void* b_kernel, bool trans_b, int M,
                      int N, int K, bool accumulate, Scratch a_scratch) {
  if (k == MatmulKernel::bf16 && trans_a) {
    // A plain bf16 copy of a transposed A, whatever its form: oneDNN runs this gemm faster with a plain
    // A, and one layout for every form is one summation order (oneDNN's can depend on A's layout:
    // with avx512_core but not its bf16 instructions, a bf16 dout read transposed summed otherwise).
    bf16* at = bf16_scratch(2, int64_t(M) * K);  // (M,K)
    if (a.form == Bf16Operand::Form::bf16)
      detail::bf16_transpose(at, static_cast<const bf16*>(a.data), K, M);
    else
      detail::bf16_transpose_from_float(at, static_cast<const float*>(a.data), K, M);
    gemm(c, at, false, b_kernel, trans_b, M, N, K, true, accumulate);
    return;
  }
  const void* ak = kernel_operand(k, a, int64_t(M) * K, a_scratch);
  gemm(c, ak, trans_a, b_kernel, trans_b, M, N, K, k == MatmulKernel::bf16, accumulate);
}

int probe_rows(int M, int N, int K) {
  const double budget = kProbeFlopsPerThread * std::max(omp_get_max_threads(), 1);
  if (2.0 * M * N * K <= budget) return std::max(M, 1);
  const int64_t rows = int64_t(budget / (2.0 * N * K)) / 16 * 16;
  return int(std::min<int64_t>(M, std::max<int64_t>(rows, 128)));
}

GemmProbe::GemmProbe(Bf16Operand a, bool trans_a, Bf16Operand b, bool trans_b, int M, int N, int K, bool accumulate,
                     Scratch a_scratch, Scratch b_scratch, int max_rows)
    : a_(a),
      b_(b),
      trans_a_(trans_a),
      trans_b_(trans_b),
      accumulate_(accumulate),
      M_(M),
      N_(N),
      K_(K),
      Mp_(probe_rows(std::min(max_rows, M), N, K)),
      a_scratch_(a_scratch),
      b_scratch_(b_scratch) {
  const bool is_b16 = a.form == Bf16Operand::Form::bf16;
  const int64_t n = int64_t(Mp_) * K;
  c_.assign(size_t(Mp_) * N, 0.0f);
  if (a.data == nullptr) {
    // synthetic values, exact in bf16, |v| <= 1/32: (m - 128) / 4096 for m = a hash of i mod 256
    is_b16 ? a_bf16_.resize(size_t(n)) : a_f32_.resize(size_t(n));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
      const float v = float(int((uint64_t(i) * 2654435761u >> 12) & 255) - 128) * (1.0f / 4096);
      if (is_b16)
        a_bf16_[size_t(i)] = to_bf16(v);
      else
        a_f32_[size_t(i)] = v;
    }
  } else if (trans_a && Mp_ < M) {
    // the first Mp columns of a stored (K,M): a dense (K,Mp) copy
    is_b16 ? a_bf16_.resize(size_t(n)) : a_f32_.resize(size_t(n));
    for (int k = 0; k < K; k++) {
      if (is_b16)
        std::copy_n(static_cast<const bf16*>(a.data) + int64_t(k) * M, Mp_, a_bf16_.data() + int64_t(k) * Mp_);
      else
        std::copy_n(static_cast<const float*>(a.data) + int64_t(k) * M, Mp_, a_f32_.data() + int64_t(k) * Mp_);
    }
  }
  if (!a_bf16_.empty()) a_.data = a_bf16_.data();
  if (!a_f32_.empty()) a_.data = a_f32_.data();
}

double GemmProbe::seconds(MatmulKernel k, const void* b_kernel) {
  const auto t0 = std::chrono::steady_clock::now();
  const void* bk = b_kernel != nullptr ? b_kernel : kernel_operand(k, b_, int64_t(K_) * N_, b_scratch_);
  const double t_b = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  gemm_bf16_values(k, c_.data(), a_, trans_a_, bk, trans_b_, Mp_, N_, K_, accumulate_, a_scratch_);
  return t_b + seconds_since(t1) * double(M_) / Mp_;
}

namespace {
// A call that choose_kernel and known_kernel give the caller's `small` kernel without asking the
// chooser: automatic policy, a bf16 kernel to choose from, and too few flops to be worth a probe.
bool too_small_to_probe(const MatmulChooser& chooser, int M, int N, int K) {
  return chooser.bf16_available() && chooser.policy() == MatmulPolicy::automatic && 2.0 * M * N * K < kProbeMinFlops;
}
}  // namespace

MatmulKernel choose_kernel(const std::string& shape, int M, int N, int K,
                           const std::function<double(MatmulKernel)>& time_call, MatmulKernel small) {
  MatmulChooser& chooser = matmul_chooser();
  if (too_small_to_probe(chooser, M, N, K)) return small;
  const double probed = chooser.probe_seconds();
  const MatmulKernel k = chooser.choose(shape, omp_get_max_threads(), time_call);
  const bool any_f32 = std::any_of(chooser.choices().begin(), chooser.choices().end(),
                                   [](const MatmulChoice& c) { return c.kernel == MatmulKernel::f32; });
  if (chooser.probe_seconds() != probed && !any_f32)  // the probe grew scratch that nothing uses
    for (int slot = 1; slot < kF32Slots; slot++) scratch_slot<float, kF32Slots>(slot) = ArenaVector<float>();
  return k;
}

std::optional<MatmulKernel> known_kernel(const std::string& shape, int M, int N, int K, MatmulKernel small) {
  MatmulChooser& chooser = matmul_chooser();
  if (too_small_to_probe(chooser, M, N, K)) return small;
  return chooser.known(shape, omp_get_max_threads());
}

}  // namespace detail

using detail::Bf16Operand;
using detail::Scratch;

namespace {

// The suffix a call's shape key gets when its weight is held as bf16_in_f32 (none for bf16, so the
// keys cached before that form existed keep their meaning), and the kernel that reads such a weight
// without a conversion: the unprobed choice of calls too small to probe.
std::string weight_key(Bf16Operand w) { return w.form == Bf16Operand::Form::bf16 ? "" : " w=f32exact"; }
MatmulKernel unconverted_kernel(Bf16Operand w) {
  return w.form == Bf16Operand::Form::bf16 ? MatmulKernel::bf16 : MatmulKernel::f32;
}
// The key of bf16_operands_as_floats's choice.
std::string operands_shape(int M, int N, int K) { return fmt::format("operands M={} N={} K={}", M, N, K); }

}  // namespace

template <typename TI>
void matmul_forward(float* out /*(N,OC)*/, const TI* inp /*(N,IC)*/, const float* weight /*(OC,IC)*/,
                    Bf16Weight weight_bf16 /*(OC,IC)*/, int N, int IC, int OC, ComputeType ct) {
  if (ct == ComputeType::f32) {
    if constexpr (std::is_same_v<TI, float>) {
      detail::gemm(out, inp, false, weight, true, N, OC, IC, false, false);
      return;
    }
    CHECK(false, "matmul_forward: fp32 compute needs a float input");
  }
  CHECK(weight_bf16.data != nullptr, "matmul_forward: bf16 compute needs weight_bf16");
  const Bf16Operand a = detail::bf16_operand(inp), w = detail::bf16_operand(weight_bf16);
  std::optional<detail::GemmProbe> probe;
  const MatmulKernel k = detail::choose_kernel(
      fmt::format("fwd N={} IC={} OC={} inp={}{}", N, IC, OC, detail::form_name(a.form), weight_key(w)), N, OC, IC,
      [&](MatmulKernel kk) {
        if (!probe) probe.emplace(a, false, w, true, N, OC, IC, false, Scratch::act0, Scratch::weight, N);
        return probe->seconds(kk);
      },
      unconverted_kernel(w));
  detail::OperandBatch batch;
  const void* ak = batch.add(k, a, int64_t(N) * IC, Scratch::act0);     // (N,IC)
  const void* wk = batch.add(k, w, int64_t(OC) * IC, Scratch::weight);  // (OC,IC)
  batch.run();
  detail::gemm(out, ak, false, wk, true, N, OC, IC, k == MatmulKernel::bf16, false);
}

template <typename TD, typename TI>
void matmul_backward(float* dinp /*(N,IC)*/, float* dweight /*(OC,IC)*/, const TD* dout /*(N,OC)*/,
                     const TI* inp /*(N,IC)*/, const float* weight /*(OC,IC)*/, Bf16Weight weight_bf16 /*(OC,IC)*/,
                     int N, int IC, int OC, ComputeType ct) {
  if (ct == ComputeType::f32) {
    if constexpr (std::is_same_v<TD, float> && std::is_same_v<TI, float>) {
      if (dinp != nullptr) detail::gemm(dinp, dout, false, weight, false, N, IC, OC, false, false);
      if (dweight != nullptr) detail::gemm(dweight, dout, true, inp, false, OC, IC, N, false, true);
      return;
    }
    CHECK(false, "matmul_backward: fp32 compute needs float dout and inp");
  }
  CHECK(dinp == nullptr || weight_bf16.data != nullptr, "matmul_backward: bf16 compute needs weight_bf16");
  const Bf16Operand d = detail::bf16_operand(dout), in = detail::bf16_operand(inp),
                    w = detail::bf16_operand(weight_bf16);
  // Both kernels are chosen (and probed, which uses the conversion scratch) before either gemm runs.
  MatmulKernel k_dinp = MatmulKernel::bf16;
  if (dinp != nullptr) {
    std::optional<detail::GemmProbe> probe;
    k_dinp = detail::choose_kernel(
        fmt::format("dinp N={} IC={} OC={} dout={}{}", N, IC, OC, detail::form_name(d.form), weight_key(w)), N, IC, OC,
        [&](MatmulKernel kk) {
          if (!probe) probe.emplace(d, false, w, false, N, IC, OC, false, Scratch::act0, Scratch::weight, N);
          return probe->seconds(kk);
        },
        unconverted_kernel(w));
  }
  if (dweight == nullptr) {  // a frozen weight: the input gradient only
    if (dinp == nullptr) return;
    detail::OperandBatch batch;
    const void* dk = batch.add(k_dinp, d, int64_t(N) * OC, Scratch::act0);
    const void* wk = batch.add(k_dinp, w, int64_t(OC) * IC, Scratch::weight);
    batch.run();
    detail::gemm(dinp, dk, false, wk, false, N, IC, OC, k_dinp == MatmulKernel::bf16, false);
    return;
  }
  std::optional<detail::GemmProbe> probe;
  const MatmulKernel k_dw = detail::choose_kernel(
      fmt::format("dweight N={} IC={} OC={} dout={} inp={}", N, IC, OC, detail::form_name(d.form),
                  detail::form_name(in.form)),
      OC, IC, N,
      [&](MatmulKernel kk) {
        if (!probe) probe.emplace(d, true, in, false, OC, IC, N, true, Scratch::act0, Scratch::act1, OC);
        return probe->seconds(kk);
      },
      in.form == Bf16Operand::Form::f32_exact ? MatmulKernel::f32 : MatmulKernel::bf16);

  // Every conversion in one batch: dout and the weight for dinp, inp (and dout once more when the
  // kernels differ) for dweight; the fp32 kernel reads one float copy of dout for both.
  detail::OperandBatch batch;
  const void* dk = dinp != nullptr ? batch.add(k_dinp, d, int64_t(N) * OC, Scratch::act0) : nullptr;  // (N,OC)
  const void* wk = dinp != nullptr ? batch.add(k_dinp, w, int64_t(OC) * IC, Scratch::weight) : nullptr;
  const void* ik = batch.add(k_dw, in, int64_t(N) * IC, Scratch::act1);  // (N,IC)
  Bf16Operand d_dw = d;
  if (k_dw == MatmulKernel::f32)
    d_dw = {dinp != nullptr && k_dinp == MatmulKernel::f32 ? dk : batch.add(k_dw, d, int64_t(N) * OC, Scratch::act0),
            Bf16Operand::Form::f32_exact};
  batch.run();
  if (dinp != nullptr) detail::gemm(dinp, dk, false, wk, false, N, IC, OC, k_dinp == MatmulKernel::bf16, false);
  detail::gemm_bf16_values(k_dw, dweight, d_dw, true, ik, false, OC, IC, N, true, Scratch::act0);
}

std::optional<bool> bf16_operands_as_floats_known(int M, int N, int K) {
  const auto k = detail::known_kernel(operands_shape(M, N, K), M, N, K);
  if (!k) return std::nullopt;
  return *k == MatmulKernel::f32;
}

bool bf16_operands_as_floats(int M, int N, int K) {
  CHECK(M > 0 && N > 0 && K > 0);
  // Each kernel on operands in its own form, none converted: synthetic activations (the probe's) and
  // a synthetic N x K weight, bf16 for the bf16 kernel, the same values in floats for the fp32 kernel.
  ArenaVector<bf16> w_bf16;
  ArenaVector<float> w_f32;
  std::optional<detail::GemmProbe> probe[2];
  const MatmulKernel k = detail::choose_kernel(operands_shape(M, N, K), M, N, K, [&](MatmulKernel kk) {
    const bool b16 = kk == MatmulKernel::bf16;
    if (w_bf16.empty()) {
      const int64_t n = int64_t(N) * K;
      w_bf16.resize(size_t(n));
      w_f32.resize(size_t(n));
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; i++) {  // |v| <= 1/32, exact in bf16
        w_f32[size_t(i)] = float(int((uint64_t(i) * 40503u >> 7) & 255) - 128) * (1.0f / 4096);
        w_bf16[size_t(i)] = to_bf16(w_f32[size_t(i)]);
      }
    }
    const Bf16Operand::Form form = b16 ? Bf16Operand::Form::bf16 : Bf16Operand::Form::f32_exact;
    const void* wk = b16 ? static_cast<const void*>(w_bf16.data()) : w_f32.data();
    if (!probe[b16])
      probe[b16].emplace(Bf16Operand{nullptr, form}, false, Bf16Operand{wk, form}, true, M, N, K, false, Scratch::act0,
                         Scratch::weight, M);
    return probe[b16]->seconds(kk, wk);
  });
  return k == MatmulKernel::f32;
}

LLAMATRAIN_CPU_FOR_EACH_OPERAND(LLAMATRAIN_CPU_INSTANTIATE_MATMUL_FORWARD)
LLAMATRAIN_CPU_FOR_EACH_OPERAND_PAIR(LLAMATRAIN_CPU_INSTANTIATE_MATMUL_BACKWARD)

}  // namespace llamatrain::cpu
