// The cuda:: kernels against their ref:: (or cpu::) twins on fresh random inputs at awkward sizes:
// relative error ||got - want|| / ||want|| far under 1e-3 in fp32 and within 1e-2 with bf16
// operands; every output is poisoned with NaN before the run, so an element left unwritten fails, and
// a NaN never passes. bf16-sr must give the CPU's bits exactly. Without a GPU (no driver, no device,
// or a build without CUDA) each device test skips with "needs an NVIDIA GPU: " and
// cuda::no_device_reason() (scripts/skipped_tests.sh lists those apart, as not for this machine);
// the runtime's own no-device answers are checked then instead.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "kernels/ref/ops.h"
#include "test_util.h"

namespace llamatrain {
namespace {

using testing::mt19937_normal;

#define SKIP_WITHOUT_DEVICE() \
  if (cuda::device_count() == 0) GTEST_SKIP() << "needs an NVIDIA GPU: " << cuda::no_device_reason()

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Tolerances on ||got - want|| / ||want||, from the fp32 rounding each kind of kernel leaves:
constexpr double kElementwise = 2e-6;   // a few fp32 operations per element (or an ulp of libm's)
constexpr double kSums = 1e-5;          // fp32 sums in another order (atomics, reductions)
constexpr double kGemm = 3e-5;          // fp32 dot products of up to ~4k terms
constexpr double kLongGemm = 1e-4;      // ... of 50k terms (the lm head's dx over the vocabulary)
constexpr double kBf16Values = 4e-3;    // outputs rounded to bf16 (2^-9 relative each)
constexpr double kBf16Operands = 1e-2;  // bf16 operands against the unrounded fp32 result

// A device array of n T, freed at scope exit.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n), p_(static_cast<T*>(cuda::device_alloc(std::max<size_t>(n, 1) * sizeof(T)))) {}
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cuda::device_free(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return p_; }
  void upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), n_);
    cuda::copy_to_device(p_, host.data(), n_ * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    cuda::copy_to_host(host.data(), p_, n_ * sizeof(T));
    return host;
  }
  // Every element NaN (a bf16 NaN for bf16), so an element the kernel leaves alone fails its check.
  void poison() {
    std::vector<T> nan(n_);
    if constexpr (std::is_same_v<T, bf16>)
      for (auto& x : nan) x.bits = 0x7fc1;
    else if constexpr (std::is_same_v<T, bf16_in_f32>)
      for (auto& x : nan) x.value = kNaN;
    else
      for (auto& x : nan) x = T(kNaN);
    upload(nan);
  }

 private:
  size_t n_;
  T* p_;
};

std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = to_float(v[i]);
  return r;
}
std::vector<float> widen(const std::vector<bf16_in_f32>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = v[i].value;
  return r;
}
std::vector<float> widen(const std::vector<float>& v) { return v; }

// ||got - want|| / ||want|| in fp64; infinity when got has a NaN or inf or the sizes differ.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); i++) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

::testing::AssertionResult close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                                 double tol) {
  const double e = relative_error(got, want);
  if (e <= tol) return ::testing::AssertionSuccess();
  size_t nonfinite = 0;
  for (float g : got) nonfinite += !std::isfinite(g);
  return ::testing::AssertionFailure() << what << ": relative error " << e << " > " << tol << " (" << nonfinite
                                       << " of " << got.size() << " values not finite)";
}

TEST(CudaRuntime, DeviceCountAndReasonAgree) {
  const int n = cuda::device_count();
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(cuda::no_device_reason().empty());
    EXPECT_FALSE(cuda::available());
    EXPECT_THROW(cuda::device_alloc(16), Error) << "without a device an allocation must throw, not crash";
    EXPECT_THROW(cuda::fill_constant(nullptr, 4, 1.0f), Error) << "and so must a kernel launch";
    EXPECT_THROW(cuda::synchronize(), Error);
    return;
  }
  EXPECT_TRUE(cuda::available());
  EXPECT_EQ(cuda::no_device_reason(), "");
  EXPECT_FALSE(cuda::device_name().empty());
}

TEST(CudaRuntime, CopiesFillAndErrors) {
  SKIP_WITHOUT_DEVICE();
  const auto host = mt19937_normal(1001, 1);
  DeviceArray<float> a(host), b(host.size());
  b.poison();
  cuda::copy_device(b.get(), a.get(), host.size() * sizeof(float));
  EXPECT_EQ(b.download(), host);
  cuda::fill_zero(b.get(), 10 * sizeof(float));
  auto z = b.download();
  for (int i = 0; i < 10; i++) EXPECT_EQ(z[size_t(i)], 0.0f);
  EXPECT_EQ(z[10], host[10]);
  cuda::synchronize();
  EXPECT_NE(cuda::stream(), nullptr);
  EXPECT_THROW(cuda::device_alloc(size_t(1) << 62), Error);  // 4 EiB: out of memory, as an Error
}

TEST(CudaRuntime, NcclOnOneRank) {
  // A group of one: the sum is the array itself, the gather leaves it in place. (Several ranks: the
  // data-parallel runs of tests/train/cuda_train_test.cpp, through the emulation's NCCL over MPI.)
  SKIP_WITHOUT_DEVICE();
  if (cuda::nccl_version().empty()) GTEST_SKIP() << "needs NCCL: llamatrain was built without it";
  std::vector<unsigned char> id(cuda::kNcclIdBytes);
  cuda::nccl_unique_id(id.data());
  void* comm = cuda::nccl_init(id.data(), 1, 0);
  const auto host = mt19937_normal(1000, 7);
  DeviceArray<float> a(host);
  cuda::nccl_all_reduce_sum(comm, a.get(), int64_t(host.size()));
  EXPECT_EQ(a.download(), host);
  cuda::nccl_all_gather(comm, a.get(), int64_t(host.size()));
  EXPECT_EQ(a.download(), host);
  cuda::scale(a.get(), int64_t(host.size()), 0.5f);
  auto halves = host;
  for (float& x : halves) x *= 0.5f;
  EXPECT_EQ(a.download(), halves);
  cuda::nccl_destroy(comm);
}

TEST(CudaVsRef, Embedding) {
  SKIP_WITHOUT_DEVICE();
  for (const auto& [N, C, V] : std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {1037, 97, 1000}, {300, 128, 7}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " V=" << V);
    const auto tokens = testing::philox_tokens(size_t(N), V, 3, 1);  // V = 7: many repeats
    const auto wte = mt19937_normal(size_t(V) * C, 2), dout = mt19937_normal(size_t(N) * C, 3);
    std::vector<float> want(size_t(N) * C), dwant = mt19937_normal(size_t(V) * C, 4);
    const auto dwte0 = dwant;
    ref::embedding_forward(want.data(), tokens.data(), wte.data(), N, C);
    ref::embedding_backward(dwant.data(), dout.data(), tokens.data(), N, C);
    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<float> d_wte(wte), d_out(size_t(N) * C), d_dout(dout), d_dwte(dwte0);
    d_out.poison();
    cuda::embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), N, C);
    cuda::embedding_backward(d_dwte.get(), d_dout.get(), d_tokens.get(), N, C);
    EXPECT_EQ(d_out.download(), want) << "a row gather is exact";
    EXPECT_TRUE(close("dwte (accumulated)", d_dwte.download(), dwant, kSums));
  }
}

template <typename T>
void check_rmsnorm(int N, int C) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " out bytes " << sizeof(T));
  const auto x = mt19937_normal(size_t(N) * C, 10, 2.0f), w = mt19937_normal(size_t(C), 11);
  const auto dout = mt19937_normal(size_t(N) * C, 12);
  const float eps = 1e-5f;
  std::vector<float> want(size_t(N) * C), rstd(static_cast<size_t>(N));
  ref::rmsnorm_forward(want.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  if constexpr (!std::is_same_v<T, float>) want = testing::bf16_rounded(want);
  DeviceArray<float> d_x(x), d_w(w), d_rstd(static_cast<size_t>(N));
  DeviceArray<T> d_out(size_t(N) * C);
  d_out.poison();
  d_rstd.poison();
  cuda::rmsnorm_forward(d_out.get(), d_rstd.get(), d_x.get(), d_w.get(), N, C, eps);
  // bf16 outputs: the fp32 result rounded, so at most one bf16 ulp (2^-8 relative) from ref's rounding.
  EXPECT_TRUE(
      close("rmsnorm out", widen(d_out.download()), want, std::is_same_v<T, float> ? kElementwise : kBf16Values));
  EXPECT_TRUE(close("rstd", d_rstd.download(), rstd, kElementwise));
  if constexpr (std::is_same_v<T, float>) {
    // Backward, accumulating: dx and dweight start from nonzero values.
    std::vector<float> dx = mt19937_normal(size_t(N) * C, 13), dw = mt19937_normal(size_t(C), 14);
    const auto dx0 = dx, dw0 = dw;
    ref::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    DeviceArray<float> d_dx(dx0), d_dw(dw0), d_dout(dout), d_rstd_ref(rstd);
    cuda::rmsnorm_backward(d_dx.get(), d_dw.get(), d_dout.get(), d_x.get(), d_w.get(), d_rstd_ref.get(), N, C);
    EXPECT_TRUE(close("rmsnorm dx (+=)", d_dx.download(), dx, kSums));
    EXPECT_TRUE(close("rmsnorm dweight (+=)", d_dw.download(), dw, kSums));
    // A frozen weight: dweight nullptr, dx the same.
    DeviceArray<float> d_dx2(dx0);
    cuda::rmsnorm_backward(d_dx2.get(), nullptr, d_dout.get(), d_x.get(), d_w.get(), d_rstd_ref.get(), N, C);
    EXPECT_TRUE(close("rmsnorm dx without dweight", d_dx2.download(), dx, kSums));
  }
}

TEST(CudaVsRef, Rmsnorm) {
  SKIP_WITHOUT_DEVICE();
  // Widths that move 4 at a time (288, 8192) and one at a time (1, 4095); 1031 and 4099 rows split the
  // weight gradient's rows into many chunks, the last one short.
  for (const auto& [N, C] : std::vector<std::pair<int, int>>{{1, 1}, {17, 4095}, {1031, 288}, {5, 8192}, {4099, 64}}) {
    check_rmsnorm<float>(N, C);
    check_rmsnorm<bf16>(N, C);
    check_rmsnorm<bf16_in_f32>(N, C);
  }
}

// The residual add fused with the next norm: resid exactly a + b, the norm as rmsnorm_forward of it;
// `offset` floats into the arrays make the bases unaligned (the one-at-a-time path at any width).
template <typename T>
void check_residual_rmsnorm(int N, int C, int offset) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " offset " << offset << " out bytes " << sizeof(T));
  const size_t n = size_t(N) * C;
  const auto a = mt19937_normal(n + offset, 15, 2.0f), b = mt19937_normal(n + offset, 16),
             w = mt19937_normal(size_t(C), 17);
  const float eps = 1e-6f;
  std::vector<float> sum(n), want(n), rstd(static_cast<size_t>(N));
  ref::residual_forward(sum.data(), a.data() + offset, b.data() + offset, int64_t(n));
  ref::rmsnorm_forward(want.data(), rstd.data(), sum.data(), w.data(), N, C, eps);
  if constexpr (!std::is_same_v<T, float>) want = testing::bf16_rounded(want);
  DeviceArray<float> d_a(a), d_b(b), d_w(w), d_resid(n + offset), d_rstd(static_cast<size_t>(N));
  DeviceArray<T> d_out(n + offset);
  d_resid.poison();
  d_out.poison();
  d_rstd.poison();
  cuda::residual_rmsnorm_forward(d_resid.get() + offset, d_out.get() + offset, d_rstd.get(), d_a.get() + offset,
                                 d_b.get() + offset, d_w.get(), N, C, eps);
  const auto resid = d_resid.download();
  EXPECT_EQ(std::vector<float>(resid.begin() + offset, resid.end()), sum) << "one fp32 add per element is exact";
  const auto out = widen(d_out.download());
  EXPECT_TRUE(close("residual_rmsnorm out", std::vector<float>(out.begin() + offset, out.end()), want,
                    std::is_same_v<T, float> ? kElementwise : kBf16Values));
  EXPECT_TRUE(close("residual_rmsnorm rstd", d_rstd.download(), rstd, kElementwise));
  // In place (resid is a), as rmsnorm_forward of the sum.
  DeviceArray<float> d_x(a);
  cuda::residual_rmsnorm_forward(d_x.get() + offset, d_out.get() + offset, d_rstd.get(), d_x.get() + offset,
                                 d_b.get() + offset, d_w.get(), N, C, eps);
  const auto x = d_x.download();
  EXPECT_EQ(std::vector<float>(x.begin() + offset, x.end()), sum);
}

TEST(CudaVsRef, ResidualAddFusedWithTheNorm) {
  SKIP_WITHOUT_DEVICE();
  for (const auto& [N, C, offset] :
       std::vector<std::tuple<int, int, int>>{{1, 1, 0}, {33, 4095, 0}, {65, 512, 0}, {7, 512, 1}, {3, 8192, 2}}) {
    check_residual_rmsnorm<float>(N, C, offset);
    check_residual_rmsnorm<bf16>(N, C, offset);
    check_residual_rmsnorm<bf16_in_f32>(N, C, offset);
  }
}

// The matmul pair against ref on the operands' values (for bf16: the bf16-rounded values, so the only
// difference left is fp32 summation order) and against the unrounded fp32 reference within 1e-2.
template <typename TD, typename TI>
void check_matmul(int N, int IC, int OC, cuda::ComputeType ct, bool weight_as_floats) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " IC=" << IC << " OC=" << OC
                                    << " bf16=" << (ct == cuda::ComputeType::bf16) << " TD bytes " << sizeof(TD)
                                    << " TI bytes " << sizeof(TI) << " weight as floats " << weight_as_floats);
  const bool b16 = ct == cuda::ComputeType::bf16;
  auto inp = mt19937_normal(size_t(N) * IC, 20), w = mt19937_normal(size_t(OC) * IC, 21, 0.05f);
  auto dout = mt19937_normal(size_t(N) * OC, 22);
  const auto inp_r = b16 ? testing::bf16_rounded(inp) : inp, w_r = b16 ? testing::bf16_rounded(w) : w;
  const auto dout_r = b16 ? testing::bf16_rounded(dout) : dout;
  std::vector<float> out(size_t(N) * OC), out_exact(size_t(N) * OC), dinp(size_t(N) * IC);
  std::vector<float> dw = mt19937_normal(size_t(OC) * IC, 23, 0.1f);
  const auto dw0 = dw;
  ref::matmul_forward(out.data(), inp_r.data(), w_r.data(), N, IC, OC);
  ref::matmul_forward(out_exact.data(), inp.data(), w.data(), N, IC, OC);
  ref::matmul_backward(dinp.data(), dw.data(), dout_r.data(), inp_r.data(), w_r.data(), N, IC, OC);
  // Device operands in their types: TI / TD hold the (rounded, for non-float types) values.
  auto as = [](const std::vector<float>& v, auto tag) {
    using T = decltype(tag);
    std::vector<T> r(v.size());
    for (size_t i = 0; i < v.size(); i++) {
      if constexpr (std::is_same_v<T, float>) r[i] = v[i];
      if constexpr (std::is_same_v<T, bf16>) r[i] = to_bf16(v[i]);
      if constexpr (std::is_same_v<T, bf16_in_f32>) r[i].value = to_float(to_bf16(v[i]));
    }
    return r;
  };
  DeviceArray<TI> d_inp(as(inp, TI{}));
  DeviceArray<TD> d_dout(as(dout, TD{}));
  DeviceArray<float> d_w(w), d_wr(w_r), d_out(size_t(N) * OC), d_dinp(size_t(N) * IC), d_dw(dw0);
  DeviceArray<bf16> d_wb(testing::to_bf16_vector(w));
  cuda::Bf16Weight wb = !b16               ? cuda::Bf16Weight()
                        : weight_as_floats ? cuda::Bf16Weight::rounded_floats(d_wr.get())
                                           : cuda::Bf16Weight(d_wb.get());
  d_out.poison();
  d_dinp.poison();
  cuda::matmul_forward(d_out.get(), d_inp.get(), d_w.get(), wb, N, IC, OC, ct);
  cuda::matmul_backward(d_dinp.get(), d_dw.get(), d_dout.get(), d_inp.get(), d_w.get(), wb, N, IC, OC, ct);
  const auto got = d_out.download();
  EXPECT_TRUE(close("matmul out", got, out, kGemm));
  EXPECT_TRUE(close("matmul out vs the fp32 product", got, out_exact, b16 ? kBf16Operands : kGemm));
  EXPECT_TRUE(close("matmul dinp", d_dinp.download(), dinp, kGemm));
  EXPECT_TRUE(close("matmul dweight (+=)", d_dw.download(), dw, kGemm));
  // dinp skipped (nullptr): dweight alone; dweight skipped: dinp alone.
  DeviceArray<float> d_dw2(dw0), d_dinp2(size_t(N) * IC);
  cuda::matmul_backward(static_cast<float*>(nullptr), d_dw2.get(), d_dout.get(), d_inp.get(), d_w.get(), wb, N, IC, OC,
                        ct);
  EXPECT_TRUE(close("matmul dweight without dinp", d_dw2.download(), dw, kGemm));
  d_dinp2.poison();
  cuda::matmul_backward(d_dinp2.get(), nullptr, d_dout.get(), d_inp.get(), d_w.get(), wb, N, IC, OC, ct);
  EXPECT_TRUE(close("matmul dinp without dweight", d_dinp2.download(), dinp, kGemm));
}

TEST(CudaVsRef, MatmulFp32) {
  SKIP_WITHOUT_DEVICE();
  for (const auto& [N, IC, OC] : std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {1031, 257, 383}, {7, 4096, 3}})
    check_matmul<float, float>(N, IC, OC, cuda::ComputeType::f32, false);
}

TEST(CudaVsRef, MatmulBf16) {
  SKIP_WITHOUT_DEVICE();
  using CT = cuda::ComputeType;
  for (const auto& [N, IC, OC] : std::vector<std::tuple<int, int, int>>{{1, 8, 8}, {1031, 256, 384}, {33, 1000, 77}}) {
    check_matmul<float, float>(N, IC, OC, CT::bf16, false);
    check_matmul<bf16, bf16>(N, IC, OC, CT::bf16, false);
    check_matmul<bf16_in_f32, bf16_in_f32>(N, IC, OC, CT::bf16, false);
    check_matmul<float, bf16>(N, IC, OC, CT::bf16, false);
    check_matmul<bf16, float>(N, IC, OC, CT::bf16, true);
    check_matmul<bf16_in_f32, float>(N, IC, OC, CT::bf16, true);
  }
}

TEST(CudaVsCpu, Rope) {
  SKIP_WITHOUT_DEVICE();
  // Packed qkv rows: H = 8 q heads and Hkv = 2 k heads rotated, the 2 v heads left alone.
  for (const auto& [N, D, theta] :
       std::vector<std::tuple<int, int, float>>{{1, 2, 10000.0f}, {301, 64, 10000.0f}, {77, 128, 500000.0f}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " D=" << D << " theta=" << theta);
    const int H = 8, Hkv = 2, stride = (H + 2 * Hkv) * D;
    std::vector<int32_t> pos(static_cast<size_t>(N));
    for (int n = 0; n < N; n++) pos[size_t(n)] = (n * 37) % 4099;
    const auto x = mt19937_normal(size_t(N) * stride, 30);
    auto fwd = x, bwd = x, bwd_round = x;
    cpu::rope_forward(fwd.data(), pos.data(), N, H + Hkv, stride, D, theta);
    cpu::rope_backward(bwd.data(), pos.data(), N, H + Hkv, stride, D, theta);
    cpu::rope_backward(bwd_round.data(), pos.data(), N, H + Hkv, stride, D, theta, true);
    DeviceArray<int32_t> d_pos(pos);
    DeviceArray<float> d_f(x), d_b(x), d_r(x);
    cuda::rope_forward(d_f.get(), d_pos.get(), N, H + Hkv, stride, D, theta);
    cuda::rope_backward(d_b.get(), d_pos.get(), N, H + Hkv, stride, D, theta);
    cuda::rope_backward(d_r.get(), d_pos.get(), N, H + Hkv, stride, D, theta, true);
    const auto f = d_f.download(), b = d_b.download(), r = d_r.download();
    EXPECT_TRUE(close("rope forward", f, fwd, kElementwise));
    EXPECT_TRUE(close("rope backward", b, bwd, kElementwise));
    EXPECT_TRUE(close("rope backward, rows rounded", r, bwd_round, kBf16Values));
    for (size_t i = 0; i < r.size(); i++)
      ASSERT_EQ(to_float(to_bf16(r[i])), r[i]) << "element " << i << " not a bf16 value";
    // The v heads are not touched.
    for (int n = 0; n < N; n++)
      for (int i = (H + Hkv) * D; i < stride; i++) ASSERT_EQ(f[size_t(n) * stride + i], x[size_t(n) * stride + i]);
  }
}

// RoPE's cos/sin table lasts while its shape does: a call with fewer tokens reuses it, other
// frequencies or head dims rebuild it, more tokens grow it; positions past it compute their own.
TEST(CudaVsCpu, RopeTableFollowsItsShape) {
  SKIP_WITHOUT_DEVICE();
  struct Call {
    int N, D;
    float theta;
    int max_pos;
  };
  for (const Call& c : std::vector<Call>{{300, 64, 10000.0f, 300},
                                         {10, 64, 10000.0f, 300},
                                         {10, 64, 500000.0f, 300},
                                         {500, 64, 500000.0f, 500},
                                         {40, 128, 500000.0f, 40},
                                         {3, 64, 10000.0f, 70000}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " D=" << c.D << " theta=" << c.theta);
    const int H = 2, Hkv = 1, stride = (H + 2 * Hkv) * c.D;
    std::vector<int32_t> pos(static_cast<size_t>(c.N));
    for (int n = 0; n < c.N; n++) pos[size_t(n)] = (n * 7919) % c.max_pos;
    const auto x = mt19937_normal(size_t(c.N) * stride, 31);
    auto want = x;
    cpu::rope_forward(want.data(), pos.data(), c.N, H + Hkv, stride, c.D, c.theta);
    DeviceArray<int32_t> d_pos(pos);
    DeviceArray<float> d_x(x);
    cuda::rope_forward(d_x.get(), d_pos.get(), c.N, H + Hkv, stride, c.D, c.theta);
    EXPECT_TRUE(close("rope forward", d_x.download(), want, kElementwise));
  }
}

TEST(CudaVsCpu, RopeLlama3Scaling) {
  SKIP_WITHOUT_DEVICE();
  RopeFreqs r(500000.0f);
  r.llama3 = true;
  r.factor = 8.0f;
  r.original_max_pos = 64;
  const int N = 90, H = 4, Hkv = 2, D = 64, stride = (H + 2 * Hkv) * D;
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int n = 0; n < N; n++) pos[size_t(n)] = (n * 37) % 300;
  const auto x = mt19937_normal(size_t(N) * stride, 33);
  auto fwd = x, bwd = x;
  cpu::rope_forward(fwd.data(), pos.data(), N, H + Hkv, stride, D, r);
  cpu::rope_backward(bwd.data(), pos.data(), N, H + Hkv, stride, D, r);
  DeviceArray<int32_t> d_pos(pos);
  DeviceArray<float> d_f(x), d_b(x);
  cuda::rope_forward(d_f.get(), d_pos.get(), N, H + Hkv, stride, D, r);
  cuda::rope_backward(d_b.get(), d_pos.get(), N, H + Hkv, stride, D, r);
  EXPECT_TRUE(close("rope llama3 forward", d_f.download(), fwd, kElementwise));
  EXPECT_TRUE(close("rope llama3 backward", d_b.download(), bwd, kElementwise));
}

TEST(CudaVsCpu, Bias) {
  SKIP_WITHOUT_DEVICE();
  for (const auto& [N, C] : std::vector<std::pair<int, int>>{{1, 1}, {17, 107}, {300, 513}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C);
    const auto x = mt19937_normal(size_t(N) * C, 34), bias = mt19937_normal(size_t(C), 35);
    const auto db0 = mt19937_normal(size_t(C), 36);
    auto fwd = x, db = db0;
    cpu::bias_forward(fwd.data(), bias.data(), N, C);
    cpu::bias_backward(db.data(), x.data(), N, C);
    DeviceArray<float> d_x(x), d_bias(bias), d_db(db0);
    cuda::bias_forward(d_x.get(), d_bias.get(), N, C);
    cuda::bias_backward(d_db.get(), d_x.get(), N, C);  // d_x now holds x + bias: compare on the same input
    auto db_want = db0;
    cpu::bias_backward(db_want.data(), fwd.data(), N, C);
    EXPECT_TRUE(close("bias forward", d_x.download(), fwd, kElementwise));
    EXPECT_TRUE(close("bias backward", d_db.download(), db_want, kElementwise));
  }
}

TEST(CudaVsRef, VocabParallelEmbedding) {
  SKIP_WITHOUT_DEVICE();
  for (const auto& [N, C, V, begin] :
       std::vector<std::tuple<int, int, int, int64_t>>{{1, 1, 1, 0}, {1037, 97, 31, 31}, {300, 128, 64, 16}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " V=" << V << " begin=" << begin);
    std::vector<int32_t> tokens(static_cast<size_t>(N));
    for (int n = 0; n < N; n++)
      tokens[size_t(n)] = int32_t((n * 7919 + 13) % int(begin + V + 20));  // in and out of range
    const auto wte = mt19937_normal(size_t(V) * C, 111), dout = mt19937_normal(size_t(N) * C, 112);
    std::vector<float> want(size_t(N) * C), dwant = mt19937_normal(size_t(V) * C, 113);
    const auto dwte0 = dwant;
    ref::vocab_parallel_embedding_forward(want.data(), tokens.data(), wte.data(), begin, V, N, C);
    ref::vocab_parallel_embedding_backward(dwant.data(), dout.data(), tokens.data(), begin, V, N, C);
    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<float> d_wte(wte), d_out(want.size()), d_dout(dout), d_dwte(dwte0);
    d_out.poison();
    cuda::vocab_parallel_embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), begin, V, N, C);
    cuda::vocab_parallel_embedding_backward(d_dwte.get(), d_dout.get(), d_tokens.get(), begin, V, N, C);
    EXPECT_EQ(d_out.download(), want) << "a masked row gather is exact";
    EXPECT_TRUE(close("dwte (accumulated, rows in range only)", d_dwte.download(), dwant, kSums));
  }
}

TEST(CudaVsRef, VocabParallelCrossEntropy) {
  SKIP_WITHOUT_DEVICE();
  for (const auto& [N, V, P] :
       std::vector<std::tuple<int, int, int>>{{1, 3, 1}, {17, 40, 2}, {127, 5011, 3}, {5, 0, 2}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " V=" << V << " P=" << P);
    const int64_t begin = V;  // the second part of the vocabulary
    const auto logits = mt19937_normal(size_t(N) * V, 121, 4.0f);
    auto maxima = mt19937_normal(size_t(P) * N, 122, 4.0f);  // the other ranks' maxima
    std::vector<int32_t> targets(static_cast<size_t>(N));
    for (int n = 0; n < N; n++) targets[size_t(n)] = n % 5 == 0 ? -100 : int32_t((n * 31) % (3 * std::max(V, 1)));
    std::vector<float> ref_max(static_cast<size_t>(N));
    ref::vocab_parallel_ce_max(ref_max.data(), logits.data(), N, V);
    DeviceArray<float> d_logits(logits), d_max(static_cast<size_t>(N));
    d_max.poison();
    cuda::vocab_parallel_ce_max(d_max.get(), d_logits.get(), N, V);
    EXPECT_EQ(d_max.download(), ref_max);
    std::copy(ref_max.begin(), ref_max.end(), maxima.begin() + (P > 1 ? N : 0));  // this rank's row
    std::vector<float> ref_e = logits, ref_p(2 * size_t(N)), ref_g(static_cast<size_t>(N));
    ref::vocab_parallel_ce_partials(ref_p.data(), ref_g.data(), ref_e.data(), maxima.data(), P, targets.data(), begin,
                                    N, V);
    DeviceArray<float> d_maxima(maxima), d_p(2 * size_t(N)), d_g(static_cast<size_t>(N));
    DeviceArray<int32_t> d_t(targets);
    d_p.poison();
    d_g.poison();
    cuda::vocab_parallel_ce_partials(d_p.get(), d_g.get(), d_logits.get(), d_maxima.get(), P, d_t.get(), begin, N, V);
    EXPECT_EQ(d_g.download(), ref_g);
    EXPECT_TRUE(close("exp(logit - max)", d_logits.download(), ref_e, kElementwise));
    EXPECT_TRUE(close("partials", d_p.download(), ref_p, kSums));
    std::vector<float> ref_l(static_cast<size_t>(N));
    ref::vocab_parallel_ce_forward(ref_l.data(), ref_g.data(), ref_p.data(), targets.data(), N);
    DeviceArray<float> d_rp(ref_p), d_rg(ref_g), d_l(static_cast<size_t>(N));
    d_l.poison();
    cuda::vocab_parallel_ce_forward(d_l.get(), d_rg.get(), d_rp.get(), d_t.get(), N);
    if (V > 0) {  // V = 0: this rank's sum is 0, a loss only after the sum over the ranks
      EXPECT_TRUE(close("losses", d_l.download(), ref_l, kElementwise));
    }
    for (bool bf16_values : {false, true}) {
      std::vector<float> rd = ref_e;
      ref::vocab_parallel_ce_backward(rd.data(), ref_p.data(), targets.data(), begin, 0.125f, N, V, bf16_values);
      DeviceArray<float> d_e(ref_e);
      cuda::vocab_parallel_ce_backward(d_e.get(), d_rp.get(), d_t.get(), begin, 0.125f, N, V, bf16_values);
      EXPECT_TRUE(close(bf16_values ? "dlogits as bf16 values" : "dlogits", d_e.download(), rd,
                        bf16_values ? kBf16Values : kElementwise));
    }
  }
}

TEST(CudaVsRef, AttentionDecode) {
  SKIP_WITHOUT_DEVICE();
  for (const auto& [pos, H, Hkv, D] :
       std::vector<std::tuple<int, int, int, int>>{{0, 1, 1, 64}, {76, 8, 2, 64}, {300, 4, 1, 128}}) {
    SCOPED_TRACE(::testing::Message() << "pos=" << pos << " H=" << H << " Hkv=" << Hkv << " D=" << D);
    const int64_t KV = 2 * int64_t(Hkv) * D;
    const auto q = mt19937_normal(size_t(H) * D, 131), cache = mt19937_normal(size_t(pos + 1) * KV, 132);
    std::vector<float> out(size_t(H) * D), scores(size_t(H) * (pos + 1));
    ref::attention_decode(out.data(), scores.data(), q.data(), cache.data(), pos, H, Hkv, D);
    DeviceArray<float> d_q(q), d_cache(cache), d_out(out.size()), d_scores(scores.size());
    d_out.poison();
    cuda::attention_decode(d_out.get(), d_scores.get(), d_q.get(), d_cache.get(), pos, H, Hkv, D);
    EXPECT_TRUE(close("decode out", d_out.download(), out, kGemm));
    EXPECT_TRUE(close("decode scores", d_scores.download(), scores, kSums));
  }
  EXPECT_FALSE(cuda::bf16_operands_as_floats(4096, 4096, 4096));
  EXPECT_EQ(cuda::bf16_operands_as_floats_known(4096, 4096, 4096), std::optional<bool>(false));
}

// dq, dk and dv of a (B*T, W) dqkv each (a wrong part could hide in the whole's norm).
void expect_parts_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                        int64_t rows, int H, int Hkv, int D, double tolerance) {
  const int64_t W = int64_t(H + 2 * Hkv) * D;
  for (const auto& [name, begin, end] : std::vector<std::tuple<const char*, int64_t, int64_t>>{
           {"dq", 0, int64_t(H) * D}, {"dk", int64_t(H) * D, int64_t(H + Hkv) * D}, {"dv", int64_t(H + Hkv) * D, W}}) {
    std::vector<float> g, w;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t i = begin; i < end; i++) {
        g.push_back(got[size_t(r * W + i)]);
        w.push_back(want[size_t(r * W + i)]);
      }
    EXPECT_TRUE(close(what + " " + name, g, w, tolerance));
  }
}

void check_attention(int B, int T, int H, int Hkv, int D, int window = 0) {
  SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << T << " H=" << H << " Hkv=" << Hkv << " D=" << D
                                    << " window=" << window);
  const int64_t W = int64_t(H + 2 * Hkv) * D;
  const auto qkv = mt19937_normal(size_t(B) * T * W, 40);
  const auto dout = mt19937_normal(size_t(B) * T * H * D, 41);
  std::vector<float> out(size_t(B) * T * H * D), lse(size_t(B) * H * T), dqkv(qkv.size());
  ref::attention_forward(out.data(), lse.data(), qkv.data(), B, T, H, Hkv, D, window);
  ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, H, Hkv, D, window);
  DeviceArray<float> d_qkv(qkv), d_out(out.size()), d_lse(lse.size()), d_dout(dout), d_dqkv(qkv.size());
  d_out.poison();
  d_lse.poison();
  d_dqkv.poison();
  cuda::attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, H, Hkv, D, window);
  const auto got_out = d_out.download();
  EXPECT_TRUE(close("attention out", got_out, out, kGemm));
  EXPECT_TRUE(close("attention lse", d_lse.download(), lse, kSums));
  cuda::attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), B, T, H, Hkv, D, window);
  const auto got = d_dqkv.download();
  EXPECT_TRUE(close("attention dqkv", got, dqkv, kGemm));
  expect_parts_close("attention", got, dqkv, int64_t(B) * T, H, Hkv, D, kGemm);
}

std::vector<float> bf16_rounded(std::vector<float> v) {
  for (float& x : v) x = to_float(to_bf16(x));
  return v;
}

struct AttentionResult {
  std::vector<float> out, lse, dqkv;
};

// ref:: attention of each document on its own (doc_start per token of each sequence; nullptr: one
// document per sequence): what a document mask must give on the packed sequence.
AttentionResult reference_by_document(const std::vector<float>& qkv, const std::vector<float>& dout,
                                      const std::vector<int32_t>* doc_start, int B, int T, int H, int Hkv, int D,
                                      int window) {
  const int64_t W = int64_t(H + 2 * Hkv) * D, HD = int64_t(H) * D;
  AttentionResult r{std::vector<float>(size_t(B) * T * HD), std::vector<float>(size_t(B) * H * T),
                    std::vector<float>(qkv.size())};
  for (int b = 0; b < B; b++)
    for (int s = 0; s < T;) {
      int e = s + 1;
      while (doc_start != nullptr && e < T && (*doc_start)[size_t(b * T + e)] == s) e++;
      if (doc_start == nullptr) e = T;
      const int n = e - s;
      const size_t first = size_t(b) * T + size_t(s);
      std::vector<float> q(qkv.begin() + int64_t(first) * W, qkv.begin() + int64_t(first + n) * W);
      std::vector<float> d(dout.begin() + int64_t(first) * HD, dout.begin() + int64_t(first + n) * HD);
      std::vector<float> out(size_t(n) * HD), lse(size_t(H) * n), dq(q.size());
      ref::attention_forward(out.data(), lse.data(), q.data(), 1, n, H, Hkv, D, window);
      ref::attention_backward(dq.data(), d.data(), q.data(), out.data(), lse.data(), 1, n, H, Hkv, D, window);
      std::copy(out.begin(), out.end(), r.out.begin() + int64_t(first) * HD);
      std::copy(dq.begin(), dq.end(), r.dqkv.begin() + int64_t(first) * W);
      for (int h = 0; h < H; h++)
        for (int i = 0; i < n; i++) r.lse[(size_t(b) * H + h) * T + size_t(s + i)] = lse[size_t(h) * n + i];
      s = e;
    }
  return r;
}

// cuda::attention_* (flash: the tensor-core kernels) on the device, with outputs poisoned first.
AttentionResult run_cuda_attention(bool flash, const std::vector<float>& qkv, const std::vector<float>& dout,
                                   const std::vector<int32_t>* doc_start, int B, int T, int H, int Hkv, int D,
                                   int window) {
  DeviceArray<float> d_qkv(qkv), d_out(size_t(B) * T * H * D), d_lse(size_t(B) * H * T), d_dout(dout),
      d_dqkv(qkv.size());
  DeviceArray<int32_t> d_doc(doc_start != nullptr ? *doc_start : std::vector<int32_t>{});
  const int32_t* doc = doc_start != nullptr ? d_doc.get() : nullptr;
  d_out.poison();
  d_lse.poison();
  d_dqkv.poison();
  if (flash) {
    cuda::flash_attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, H, Hkv, D, window, doc);
    cuda::flash_attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), B, T, H, Hkv, D,
                                   window, doc);
  } else {
    cuda::attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, H, Hkv, D, window, doc);
    cuda::attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), B, T, H, Hkv, D, window,
                             doc);
  }
  return {d_out.download(), d_lse.download(), d_dqkv.download()};
}

// The tensor-core attention against ref:: on inputs already rounded to bf16 (so that what is left is
// the rounding of the probabilities and their gradients to bf16 for the tensor cores, 1-2e-3
// measured): within the tolerance of values rounded to bf16, lse within fp32 sums'. doc_start: the packed documents, against ref:: on
// each document alone; the plain kernels are held to fp32 tolerances against the same.
void check_flash_attention(int B, int T, int H, int Hkv, int D, int window = 0,
                           const std::vector<int32_t>* doc_start = nullptr) {
  SCOPED_TRACE(::testing::Message() << "B=" << B << " T=" << T << " H=" << H << " Hkv=" << Hkv << " D=" << D
                                    << " window=" << window << (doc_start != nullptr ? " documents" : ""));
  const auto qkv = bf16_rounded(mt19937_normal(size_t(B) * T * (H + 2 * Hkv) * D, 50));
  const auto dout = bf16_rounded(mt19937_normal(size_t(B) * T * H * D, 51));
  const auto want = reference_by_document(qkv, dout, doc_start, B, T, H, Hkv, D, window);
  const auto flash = run_cuda_attention(true, qkv, dout, doc_start, B, T, H, Hkv, D, window);
  EXPECT_TRUE(close("flash out", flash.out, want.out, kBf16Values));
  EXPECT_TRUE(close("flash lse", flash.lse, want.lse, kSums));
  EXPECT_TRUE(close("flash dqkv", flash.dqkv, want.dqkv, kBf16Values));
  expect_parts_close("flash", flash.dqkv, want.dqkv, int64_t(B) * T, H, Hkv, D, kBf16Values);
  if (doc_start != nullptr) {
    const auto plain = run_cuda_attention(false, qkv, dout, doc_start, B, T, H, Hkv, D, window);
    EXPECT_TRUE(close("plain out", plain.out, want.out, kGemm));
    EXPECT_TRUE(close("plain lse", plain.lse, want.lse, kSums));
    expect_parts_close("plain", plain.dqkv, want.dqkv, int64_t(B) * T, H, Hkv, D, kGemm);
  }
}

// Per token, the position its document starts at, for documents of the given lengths one after
// another in each sequence (the last one filling the sequence).
std::vector<int32_t> doc_starts(int B, int T, const std::vector<std::vector<int>>& lengths) {
  std::vector<int32_t> starts(size_t(B) * T);
  for (int b = 0; b < B; b++) {
    int s = 0, i = 0;
    for (int t = 0; t < T; t++) {
      if (size_t(i) < lengths[size_t(b)].size() && t == s + lengths[size_t(b)][size_t(i)]) {
        s = t;
        i++;
      }
      starts[size_t(b) * T + t] = s;
    }
  }
  return starts;
}

TEST(CudaVsRef, FlashAttention) {
  SKIP_WITHOUT_DEVICE();
  EXPECT_TRUE(cuda::flash_attention_supports(8));
  EXPECT_TRUE(cuda::flash_attention_supports(128));
  EXPECT_FALSE(cuda::flash_attention_supports(136));
  EXPECT_FALSE(cuda::flash_attention_supports(256));
  check_flash_attention(1, 1, 1, 1, 64);
  check_flash_attention(2, 77, 4, 2, 64);      // GQA 2:1, a partial query and key tile
  check_flash_attention(1, 150, 4, 1, 128);    // several tiles, group of 4, Llama's head dimension
  check_flash_attention(1, 97, 2, 2, 32, 40);  // sliding window across tiles
  check_flash_attention(2, 65, 3, 1, 80, 1);   // window of one: each query sees itself only
  check_flash_attention(1, 64, 2, 1, 16);      // exactly one tile
  check_flash_attention(1, 70, 4, 2, 8);       // head dimensions padded to the tensor cores' 16
  check_flash_attention(2, 33, 2, 1, 12, 9);
  check_flash_attention(1, 40, 2, 2, 120);
  try {
    cuda::flash_attention_forward(nullptr, nullptr, nullptr, 1, 4, 1, 1, 136);
    FAIL() << "head dimension 136 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head dimension 136"), std::string::npos) << e.what();
  }
}

TEST(CudaVsRef, AttentionStopsAtDocumentBoundaries) {
  SKIP_WITHOUT_DEVICE();
  // Documents of 1, 13, 50 and 36 tokens in the first sequence (one starts inside a tile and ends in
  // the next), 100 in the second, 64 + 36 in the third (a boundary on a tile's edge).
  const int B = 3, T = 100;
  const auto starts = doc_starts(B, T, {{1, 13, 50}, {}, {64}});
  check_flash_attention(B, T, 4, 2, 64, 0, &starts);
  check_flash_attention(B, T, 2, 1, 32, 20, &starts);                 // with a window shorter than some documents
  const auto singles = doc_starts(1, 70, {std::vector<int>(69, 1)});  // every token a document
  check_flash_attention(1, 70, 2, 2, 16, 0, &singles);
}

TEST(CudaVsRef, Attention) {
  SKIP_WITHOUT_DEVICE();
  check_attention(1, 1, 1, 1, 64);
  check_attention(2, 77, 8, 2, 64);    // GQA 4:1, one key tile
  check_attention(1, 300, 4, 1, 128);  // several key tiles (128 per tile), group of 4
  check_attention(3, 129, 2, 2, 24);   // MHA, a tile of one key at the end
}

TEST(CudaVsRef, SlidingWindowAttention) {
  SKIP_WITHOUT_DEVICE();
  check_attention(2, 77, 8, 2, 64, 5);      // a window within the first key tile
  check_attention(1, 300, 4, 1, 128, 130);  // a window over two key tiles
  check_attention(1, 40, 2, 2, 16, 1);      // each query its own key only
  for (const auto& [pos, window] : std::vector<std::pair<int, int>>{{10, 3}, {300, 129}, {5, 1}}) {
    SCOPED_TRACE(::testing::Message() << "decode pos=" << pos << " window=" << window);
    const int H = 4, Hkv = 2, D = 64;
    const int64_t KV = 2 * int64_t(Hkv) * D;
    const auto q = mt19937_normal(size_t(H) * D, 137), cache = mt19937_normal(size_t(pos + 1) * KV, 138);
    std::vector<float> out(size_t(H) * D), scores(size_t(H) * (pos + 1));
    ref::attention_decode(out.data(), scores.data(), q.data(), cache.data(), pos, H, Hkv, D, window);
    DeviceArray<float> d_q(q), d_cache(cache), d_out(out.size()), d_scores(scores.size());
    d_out.poison();
    cuda::attention_decode(d_out.get(), d_scores.get(), d_q.get(), d_cache.get(), pos, H, Hkv, D, window);
    EXPECT_TRUE(close("decode out", d_out.download(), out, kGemm));  // scores before the window are not written
  }
}

template <typename T>
void check_swiglu(int N, int F) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " F=" << F << " out bytes " << sizeof(T));
  const auto h13 = mt19937_normal(size_t(N) * 2 * F, 50, 3.0f), dout = mt19937_normal(size_t(N) * F, 51);
  std::vector<float> out(size_t(N) * F), dh13(h13.size());
  ref::swiglu_forward(out.data(), h13.data(), N, F);
  ref::swiglu_backward(dh13.data(), dout.data(), h13.data(), N, F);
  DeviceArray<float> d_h13(h13), d_dout(dout);
  DeviceArray<T> d_out(out.size()), d_dh13(dh13.size());
  d_out.poison();
  d_dh13.poison();
  cuda::swiglu_forward(d_out.get(), d_h13.get(), N, F);
  cuda::swiglu_backward(d_dh13.get(), d_dout.get(), d_h13.get(), N, F);
  const double tol = std::is_same_v<T, float> ? kElementwise : kBf16Values;
  EXPECT_TRUE(close("swiglu out", widen(d_out.download()), out, tol));
  EXPECT_TRUE(close("swiglu dh13", widen(d_dh13.download()), dh13, tol));
}

TEST(CudaVsRef, SwigluAndResidual) {
  SKIP_WITHOUT_DEVICE();
  for (const auto& [N, F] : std::vector<std::pair<int, int>>{{1, 1}, {1037, 688}, {3, 11008}}) {
    check_swiglu<float>(N, F);
    check_swiglu<bf16>(N, F);
    check_swiglu<bf16_in_f32>(N, F);
  }
  const int64_t n = 1000003;
  const auto a = mt19937_normal(size_t(n), 52), b = mt19937_normal(size_t(n), 53);
  std::vector<float> want(static_cast<size_t>(n));
  ref::residual_forward(want.data(), a.data(), b.data(), n);
  DeviceArray<float> d_a(a), d_b(b), d_out(static_cast<size_t>(n));
  d_out.poison();
  cuda::residual_forward(d_out.get(), d_a.get(), d_b.get(), n);
  EXPECT_EQ(d_out.download(), want) << "one fp32 add per element is exact";
  cuda::residual_forward(d_a.get(), d_a.get(), d_b.get(), n);  // out aliasing a
  EXPECT_EQ(d_a.download(), want);
  // Unaligned bases (one at a time) and a length under 4.
  for (const auto& [offset, len] : std::vector<std::pair<int, int64_t>>{{1, 1001}, {2, 3}, {0, 3}}) {
    DeviceArray<float> d_a2(a), d_out2(static_cast<size_t>(n));
    d_out2.poison();
    cuda::residual_forward(d_out2.get() + offset, d_a2.get() + offset, d_b.get() + offset, len);
    const auto got = d_out2.download();
    for (int64_t i = 0; i < len; i++) ASSERT_EQ(got[size_t(offset + i)], want[size_t(offset + i)]) << "element " << i;
    EXPECT_TRUE(std::isnan(got[size_t(offset + len)])) << "past the end untouched";
  }
}

// The lm head + CE against ref (fp64 logits) on small shapes, with ignored targets, and against
// cpu:: where the rows span several chunks (N * V * 4 bytes past the kernel's 256 MiB of logits).
void check_lmhead(int N, int C, int V, cuda::ComputeType ct, bool against_cpu) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " V=" << V
                                    << " bf16=" << (ct == cuda::ComputeType::bf16));
  const bool b16 = ct == cuda::ComputeType::bf16;
  const auto x = mt19937_normal(size_t(N) * C, 60), wout = mt19937_normal(size_t(V) * C, 61, 0.5f);
  std::vector<int32_t> targets = testing::philox_tokens(size_t(N), V, 62, 0);
  for (int n = 0; n < N; n += 7) targets[size_t(n)] = -100;
  const float dloss = 1.0f / float(N);
  std::vector<float> losses(static_cast<size_t>(N)), dx(size_t(N) * C), dw = mt19937_normal(size_t(V) * C, 63, 0.01f);
  const auto dw0 = dw;
  if (against_cpu) {
    cpu::lmhead_ce_backward(losses.data(), dx.data(), dw.data(), x.data(), wout.data(), nullptr, targets.data(), dloss,
                            N, C, V, cpu::ComputeType::f32);
  } else {
    const auto xr = b16 ? testing::bf16_rounded(x) : x, wr = b16 ? testing::bf16_rounded(wout) : wout;
    ref::lmhead_ce_backward(losses.data(), dx.data(), dw.data(), xr.data(), wr.data(), targets.data(), dloss, N, C, V);
  }
  DeviceArray<float> d_x(x), d_w(wout), d_losses(static_cast<size_t>(N)), d_losses2(static_cast<size_t>(N)),
      d_dx(dx.size()), d_dw(dw0);
  DeviceArray<bf16> d_wb(testing::to_bf16_vector(wout));
  DeviceArray<int32_t> d_t(targets);
  const cuda::Bf16Weight wb = b16 ? cuda::Bf16Weight(d_wb.get()) : cuda::Bf16Weight();
  d_losses.poison();
  d_losses2.poison();
  d_dx.poison();
  cuda::lmhead_ce_forward(d_losses.get(), d_x.get(), d_w.get(), wb, d_t.get(), N, C, V, ct);
  cuda::lmhead_ce_backward(d_losses2.get(), d_dx.get(), d_dw.get(), d_x.get(), d_w.get(), wb, d_t.get(), dloss, N, C, V,
                           ct);
  // bf16: the dlogits are rounded to bf16 for the backward's gemms (ref keeps them in fp64).
  const auto got_losses = d_losses.download();
  EXPECT_TRUE(close("lmhead losses", got_losses, losses, kGemm));
  EXPECT_TRUE(close("lmhead losses (backward)", d_losses2.download(), losses, kGemm));
  for (int n = 0; n < N; n += 7) EXPECT_EQ(got_losses[size_t(n)], 0.0f) << "ignored row " << n;
  EXPECT_TRUE(close("lmhead dx", d_dx.download(), dx, b16 ? kBf16Operands : kLongGemm));
  EXPECT_TRUE(close("lmhead dwout (+=)", d_dw.download(), dw, b16 ? kBf16Operands : kGemm));
  // A frozen head: dwout nullptr.
  DeviceArray<float> d_dx2(dx.size());
  d_dx2.poison();
  cuda::lmhead_ce_backward(d_losses2.get(), d_dx2.get(), nullptr, d_x.get(), d_w.get(), wb, d_t.get(), dloss, N, C, V,
                           ct);
  EXPECT_TRUE(close("lmhead dx without dwout", d_dx2.download(), dx, b16 ? kBf16Operands : kLongGemm));
}

TEST(CudaVsRef, LmHeadCe) {
  SKIP_WITHOUT_DEVICE();
  check_lmhead(37, 64, 1000, cuda::ComputeType::f32, false);
  check_lmhead(37, 64, 1000, cuda::ComputeType::bf16, false);
  check_lmhead(9, 128, 50000, cuda::ComputeType::f32, false);
  check_lmhead(9, 128, 50000, cuda::ComputeType::bf16, false);
  EXPECT_GT(cuda::lmhead_ce_scratch_bytes(100000, 4096, 128256, cuda::ComputeType::bf16), 0);
  EXPECT_LT(cuda::lmhead_ce_scratch_bytes(100000, 4096, 128256, cuda::ComputeType::bf16), int64_t(1) << 30)
      << "the scratch is bounded whatever N";
}

TEST(CudaVsCpu, LmHeadCeOverSeveralChunks) {
  SKIP_WITHOUT_DEVICE();
  check_lmhead(1500, 64, 50000, cuda::ComputeType::f32, true);  // 1500 x 50000 x 4 B = 300 MB: two chunks
}

struct AdamwCase {
  float lr, beta1, beta2, eps, wd, grad_scale;
  int step;
};

TEST(CudaVsCpu, AdamwFp32AndBf16Copy) {
  SKIP_WITHOUT_DEVICE();
  const int64_t n = 300007;
  for (const AdamwCase& c : {AdamwCase{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1},
                             AdamwCase{1e-2f, 0.9f, 0.999f, 1e-6f, 0.0f, 0.37f, 1000}}) {
    auto p = mt19937_normal(size_t(n), 70, 0.05f), m = mt19937_normal(size_t(n), 71, 1e-3f);
    auto v = testing::abs_values(mt19937_normal(size_t(n), 72, 1e-6f));
    const auto g = mt19937_normal(size_t(n), 73, 1e-2f);
    DeviceArray<float> d_p(p), d_m(m), d_v(v), d_g(g), d_p2(p), d_m2(m), d_v2(v);
    DeviceArray<bf16> d_pb(static_cast<size_t>(n));
    d_pb.poison();
    cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), n, c.lr, c.beta1, c.beta2, c.eps, c.wd, c.step,
                      c.grad_scale);
    cuda::adamw_update(d_p.get(), d_m.get(), d_v.get(), d_g.get(), n, c.lr, c.beta1, c.beta2, c.eps, c.wd, c.step,
                       c.grad_scale);
    cuda::adamw_update_bf16_copy(d_p2.get(), d_pb.get(), d_m2.get(), d_v2.get(), d_g.get(), n, c.lr, c.beta1, c.beta2,
                                 c.eps, c.wd, c.step, c.grad_scale);
    const auto gp = d_p.download();
    EXPECT_TRUE(close("adamw param", gp, p, kElementwise));
    EXPECT_TRUE(close("adamw m", d_m.download(), m, kElementwise));
    EXPECT_TRUE(close("adamw v", d_v.download(), v, kElementwise));
    EXPECT_EQ(d_p2.download(), gp) << "the bf16-copy variant updates exactly as adamw_update";
    const auto pb = d_pb.download();
    for (size_t i = 0; i < pb.size(); i++) ASSERT_EQ(pb[i].bits, to_bf16(gp[i]).bits) << "element " << i;
  }
}

TEST(CudaVsCpu, AdamwBf16SrIsBitwiseTheCpu) {
  SKIP_WITHOUT_DEVICE();
  const int64_t n = 200003;
  const auto p0 = testing::to_bf16_vector(mt19937_normal(size_t(n), 80, 0.05f));
  const auto m0 = testing::to_bf16_vector(mt19937_normal(size_t(n), 81, 1e-3f));
  const auto v0 = testing::to_bf16_vector(testing::abs_values(mt19937_normal(size_t(n), 82, 1e-6f)));
  const auto g = mt19937_normal(size_t(n), 83, 1e-2f);
  const uint64_t first = 5000000017ull;  // a shard past 2^32 elements
  for (const AdamwCase& c : {AdamwCase{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1},
                             AdamwCase{1e-2f, 0.9f, 0.999f, 1e-6f, 0.0f, 0.37f, 1000}}) {
    std::vector<bf16> p = p0, m = m0, v = v0;
    std::vector<float> pf(static_cast<size_t>(n));
    cpu::adamw_update_bf16_sr(p.data(), m.data(), v.data(), pf.data(), g.data(), n, c.lr, c.beta1, c.beta2, c.eps, c.wd,
                              c.step, c.grad_scale, 1234, 7, first);
    DeviceArray<bf16> d_p(p0), d_m(m0), d_v(v0);
    DeviceArray<float> d_g(g), d_pf(static_cast<size_t>(n));
    d_pf.poison();
    // In two pieces: the random bits are keyed by the element's place in the tensor, not the call.
    const int64_t half = n / 2 + 1;
    cuda::adamw_update_bf16_sr(d_p.get(), d_m.get(), d_v.get(), d_pf.get(), d_g.get(), half, c.lr, c.beta1, c.beta2,
                               c.eps, c.wd, c.step, c.grad_scale, 1234, 7, first);
    cuda::adamw_update_bf16_sr(d_p.get() + half, d_m.get() + half, d_v.get() + half, d_pf.get() + half,
                               d_g.get() + half, n - half, c.lr, c.beta1, c.beta2, c.eps, c.wd, c.step, c.grad_scale,
                               1234, 7, first + uint64_t(half));
    const auto gp = d_p.download(), gm = d_m.download(), gv = d_v.download();
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) {
      const size_t k = size_t(i);
      if (gp[k].bits != p[k].bits || gm[k].bits != m[k].bits || gv[k].bits != v[k].bits) {
        if (differ < 5)
          ADD_FAILURE() << "element " << i << ": param " << gp[k].bits << " vs " << p[k].bits << ", m " << gm[k].bits
                        << " vs " << m[k].bits << ", v " << gv[k].bits << " vs " << v[k].bits;
        differ++;
      }
    }
    EXPECT_EQ(differ, 0) << "of " << n << " at step " << c.step;
    EXPECT_TRUE(testing::bitwise_equal("param_f32", d_pf.download(), pf));
  }
}

TEST(CudaVsCpu, SumSquaresInitAndConversions) {
  SKIP_WITHOUT_DEVICE();
  const int64_t n = 3000017;
  const auto x = mt19937_normal(size_t(n), 90);
  DeviceArray<float> d_x(x);
  const double want = cpu::sum_squares(x.data(), n), got = cuda::sum_squares(d_x.get(), n);
  EXPECT_NEAR(got, want, 1e-11 * want);  // fp64 sums in another order
  EXPECT_EQ(cuda::sum_squares(d_x.get(), 0), 0.0);
  double plain = 0.0;
  for (float v : x) plain += double(v);
  EXPECT_NEAR(cuda::sum(d_x.get(), n), plain, 1e-9 * std::sqrt(want));  // a sum near 0: against its scale

  DeviceArray<float> d_c(static_cast<size_t>(n)), d_n(static_cast<size_t>(n));
  d_c.poison();
  d_n.poison();
  cuda::fill_constant(d_c.get(), n, 0.25f);
  for (float v : d_c.download()) ASSERT_EQ(v, 0.25f);
  std::vector<float> normal(static_cast<size_t>(n));
  cpu::fill_normal(normal.data(), n, 0.02f, 42, 3, 1000);
  cuda::fill_normal(d_n.get(), n, 0.02f, 42, 3, 1000);
  const auto gn = d_n.download();
  // fp64 log / cos on the device are within an ulp of glibc's: after rounding to fp32 the draws agree
  // except, rarely, by one fp32 ulp.
  int64_t off_by_ulp = 0;
  for (size_t i = 0; i < gn.size(); i++) {
    if (gn[i] == normal[i]) continue;
    ASSERT_EQ(std::nextafter(gn[i], normal[i]), normal[i]) << "element " << i << ": " << gn[i] << " vs " << normal[i];
    off_by_ulp++;
  }
  EXPECT_LE(off_by_ulp, n / 100000) << "draws one ulp apart";

  std::vector<bf16> want_b(static_cast<size_t>(n));
  bf16_from_float(want_b.data(), x.data(), n);
  DeviceArray<bf16> d_b(static_cast<size_t>(n));
  DeviceArray<bf16_in_f32> d_bf(static_cast<size_t>(n));
  DeviceArray<float> d_back(static_cast<size_t>(n));
  d_b.poison();
  d_bf.poison();
  d_back.poison();
  cuda::bf16_from_float(d_b.get(), d_x.get(), n);
  cuda::bf16_from_float(d_bf.get(), d_x.get(), n);
  cuda::float_from_bf16(d_back.get(), d_b.get(), n);
  const auto gb = d_b.download();
  const auto gbf = d_bf.download();
  const auto back = d_back.download();
  for (size_t i = 0; i < gb.size(); i++) {
    ASSERT_EQ(gb[i].bits, want_b[i].bits) << "element " << i;
    ASSERT_EQ(gbf[i].value, to_float(want_b[i])) << "element " << i;
    ASSERT_EQ(back[i], to_float(want_b[i])) << "element " << i;
  }
}

}  // namespace
}  // namespace llamatrain
