// The backends' registry: a Device's name, and the Kernels of each (kernels_cpu.cpp, kernels_ref.cpp).
#include "model/kernels.h"

#include "core/error.h"

namespace llamatrain::model {

std::unique_ptr<Kernels> make_cpu_kernels(Precision p);
std::unique_ptr<Kernels> make_ref_kernels(Precision p);

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

size_t operand_bytes(OperandForm f) { return f == OperandForm::bf16 ? 2 : 4; }

std::unique_ptr<Kernels> make_kernels(Device d, Precision p) {
  switch (d) {
    case Device::cpu: return make_cpu_kernels(p);
    case Device::ref: return make_ref_kernels(p);
    case Device::cuda: break;
  }
  fail("device cuda: this build of llamatrain trains on the CPU only\nhint: use device cpu");
}

}  // namespace llamatrain::model
