// parallel/local_communicator: every collective, point-to-point and split on 1 to 8 thread ranks
// against values computed on one rank (tests/parallel/collective_checks.h); the groups of every
// layout up to 8 ranks; and failures: abort(), an exception on one rank, and a rank that never joins a
// collective, which the watchdog reports by rank and operation before ending the process.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "collective_checks.h"
#include "core/error.h"
#include "parallel/local_communicator.h"

namespace llamatrain::parallel {
namespace {

using testing::test_options;

TEST(LocalCommunicator, CollectivesOnOneToEightRanks) {
  for (int size : {1, 2, 3, 4, 5, 8}) {
    run_local_ranks(
        size,
        [&](Communicator& world) {
          EXPECT_EQ(world.size(), size);
          EXPECT_EQ(world.world_rank(), world.rank());
          EXPECT_EQ(world.name(), "world");
          testing::check_collectives(world, std::to_string(size) + " local ranks");
        },
        test_options());
  }
}

TEST(LocalCommunicator, CollectivesOnSplitCommunicators) {
  // The checks again on each half of 6 ranks (members 0,2,4 and 1,3,5): ranks there are not world ranks.
  run_local_ranks(
      6,
      [](Communicator& world) {
        auto half = world.split(world.rank() % 2, world.rank(), "half");
        ASSERT_NE(half, nullptr);
        EXPECT_EQ(half->size(), 3);
        EXPECT_EQ(half->rank(), world.rank() / 2);
        testing::check_collectives(*half, "half of 6");
      },
      test_options());
}

TEST(LocalCommunicator, GroupsOfEveryLayoutUpToEightRanks) {
  for (int size : {1, 2, 4, 6, 8})
    run_local_ranks(
        size, [](Communicator& world) { testing::check_all_layouts(world); }, test_options());
}

TEST(LocalCommunicator, OperationsAreNumberedPerCommunicator) {
  run_local_ranks(
      2,
      [](Communicator& world) {
        float x = 1;
        world.all_reduce(&x, 1);
        world.barrier();
        EXPECT_NE(world.current_operation().find("barrier #2 on 'world' (world ranks 0,1)"), std::string::npos)
            << world.current_operation();
        auto sub = world.split(0, 0, "tp");
        sub->all_reduce(&x, 1);
        EXPECT_NE(sub->current_operation().find("all_reduce #1 on 'tp' (world ranks 0,1), 1 x f32"), std::string::npos)
            << sub->current_operation();
      },
      test_options());
}

TEST(LocalCommunicator, WatchdogTimeoutFromOptionsEnvironmentOrDefault) {
  ::unsetenv("LLAMATRAIN_WATCHDOG_TIMEOUT");
  EXPECT_EQ(resolve_watchdog_timeout({}), kDefaultWatchdogTimeoutS);
  EXPECT_EQ(kDefaultWatchdogTimeoutS, 300);
  ::setenv("LLAMATRAIN_WATCHDOG_TIMEOUT", "2.5", 1);
  EXPECT_EQ(resolve_watchdog_timeout({}), 2.5);
  CommOptions explicit_timeout;
  explicit_timeout.watchdog_timeout_s = 7;
  EXPECT_EQ(resolve_watchdog_timeout(explicit_timeout), 7);
  for (const char* bad : {"soon", "-1", "5s", "nan"}) {
    ::setenv("LLAMATRAIN_WATCHDOG_TIMEOUT", bad, 1);
    try {
      resolve_watchdog_timeout({});
      ADD_FAILURE() << "no error for " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::string("LLAMATRAIN_WATCHDOG_TIMEOUT: got '") + bad + "', expected a number of seconds"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("hint:"), std::string::npos) << msg;
    }
  }
  ::unsetenv("LLAMATRAIN_WATCHDOG_TIMEOUT");
}

TEST(LocalCommunicator, LongWaitTimeoutFromEnvironmentOrDefault) {
  ::unsetenv("LLAMATRAIN_WATCHDOG_LONG_TIMEOUT");
  EXPECT_EQ(resolve_long_wait_timeout(), kDefaultLongWaitTimeoutS);
  EXPECT_EQ(kDefaultLongWaitTimeoutS, 4 * 3600);
  ::setenv("LLAMATRAIN_WATCHDOG_LONG_TIMEOUT", "90", 1);
  EXPECT_EQ(resolve_long_wait_timeout(), 90);
  for (const char* bad : {"later", "0", "-3", "1h"}) {
    ::setenv("LLAMATRAIN_WATCHDOG_LONG_TIMEOUT", bad, 1);
    try {
      resolve_long_wait_timeout();
      ADD_FAILURE() << "no error for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("LLAMATRAIN_WATCHDOG_LONG_TIMEOUT: got '") + bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
  ::unsetenv("LLAMATRAIN_WATCHDOG_LONG_TIMEOUT");
}

TEST(LocalCommunicator, ALongWaitOutlastsTheWatchdogTimeout) {
  // Rank 1 works alone for three watchdog timeouts before joining; rank 0 waits under a LongWait.
  CommOptions o;
  o.watchdog_timeout_s = 0.3;
  run_local_ranks(
      2,
      [](Communicator& world) {
        if (world.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(900));
        {
          Communicator::LongWait wait(world.rank() == 0 ? &world : nullptr, 30, "rank 1 writing a checkpoint");
          world.barrier();
          if (world.rank() == 0) {
            EXPECT_NE(world.current_operation().find("barrier #1 on 'world' (world ranks 0,1), no data (waiting "
                                                     "for rank 1 writing a checkpoint)"),
                      std::string::npos)
                << world.current_operation();
          }
        }
        world.barrier();  // outside the LongWait: the plain timeout again, met at once
        EXPECT_EQ(world.current_operation().find("waiting for"), std::string::npos) << world.current_operation();
      },
      o);
}

using LocalCommunicatorDeathTest = ::testing::Test;

TEST_F(LocalCommunicatorDeathTest, ALongWaitStillEnds) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CommOptions o;
  o.watchdog_timeout_s = 0.3;
  EXPECT_DEATH(run_local_ranks(
                   2,
                   [](Communicator& world) {
                     if (world.rank() == 1) return;  // never joins
                     Communicator::LongWait wait(&world, 1.0, "rank 1 writing a checkpoint");
                     world.barrier();
                   },
                   o),
               "\\[rank 0\\] watchdog: barrier #1 on 'world' \\(world ranks 0,1\\), no data \\(waiting for rank 1 "
               "writing a checkpoint\\) has not completed after 1\\.[0-9] s\nhint: .*raise "
               "LLAMATRAIN_WATCHDOG_LONG_TIMEOUT \\(seconds, now 1;");
}

TEST_F(LocalCommunicatorDeathTest, AbortEndsEveryRankWithTheMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(run_local_ranks(3,
                               [](Communicator& world) {
                                 if (world.rank() == 1) world.abort("the data on this rank is bad");
                                 world.barrier();
                               }),
               "\\[rank 1\\] abort: the data on this rank is bad");
}

TEST_F(LocalCommunicatorDeathTest, AnExceptionOnOneRankEndsEveryRank) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(run_local_ranks(2,
                               [](Communicator& world) {
                                 if (world.rank() == 0) fail("config: got {}, expected {}", 1, 2);
                                 world.barrier();
                               }),
               "\\[rank 0\\] abort: uncaught exception: config: got 1, expected 2");
}

TEST_F(LocalCommunicatorDeathTest, WatchdogNamesTheWaitingRankAndOperation) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CommOptions o;
  o.watchdog_timeout_s = 0.5;
  // Rank 1 leaves after the first all_reduce; ranks 0 and 2 wait in the second one forever.
  EXPECT_DEATH(run_local_ranks(
                   3,
                   [](Communicator& world) {
                     double x = 1;
                     world.all_reduce(&x, 1);
                     if (world.rank() == 1) return;
                     world.all_reduce(&x, 1);
                   },
                   o),
               "\\[rank [02]\\] watchdog: all_reduce #2 on 'world' \\(world ranks 0,1,2\\), 1 x f64 has not "
               "completed after [0-9.]+ s\nhint: a rank of that communicator has not joined");
}

TEST_F(LocalCommunicatorDeathTest, WatchdogCoversReceives) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CommOptions o;
  o.watchdog_timeout_s = 0.5;
  EXPECT_DEATH(run_local_ranks(
                   2,
                   [](Communicator& world) {
                     int v = 0;
                     if (world.rank() == 0) world.irecv(&v, sizeof v, 1, 3).wait();  // rank 1 never sends
                   },
                   o),
               "\\[rank 0\\] watchdog: wait for irecv #1 on 'world' \\(world ranks 0,1\\), 4 bytes from rank 1 tag 3");
}

TEST_F(LocalCommunicatorDeathTest, AReceiveOfTheWrongSizeIsNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(run_local_ranks(2,
                               [](Communicator& world) {
                                 double d[2] = {1, 2};
                                 if (world.rank() == 0) world.isend(d, sizeof d, 1, 0).wait();
                                 if (world.rank() == 1) world.irecv(d, sizeof(double), 0, 0).wait();
                               }),
               "\\[rank 1\\] irecv #1 on 'world' \\(world ranks 0,1\\), 8 bytes from rank 0 tag 0: received 16 "
               "bytes, expected 8");
}

}  // namespace
}  // namespace llamatrain::parallel
