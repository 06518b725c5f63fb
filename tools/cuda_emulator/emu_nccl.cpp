// The emulator's NCCL (kernels/cuda/ops.h's nccl_* calls) over MPI on the emulated device's memory:
// the id is random bytes that the caller hands to the members as it would NCCL's; a group is the MPI
// communicator split off MPI_COMM_WORLD by that id, so every process of the job must make a group at
// the same time (as data-parallel training does: each rank its own replica group); the collectives
// run MPI's on the device memory, opened for them (emu_memory.h). Sums of two members add in the same
// order as NCCL's; of more, MPI's order may differ from NCCL's ring.
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "core/error.h"
#include "emu_memory.h"
#include "kernels/cuda/ops.h"

namespace llamatrain::cuda {

namespace {

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  throw Error(fmt::format("emulated NCCL: {} failed (MPI error {})", call, rc), "nccl");
}

constexpr int64_t kPiece = int64_t(1) << 30;

}  // namespace

std::string nccl_version() { return "emulated over MPI"; }

void nccl_unique_id(void* out) {
  std::random_device rd;
  auto* bytes = static_cast<unsigned char*>(out);
  for (size_t i = 0; i < kNcclIdBytes; i++) bytes[i] = static_cast<unsigned char>(rd());
}

void* nccl_init(const void* id, int nranks, int rank) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw Error("emulated NCCL: MPI is not initialized (the job's communicator makes groups)", "nccl");
  unsigned color = 2166136261u;  // FNV-1a of the id
  for (size_t i = 0; i < kNcclIdBytes; i++) color = (color ^ static_cast<const unsigned char*>(id)[i]) * 16777619u;
  auto* comm = new MPI_Comm;
  mpi_check(MPI_Comm_split(MPI_COMM_WORLD, int(color & 0x7fffffff), rank, comm), "MPI_Comm_split");
  int size = 0;
  MPI_Comm_size(*comm, &size);
  if (size != nranks)
    throw Error(fmt::format("emulated NCCL: the group has {} members, expected {}", size, nranks), "nccl");
  return comm;
}

void nccl_destroy(void* comm) noexcept {
  if (!comm) return;
  auto* c = static_cast<MPI_Comm*>(comm);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(c);
  delete c;
}

void nccl_all_reduce_sum(void* comm, float* data, int64_t n) {
  emu::DeviceAccess access;
  for (int64_t first = 0; first < n; first += kPiece)
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, data + first, int(std::min(kPiece, n - first)), MPI_FLOAT, MPI_SUM,
                            *static_cast<MPI_Comm*>(comm)),
              "MPI_Allreduce");
}

void nccl_all_gather(void* comm, float* data, int64_t n) {
  emu::DeviceAccess access;
  mpi_check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, int(n), MPI_FLOAT, *static_cast<MPI_Comm*>(comm)),
            "MPI_Allgather");
}

}  // namespace llamatrain::cuda
