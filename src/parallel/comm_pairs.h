// Tensor- and sequence-parallel communication as explicit forward/backward pairs, with
// Megatron-core's names (copy_to_tensor_model_parallel_region -> copy_to_tp, ...), so a hand-written
// backward calls each pair's _backward where its forward called _forward. `tp` is the
// tensor-parallel communicator (its size P); every buffer is row-major fp32 on the host.
//
//   pair                  forward                              backward
//   copy_to_tp            y = x                                dx = sum_P dy
//   reduce_from_tp        y = sum_P x                          dx = dy
//   gather_from_tp        y = [x_0 | x_1 | ...] on the last dim dx = dy's own column block
//   scatter_to_tp         y = x's own column block              dx = [dy_0 | dy_1 | ...]
//   gather_from_sp        y = [x_0; x_1; ...] on the token dim  dx = own row block of sum_P dy
//   reduce_scatter_to_sp  y = own row block of sum_P x          dx = [dy_0; dy_1; ...]
//
// The sequence-parallel pairs split the leading (token) dimension of an (N, C) buffer: N = B*T
// tokens of a (B, T, C) activation, rank r owning rows [r*N/P, (r+1)*N/P); any split works for the
// per-token ops (norms, residuals) they bracket. y and x may be the same buffer where the shapes agree
// (copy_to_tp, reduce_from_tp). Math: docs/parallel.md.
#pragma once

#include <cstddef>

#include "parallel/communicator.h"

namespace llamatrain::parallel {

// y (n) = x (n); dx (n) = sum over tp of dy (n).
void copy_to_tp_forward(float* y, const float* x, size_t n, Communicator& tp);
void copy_to_tp_backward(float* dx, const float* dy, size_t n, Communicator& tp);

// y (n) = sum over tp of x (n); dx (n) = dy (n).
void reduce_from_tp_forward(float* y, const float* x, size_t n, Communicator& tp);
void reduce_from_tp_backward(float* dx, const float* dy, size_t n, Communicator& tp);

// y (rows, P*c) = every rank's x (rows, c) side by side, rank r in columns [r*c, (r+1)*c);
// dx (rows, c) = columns [r*c, (r+1)*c) of dy (rows, P*c).
void gather_from_tp_forward(float* y, const float* x, size_t rows, size_t c, Communicator& tp);
void gather_from_tp_backward(float* dx, const float* dy, size_t rows, size_t c, Communicator& tp);

// y (rows, c) = columns [r*c, (r+1)*c) of x (rows, P*c); dx (rows, P*c) = every rank's dy (rows, c)
// side by side.
void scatter_to_tp_forward(float* y, const float* x, size_t rows, size_t c, Communicator& tp);
void scatter_to_tp_backward(float* dx, const float* dy, size_t rows, size_t c, Communicator& tp);

// y (P*n, c) = every rank's x (n, c) stacked, rank r in rows [r*n, (r+1)*n);
// dx (n, c) = rows [r*n, (r+1)*n) of the sum over tp of dy (P*n, c).
void gather_from_sp_forward(float* y, const float* x, size_t n, size_t c, Communicator& tp);
void gather_from_sp_backward(float* dx, const float* dy, size_t n, size_t c, Communicator& tp);

// y (n, c) = rows [r*n, (r+1)*n) of the sum over tp of x (P*n, c);
// dx (P*n, c) = every rank's dy (n, c) stacked.
void reduce_scatter_to_sp_forward(float* y, const float* x, size_t n, size_t c, Communicator& tp);
void reduce_scatter_to_sp_backward(float* dx, const float* dy, size_t n, size_t c, Communicator& tp);

}  // namespace llamatrain::parallel
