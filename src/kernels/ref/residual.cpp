// Reference residual add: out = a + b elementwise. out may alias a or b (each element is read
// before it is written).
#include "kernels/ref/ops.h"

namespace llamatrain::ref {

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  // torch: out = a + b
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

}  // namespace llamatrain::ref
