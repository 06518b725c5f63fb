// The MPI program tests/parallel/mpi_failure_test.cpp runs under mpirun to see how a job ends when a
// rank fails. Usage: mpi_failure_worker SCENARIO DIR
//   kill  rank 1 kills itself with SIGKILL inside a loop of all-reduces
//   hang  rank 2 sleeps 60 s before its 6th all-reduce (collective #7); the watchdog (2 s) must end the job
//   recv  rank 1 receives into a buffer smaller than the message: an MPI error named by rank and call
//   recv_late  the same, with the message in before its receive is posted (rank 1 first takes a later
//              message from rank 0, which MPI delivers in order): the receive has failed before its wait
// Every rank writes DIR/pid.RANK first and DIR/finished.RANK if it ever gets to the end. Tests only.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "parallel/mpi_communicator.h"

using namespace llamatrain::parallel;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: mpi_failure_worker kill|hang|recv|recv_late DIR\n");
    return 2;
  }
  const std::string scenario = argv[1], dir = argv[2];
  CommOptions options;
  options.watchdog_timeout_s = scenario == "hang" ? 2 : 60;
  auto world = make_mpi_world(options);
  const int rank = world->rank();
  std::ofstream(dir + "/pid." + std::to_string(rank)) << getpid() << "\n";
  world->barrier();

  std::vector<float> x(1024, 1.0f);
  if (scenario == "kill") {
    for (int i = 0; i < 1000000; ++i) {
      if (rank == 1 && i == 100) ::raise(SIGKILL);
      world->all_reduce(x.data(), x.size());
      std::fill(x.begin(), x.end(), 1.0f);
    }
  } else if (scenario == "hang") {
    for (int i = 1; i <= 10; ++i) {
      if (rank == 2 && i == 6) std::this_thread::sleep_for(std::chrono::seconds(60));
      world->all_reduce(x.data(), x.size());
    }
  } else if (scenario == "recv") {
    if (rank == 0) world->isend(x.data(), 64, 1, 5).wait();
    if (rank == 1) world->irecv(x.data(), 32, 0, 5).wait();
    world->barrier();
  } else if (scenario == "recv_late") {
    if (rank == 0) {
      world->isend(x.data(), 64, 1, 5).wait();
      world->isend(x.data(), 0, 1, 6).wait();
    }
    if (rank == 1) {
      world->irecv(x.data(), 0, 0, 6).wait();
      world->irecv(x.data(), 32, 0, 5).wait();
    }
    world->barrier();
  }
  std::ofstream(dir + "/finished." + std::to_string(rank)) << "done\n";
  return 0;
}
