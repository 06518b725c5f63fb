// NCCL behind kernels/cuda/ops.h's nccl_* calls: a group made from an id one member draws, sums and
// gathers of fp32 device memory queued on the module's stream. Built where CMake found NCCL (the CUDA
// toolkit's, or a Python environment's nvidia-nccl); no_nccl.cpp otherwise. A failed call throws
// llamatrain::Error with NCCL's own words, code "nccl" (diagnose reads it).
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace llamatrain::cuda {

namespace {

void nccl_check(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return;
  throw Error(fmt::format("NCCL call {} failed: {} ({}); hint: NCCL_DEBUG=INFO logs what NCCL saw; check every rank "
                          "reached the same collective and that the GPUs and network work (llamatrain doctor)",
                          call, ncclGetErrorString(r), int(r)),
              "nccl");
}

// NCCL's calls take counts of at most 2^31 elements comfortably: larger arrays go in pieces.
constexpr int64_t kPiece = int64_t(1) << 30;

}  // namespace

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

void nccl_unique_id(void* out) {
  static_assert(sizeof(ncclUniqueId) == kNcclIdBytes);
  ncclUniqueId id;
  nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::memcpy(out, &id, sizeof id);
}

void* nccl_init(const void* id, int nranks, int rank) {
  device_count();  // this rank's device is current before NCCL binds the communicator to it
  ncclUniqueId uid;
  std::memcpy(&uid, id, sizeof uid);
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRank(&comm, nranks, uid, rank), "ncclCommInitRank");
  return comm;
}

void nccl_destroy(void* comm) noexcept {
  if (comm) ncclCommDestroy(static_cast<ncclComm_t>(comm));
}

void nccl_all_reduce_sum(void* comm, float* data, int64_t n) {
  for (int64_t first = 0; first < n; first += kPiece) {
    const size_t count = size_t(std::min(kPiece, n - first));
    nccl_check(ncclAllReduce(data + first, data + first, count, ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm),
                             detail::cuda_stream()),
               "ncclAllReduce");
  }
  CUDA_CHECK_LAUNCH("ncclAllReduce");
}

void nccl_all_gather(void* comm, float* data, int64_t n) {
  int nranks = 0, rank = 0;
  nccl_check(ncclCommCount(static_cast<ncclComm_t>(comm), &nranks), "ncclCommCount");
  nccl_check(ncclCommUserRank(static_cast<ncclComm_t>(comm), &rank), "ncclCommUserRank");
  nccl_check(ncclAllGather(data + int64_t(rank) * n, data, size_t(n), ncclFloat32, static_cast<ncclComm_t>(comm),
                           detail::cuda_stream()),
             "ncclAllGather");
  CUDA_CHECK_LAUNCH("ncclAllGather");
}

}  // namespace llamatrain::cuda
