// Internal to kernels/cuda (device code): the grid-stride loop of the elementwise kernels. Each thread
// of a launch of any size takes elements i, i + the grid's thread count, ... below n (int64_t
// indices), so grid_for's bounded grid (check.h) covers every n.
#pragma once

#include <cstdint>

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)
