// MpiCommunicator: the Communicator over MPI (OpenMPI from Debian; any MPI-3 library should do).
// make_mpi_world() initializes MPI with MPI_THREAD_MULTIPLE (so the watchdog thread may call
// MPI_Abort while the main thread waits in a collective) and returns MPI_COMM_WORLD. Under mpirun
// or srun it holds the job's ranks; a plain program is an MPI singleton of size 1 (OpenMPI's
// isolated singleton: no helper daemon). Every MPI call is checked: a failure prints the rank, the
// MPI call and the operation, and MPI_Abort brings every rank down. This is the only file pair that
// includes mpi.h, and only in the .cpp.
#pragma once

#include <memory>

#include "parallel/communicator.h"

namespace llamatrain::parallel {

// Call once per process, from the thread that will make the communication calls. MPI is finalized
// when the world and every communicator split from it have been destroyed (unless MPI was already
// initialized by someone else). Also sets check_rank() to this process's rank.
std::unique_ptr<Communicator> make_mpi_world(const CommOptions& options = {});

}  // namespace llamatrain::parallel
