// model/backend.h over the CPU kernels: oneDNN's matmul rate (kernels/cpu/matmul_peak.h) and the
// process-wide kernel chooser's reports (kernels/cpu/matmul_choice.h).
#include "model/backend.h"

#include "kernels/cpu/matmul_choice.h"
#include "kernels/cpu/matmul_peak.h"
#include "kernels/cpu/ops.h"

namespace llamatrain::model {

cpu::ComputeType compute_type(Precision p) {
  return p == Precision::fp32 ? cpu::ComputeType::f32 : cpu::ComputeType::bf16;
}

double matmul_gflops(Precision p, int M, int N, int K, double seconds) {
  return cpu::measure_matmul_gflops(M, N, K, compute_type(p), seconds);
}

std::string matmul_choices_text(const std::string& indent) {
  return cpu::matmul_choices_text(cpu::matmul_chooser(), indent);
}

std::string matmul_choices_json() { return cpu::matmul_choices_json(cpu::matmul_chooser()); }

bool bf16_matmul_available() { return cpu::matmul_chooser().bf16_available(); }

}  // namespace llamatrain::model
