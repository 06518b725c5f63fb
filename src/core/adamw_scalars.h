// AdamW's per-call scalars (the bias corrections, the decay factor, 1 - beta), computed once per call
// on the host in fp64 as ref::adamw_update computes them. The fast kernels (kernels/cpu/adamw.cpp and
// kernels/cuda/adamw.cu, whose elements are rng_device.cuh's) apply them to every element, so both
// backends start each update from the same bits.
#pragma once

#include <cmath>

namespace llamatrain {

struct AdamwScalars {
  float step_size, bc2_sqrt, decay, beta1, beta2, one_minus_b1, one_minus_b2, eps, grad_scale;
};

inline AdamwScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                                  float grad_scale) {
  const double bc1 = 1.0 - std::pow(double(beta1), step);
  const double bc2 = 1.0 - std::pow(double(beta2), step);
  return {float(double(lr) / bc1),
          float(std::sqrt(bc2)),
          float(1.0 - double(lr) * weight_decay),
          beta1,
          beta2,
          float(1.0 - double(beta1)),
          float(1.0 - double(beta2)),
          eps,
          grad_scale};
}

}  // namespace llamatrain
