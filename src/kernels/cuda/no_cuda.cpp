// CUDA backend stub: llamatrain was configured without CUDA. The cuda:: kernels (same names as
// kernels/cpu/ops.h) will live in kernels/cuda/*.cu when a GPU build exists; until then this file
// reports the backend as unavailable so callers can say so plainly.
namespace llamatrain::cuda {
bool available() { return false; }
}  // namespace llamatrain::cuda
