// Tensor- and sequence-parallel communication pairs. The last-dimension gather goes through a
// (P, rows, c) scratch buffer, then interleaves it into (rows, P*c); the token-dimension ones map
// straight onto all_gather / reduce_scatter because row blocks are contiguous.
#include "parallel/comm_pairs.h"

#include <cstring>
#include <vector>

namespace llamatrain::parallel {
namespace {

void copy(float* y, const float* x, size_t n) {
  if (y != x && n) std::memcpy(y, x, n * sizeof(float));
}

// y (rows, c) = columns [block*c, (block+1)*c) of x (rows, P*c)
void take_columns(float* y, const float* x, size_t rows, size_t c, size_t P, size_t block) {
  for (size_t i = 0; i < rows; ++i) copy(y + i * c, x + (i * P + block) * c, c);
}

// y (rows, P*c) = every rank's (rows, c) side by side, gathered from (P, rows, c).
void all_gather_columns(float* y, const float* x, size_t rows, size_t c, Communicator& tp) {
  const size_t P = size_t(tp.size());
  if (rows == 1) {  // (P, 1, c) and (1, P*c) are the same layout
    tp.all_gather(y, x, c);
    return;
  }
  std::vector<float> blocks(P * rows * c);  // (P, rows, c)
  tp.all_gather(blocks.data(), x, rows * c);
  for (size_t r = 0; r < P; ++r)
    for (size_t i = 0; i < rows; ++i) copy(y + (i * P + r) * c, blocks.data() + (r * rows + i) * c, c);
}

}  // namespace

void copy_to_tp_forward(float* y, const float* x, size_t n, Communicator&) { copy(y, x, n); }

void copy_to_tp_backward(float* dx, const float* dy, size_t n, Communicator& tp) {
  copy(dx, dy, n);
  tp.all_reduce(dx, n);
}

void reduce_from_tp_forward(float* y, const float* x, size_t n, Communicator& tp) {
  copy(y, x, n);
  tp.all_reduce(y, n);
}

void reduce_from_tp_backward(float* dx, const float* dy, size_t n, Communicator&) { copy(dx, dy, n); }

void gather_from_tp_forward(float* y, const float* x, size_t rows, size_t c, Communicator& tp) {
  all_gather_columns(y, x, rows, c, tp);
}

void gather_from_tp_backward(float* dx, const float* dy, size_t rows, size_t c, Communicator& tp) {
  take_columns(dx, dy, rows, c, size_t(tp.size()), size_t(tp.rank()));
}

void scatter_to_tp_forward(float* y, const float* x, size_t rows, size_t c, Communicator& tp) {
  take_columns(y, x, rows, c, size_t(tp.size()), size_t(tp.rank()));
}

void scatter_to_tp_backward(float* dx, const float* dy, size_t rows, size_t c, Communicator& tp) {
  all_gather_columns(dx, dy, rows, c, tp);
}

void gather_from_sp_forward(float* y, const float* x, size_t n, size_t c, Communicator& tp) {
  tp.all_gather(y, x, n * c);
}

void gather_from_sp_backward(float* dx, const float* dy, size_t n, size_t c, Communicator& tp) {
  tp.reduce_scatter(dx, dy, n * c);
}

void reduce_scatter_to_sp_forward(float* y, const float* x, size_t n, size_t c, Communicator& tp) {
  tp.reduce_scatter(y, x, n * c);
}

void reduce_scatter_to_sp_backward(float* dx, const float* dy, size_t n, size_t c, Communicator& tp) {
  tp.all_gather(dx, dy, n * c);
}

}  // namespace llamatrain::parallel
