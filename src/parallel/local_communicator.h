// LocalCommunicator: N ranks as threads of one process, exchanging through shared memory, so that
// everything above the Communicator interface is unit-tested without mpirun. Collectives meet at a
// barrier, read each other's published buffers and sum in rank order (every rank gets bitwise the
// same result); sends are buffered (complete at once), receives wait for a matching message;
// iall_reduce completes before it returns. abort() and the watchdog end the whole process, which
// holds every rank. Tests and single-process tools only: no performance intended.
#pragma once

#include <functional>

#include "parallel/communicator.h"

namespace llamatrain::parallel {

// Runs body(world) on `size` threads, rank r on thread r, and returns when all have returned. An
// exception escaping body on any rank aborts the process with its message (as it would end an MPI job).
void run_local_ranks(int size, const std::function<void(Communicator& world)>& body, const CommOptions& options = {});

}  // namespace llamatrain::parallel
