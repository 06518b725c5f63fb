// kernels/cuda/ops.h's nccl_* calls in a build without NCCL (a CUDA build where CMake did not find
// nccl.h and libnccl, or a build without CUDA): nccl_version() is "" (the callers then sum through
// the host) and the rest throw.
#include <string>

#include "core/error.h"
#include "kernels/cuda/ops.h"

namespace llamatrain::cuda {

namespace {

[[noreturn]] void unavailable(const char* what) {
  fail("cuda::{}: llamatrain was built without NCCL; hint: configure with NCCL found (-DNCCL_ROOT=DIR holding "
       "include/nccl.h and lib/libnccl.so), or let data parallelism sum through the host",
       what);
}

}  // namespace

std::string nccl_version() { return ""; }
void nccl_unique_id(void*) { unavailable("nccl_unique_id"); }
void* nccl_init(const void*, int, int) { unavailable("nccl_init"); }
void nccl_destroy(void*) noexcept {}
void nccl_all_reduce_sum(void*, float*, int64_t) { unavailable("nccl_all_reduce_sum"); }
void nccl_all_gather(void*, float*, int64_t) { unavailable("nccl_all_gather"); }

}  // namespace llamatrain::cuda
