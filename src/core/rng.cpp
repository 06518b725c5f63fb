// Counter-based normal draws (Box-Muller) for parameter initialization.
#include "core/rng.h"

#include <cmath>

namespace llamatrain {

float random_normal(uint64_t seed, uint32_t tensor_id, uint64_t index) {
  auto r = philox4x32({uint32_t(index), uint32_t(index >> 32), tensor_id, 0x6e6f726du},
                      {uint32_t(seed), uint32_t(seed >> 32)});
  double u1 = (double(r[0]) + 1.0) / 4294967297.0;  // (0, 1]
  double u2 = double(r[1]) / 4294967296.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace llamatrain
