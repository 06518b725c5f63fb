// model/machine.h over the CPU kernels: oneDNN's matmul rate (kernels/cpu/matmul_peak.h) and the
// process-wide kernel chooser's reports (kernels/cpu/matmul_choice.h).
#include "model/machine.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/host.h"
#include "core/memory.h"

#include "kernels/cpu/matmul_choice.h"
#include "kernels/cpu/matmul_peak.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/sizes.h"
#include "parallel/communicator.h"

namespace llamatrain::model {

cpu::ComputeType compute_type(Precision p) {
  return p == Precision::fp32 ? cpu::ComputeType::f32 : cpu::ComputeType::bf16;
}

double matmul_gflops(Precision p, int M, int N, int K, double seconds) {
  return cpu::measure_matmul_gflops(M, N, K, compute_type(p), seconds);
}

template <typename F>
double fastest_call_s(F&& f, double seconds) {
  f();
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double fastest = 1e30;
  for (int calls = 0; calls < 3 || std::chrono::duration<double>(clock::now() - start).count() < seconds; calls++) {
    const auto t0 = clock::now();
    f();
    fastest = std::min(fastest, std::chrono::duration<double>(clock::now() - t0).count());
  }
  return fastest;
}

double matmul_gflops(Device d, Precision p, int M, int N, int K, double seconds) {
  if (d != Device::cuda) return matmul_gflops(p, M, N, K, seconds);
  // (M,K) x (N,K)^T through the device's own matmul on random values (zeros can run faster), timed
  // with the queue drained around each call.
  std::unique_ptr<Kernels> k = make_kernels(d, p);
  Buffer<float> x(k.get()), w(k.get()), out(k.get());
  x.assign_zero(int64_t(M) * K);
  w.assign_zero(int64_t(N) * K);
  out.assign_zero(int64_t(M) * N);
  k->fill_normal(x.data(), int64_t(M) * K, 1.0f, 1, 0, 0);
  k->fill_normal(w.data(), int64_t(N) * K, 0.02f, 1, 1, 0);
  Buffer<bf16> master(k.get());
  if (p == Precision::bf16_sr) master.assign_zero(int64_t(N) * K);
  k->bind_weights(w.data(), p == Precision::bf16_sr ? master.data() : nullptr, int64_t(N) * K);
  const double s = fastest_call_s(
      [&] {
        k->matmul_forward(out.data(), x.data(), w.data(), M, K, N);
        k->synchronize();
      },
      seconds);
  return 2.0 * M * N * double(K) / s / 1e9;
}

double peak_matmul_gflops(Device d, Precision p, double seconds) {
  if (d != Device::cuda) return matmul_gflops(p, 1024, 1024, 1024, seconds);
  double gflops = 0;
  for (int n = 256; n <= 8192; n *= 2) {
    gflops = matmul_gflops(d, p, n, n, n, seconds);
    if (2.0 * n * n * double(n) / (gflops * 1e9) > 2e-3) break;
  }
  return gflops;
}

// The fastest of at least 3 calls of f, timed until `seconds` have passed (after one warm-up call).
double attention_flops_per_s(int B, int T, int H, int Hkv, int D, double seconds) {
  const size_t qkv = size_t(B) * T * (H + 2 * Hkv) * D, out = size_t(B) * T * H * D;
  std::vector<float> q(qkv), dq(qkv), o(out), dout(out), lse(size_t(B) * H * T);
  for (size_t i = 0; i < qkv; i++) q[i] = float(i % 17) * 0.01f - 0.08f;
  for (size_t i = 0; i < out; i++) dout[i] = float(i % 13) * 0.01f - 0.06f;
  const double s = fastest_call_s(
      [&] {
        cpu::attention_forward(o.data(), lse.data(), q.data(), B, T, H, Hkv, D);
        cpu::attention_backward(dq.data(), dout.data(), q.data(), o.data(), lse.data(), B, T, H, Hkv, D);
      },
      seconds);
  return 3.0 * 2.0 * B * H * double(T) * T * D / s;
}

double kernel_call_seconds(double seconds) {
  const int64_t n = 4096;
  std::vector<float> param(size_t(n), 0.5f), m(size_t(n), 0.0f), v(size_t(n), 0.0f), grad(size_t(n), 0.25f);
  return fastest_call_s(
      [&] {
        cpu::adamw_update(param.data(), m.data(), v.data(), grad.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f);
      },
      seconds);
}

std::string device_description(Device d) {
  if (d != Device::cuda) return device_name(d);
  return fmt::format("cuda:{} ({}, {:.1f} GB)", cuda::device_index(), cuda::device_name(),
                     double(cuda::device_memory_total()) / 1e9);
}

int device_index(Device d) { return d == Device::cuda ? cuda::device_index() : -1; }

namespace {

class NcclCollectives final : public GpuCollectives {
 public:
  explicit NcclCollectives(parallel::Communicator& group) : size_(group.size()) {
    std::vector<unsigned char> id(cuda::kNcclIdBytes);
    if (group.rank() == 0) cuda::nccl_unique_id(id.data());
    group.broadcast(id.data(), id.size(), 0);
    comm_ = cuda::nccl_init(id.data(), group.size(), group.rank());
  }
  ~NcclCollectives() override { cuda::nccl_destroy(comm_); }
  void mean(float* data, int64_t n) override {
    cuda::nccl_all_reduce_sum(comm_, data, n);
    cuda::scale(data, n, 1.0f / float(size_));
  }
  void all_gather(float* data, int64_t shard) override { cuda::nccl_all_gather(comm_, data, shard); }
  std::string describe() const override { return "NCCL " + cuda::nccl_version(); }

 private:
  int size_;
  void* comm_ = nullptr;
};

}  // namespace

std::unique_ptr<GpuCollectives> make_gpu_collectives(parallel::Communicator& group, std::string* why_not) {
  const char* want = std::getenv("LLAMATRAIN_GPU_COLLECTIVES");
  std::string why;
  if (want && std::string(want) == "host")
    why = " (LLAMATRAIN_GPU_COLLECTIVES=host)";
  else if (cuda::nccl_version().empty())
    why = " (this build has no NCCL)";
  // Which GPU each rank holds (host and PCI bus id, as a 48-bit hash: exact in a double), gathered:
  // NCCL takes one rank per GPU.
  const std::string where = host_name() + "/" + cuda::device_pci_bus_id();
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : where) h = (h ^ c) * 1099511628211ull;
  const double mine = double(h >> 16);
  std::vector<double> all(size_t(group.size()));
  group.all_gather(all.data(), &mine, 1);
  std::sort(all.begin(), all.end());
  if (why.empty() && std::adjacent_find(all.begin(), all.end()) != all.end())
    why = " (ranks share a GPU, which NCCL refuses)";
  if (why_not) *why_not = why;
  if (!why.empty()) return nullptr;
  return std::make_unique<NcclCollectives>(group);
}

parallel::StagedArena staged_arena(Kernels& k, float* p, size_t n) {
  return {n, [&k, p](float* host, size_t first, size_t count) { k.copy_to_host(host, p + first, 4 * count); },
          [&k, p](size_t first, const float* host, size_t count) { k.copy_from_host(p + first, host, 4 * count); }};
}

GpuInfo gpu_info() {
  GpuInfo g;
  g.driver = cuda::driver_version();
  g.runtime = cuda::runtime_version();
  g.usable = device_usable(Device::cuda, &g.why_not);
  if (!g.usable) return g;
  g.index = cuda::device_index();
  g.count = cuda::device_count();
  g.name = cuda::device_name();
  g.total_bytes = cuda::device_memory_total();
  g.free_bytes = g.total_bytes - cuda::device_memory_used();
  return g;
}

int64_t available_bytes(Device d) {
  if (d != Device::cuda) return available_memory_bytes();
  return cuda::device_memory_total() - cuda::device_memory_used() + cuda::sizes::kContextBytes;
}

void check_device_memory_fits(Device d, int64_t need_bytes, const std::string& what, const std::string& detail,
                              const std::string& hint) {
  if (d != Device::cuda) return check_memory_fits(need_bytes, what, detail, hint);
  const int64_t avail = available_bytes(d);
  if (need_bytes <= avail) return;
  fail("memory: {} needs {:.1f} GB ({}), but the GPU {} has {:.1f} GB free\nhint: {}", what, need_bytes / 1e9, detail,
       device_description(d), avail / 1e9, hint);
}

int64_t device_memory_used(Device d) { return d == Device::cuda ? cuda::device_memory_used() : -1; }

int compute_threads() { return std::max(1, omp_get_max_threads()); }

double memory_bytes_per_s(double seconds) {
  const int64_t n = int64_t(1) << 22;  // 4 arrays of 16 MB
  std::vector<float> param(size_t(n), 0.5f), m(size_t(n), 0.0f), v(size_t(n), 0.0f), grad(size_t(n), 0.25f);
  const double fastest = fastest_call_s(
      [&] {
        cpu::adamw_update(param.data(), m.data(), v.data(), grad.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f);
      },
      seconds);
  return double(n) * 28 / fastest;  // reads weights, moments, gradient; writes weights and moments
}

std::string matmul_choices_text(const std::string& indent) {
  return cpu::matmul_choices_text(cpu::matmul_chooser(), indent);
}

std::string matmul_choices_json() { return cpu::matmul_choices_json(cpu::matmul_chooser()); }
const char* cpu_kernels_variant() { return cpu::cpu_kernels_variant(); }

bool bf16_matmul_available() { return cpu::matmul_chooser().bf16_available(); }

}  // namespace llamatrain::model
