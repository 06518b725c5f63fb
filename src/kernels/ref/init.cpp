// Reference parameter init: a constant, or a normal draw per element keyed by its place in the full
// tensor (core/rng.h), so any split of a tensor over ranks draws the same values.
#include "core/rng.h"
#include "kernels/ref/ops.h"

namespace llamatrain::ref {

void fill_constant(float* out, int64_t n, float value) {
  for (int64_t i = 0; i < n; i++) out[i] = value;
}

void fill_normal(float* out, int64_t n, float std, uint64_t seed, uint32_t stream, uint64_t first) {
  // torch: nn.init.normal_(w, 0, std), with the draw a function of (seed, stream, element)
  for (int64_t i = 0; i < n; i++) out[i] = std * random_normal(seed, stream, first + uint64_t(i));
}

}  // namespace llamatrain::ref
