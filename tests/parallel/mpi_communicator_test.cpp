// parallel/mpi_communicator: the checks of tests/parallel/collective_checks.h on MPI ranks. Run
// plainly it is an MPI singleton (world of 1: llamatrain keeps working without a launcher); ctest
// also runs it under mpirun on 2, 3 (with every operation split into many small MPI calls:
// --max-message-bytes 24) and 8 ranks (label "mpi"). Each rank runs every test; a failure on any rank
// fails the run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "collective_checks.h"
#include "core/error.h"
#include "parallel/mpi_communicator.h"

namespace llamatrain::parallel {
namespace {

Communicator* g_world = nullptr;
size_t g_max_message_bytes = 0;

TEST(MpiCommunicator, WorldMatchesTheLauncher) {
  Communicator& world = *g_world;
  // mpirun exports the job size; a plain run has none and is a singleton.
  const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(world.size(), launched ? std::atoi(launched) : 1);
  EXPECT_EQ(world.world_rank(), world.rank());
  EXPECT_EQ(world.name(), "world");
  EXPECT_EQ(check_rank(), world.rank());
}

TEST(MpiCommunicator, Collectives) { testing::check_collectives(*g_world, "mpi world"); }

TEST(MpiCommunicator, CollectivesOnASplitCommunicator) {
  auto half = g_world->split(g_world->rank() % 2, g_world->rank(), "half");
  ASSERT_NE(half, nullptr);
  testing::check_collectives(*half, "mpi half");
}

TEST(MpiCommunicator, GroupsOfEveryLayout) { testing::check_all_layouts(*g_world); }

TEST(MpiCommunicator, CommPairsOnEveryTpSize) {
  Communicator& world = *g_world;
  for (int tp = 1; tp <= world.size(); ++tp) {
    if (world.size() % tp) continue;
    const ParallelLayout l = ParallelLayout::make(world.size(), tp, 1, world.rank());
    ParallelGroups g = ParallelGroups::make(world, l);
    testing::check_each_pair(*g.tp, 3, 5);
    testing::check_tp_mlp(*g.tp, 3, 5, 3);
  }
}

TEST(MpiCommunicator, DataParallelHelpers) {
  for (size_t n : {1, 1000}) {
    for (size_t bucket : {0, 7, 64}) testing::check_grad_reducer(*g_world, n, bucket, 5);
    for (size_t bucket : {0, 7, 64}) testing::check_grad_reducer_in_order(*g_world, n, 9, bucket, 4);
  }
  for (size_t n : {1, 17, 1000}) testing::check_zero1(*g_world, n, 16);
}

TEST(MpiCommunicator, LargeBuffers) {
  // 3M floats per rank (12 MB through shared memory); 3000 calls' worth when messages are tiny.
  Communicator& world = *g_world;
  const size_t n = g_max_message_bytes >= (size_t(1) << 20) ? size_t(3) << 20 : 3000 * g_max_message_bytes / 4;
  std::vector<float> x(n, float(world.rank() + 1));
  world.all_reduce(x.data(), n);
  const float want = float(world.size() * (world.size() + 1) / 2);
  size_t wrong = 0;
  for (float v : x) wrong += v != want;
  EXPECT_EQ(wrong, 0u);
}

}  // namespace
}  // namespace llamatrain::parallel

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  llamatrain::parallel::CommOptions options;
  options.watchdog_timeout_s = 60;  // a hang fails the run in a minute
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--max-message-bytes") == 0) options.max_message_bytes = std::stoul(argv[i + 1]);
  llamatrain::parallel::g_max_message_bytes = options.max_message_bytes;
  auto world = llamatrain::parallel::make_mpi_world(options);
  llamatrain::parallel::g_world = world.get();
  const int failed = RUN_ALL_TESTS();
  world.reset();
  return failed;
}
