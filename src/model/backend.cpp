// The backends' registry: a Device's name, and the Kernels and BackendSizing of each (backend_cpu.cpp,
// backend_ref.cpp, backend_cuda.cpp).
#include "model/backend.h"
#include "model/memory.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace llamatrain::model {

std::unique_ptr<Kernels> make_cpu_kernels(Precision p);
std::unique_ptr<Kernels> make_ref_kernels(Precision p);
std::unique_ptr<Kernels> make_cuda_kernels(Precision p);
bool cuda_device_usable(std::string* why);
const BackendSizing& cpu_sizing();
const BackendSizing& ref_sizing();
const BackendSizing& cuda_sizing();

const BackendSizing& backend_sizing(Device d) {
  switch (d) {
    case Device::cpu: return cpu_sizing();
    case Device::ref: return ref_sizing();
    case Device::cuda: return cuda_sizing();
  }
  return cpu_sizing();
}

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "ref") return Device::ref;
  if (name == "cuda" || name == "gpu") return Device::cuda;
  fail("device: got '{}', expected cpu, ref or cuda", name);
}

const char* device_name(Device d) {
  switch (d) {
    case Device::cpu: return "cpu";
    case Device::ref: return "ref";
    case Device::cuda: return "cuda";
  }
  return "?";
}

void Kernels::bind_weights(float* f32, bf16* master, int64_t n) {
  CHECK((master != nullptr) == (precision_ == Precision::bf16_sr));
  f32_ = f32;
  master_ = master;
  n_ = n;
  weights_bound();
}

int64_t Kernels::weight_offset(const float* param) const {
  const int64_t i = param - f32_;
  CHECK(f32_ != nullptr && i >= 0 && i <= n_, "a matmul weight outside the bound parameter arena");
  return i;
}

size_t Kernels::host_piece_bytes() {
  static const size_t bytes = [] {
    const char* env = std::getenv("LLAMATRAIN_HOST_PIECE_BYTES");
    const long long v = env ? std::atoll(env) : 0;
    return v >= 16 ? size_t(v) : size_t(64) << 20;
  }();
  return bytes;
}

void Kernels::read_pieces(const void* p, size_t bytes, size_t element, const PieceReader& use) {
  if (bytes == 0) return;
  if (host_memory()) return use(p, 0, bytes);
  const size_t piece = std::max(element, host_piece_bytes() / element * element);
  std::vector<std::byte> staging(std::min(piece, bytes));
  for (size_t off = 0; off < bytes; off += piece) {
    const size_t n = std::min(piece, bytes - off);
    copy_to_host(staging.data(), static_cast<const std::byte*>(p) + off, n);
    use(staging.data(), off, n);
  }
}

void Kernels::write_pieces(void* p, size_t bytes, size_t element, const PieceWriter& fill) {
  if (bytes == 0) return;
  if (host_memory()) return fill(p, 0, bytes);
  const size_t piece = std::max(element, host_piece_bytes() / element * element);
  std::vector<std::byte> staging(std::min(piece, bytes));
  for (size_t off = 0; off < bytes; off += piece) {
    const size_t n = std::min(piece, bytes - off);
    fill(staging.data(), off, n);
    copy_from_host(static_cast<std::byte*>(p) + off, staging.data(), n);
  }
}

size_t operand_bytes(OperandForm f) { return f == OperandForm::bf16 ? 2 : 4; }

bool device_usable(Device d, std::string* why) { return d != Device::cuda || cuda_device_usable(why); }

Device choose_device(const std::string& name, const std::string& what) {
  if (name == "auto") return device_usable(Device::cuda) ? Device::cuda : Device::cpu;
  Device d;
  try {
    d = parse_device(name);
  } catch (const Error&) {
    fail("{}: got '{}', expected cpu, cuda (or gpu), auto or ref", what, name);
  }
  if (std::string why; !device_usable(d, &why))
    fail("{} {}: {}\nhint: use {}{}cpu", what, name, why, what, what.starts_with("--") ? " " : "=");
  return d;
}

std::unique_ptr<Kernels> make_kernels(Device d, Precision p) {
  switch (d) {
    case Device::cpu: return make_cpu_kernels(p);
    case Device::ref: return make_ref_kernels(p);
    case Device::cuda: break;
  }
  if (std::string why; !device_usable(d, &why)) fail("device cuda: {}\nhint: use the cpu device", why);
  return make_cuda_kernels(p);
}

}  // namespace llamatrain::model
