// parallel/data_parallel: ZeRO-1 shards cover an arena exactly for many sizes; the bucketed gradient
// all-reduce gives every rank the mean of the ranks' gradients (buckets of 1, odd, whole and larger
// than the arena, reported in backward order, two steps on one reducer); ZeRO-1's reduce-scatter,
// shard update and all-gather equal the single-rank update. DP 1 to 4 thread ranks.
#include <gtest/gtest.h>

#include "collective_checks.h"
#include "parallel/local_communicator.h"

namespace llamatrain::parallel {
namespace {

using testing::test_options;

TEST(ZeroShards, ShardsCoverTheArenaExactlyAndAreBalanced) {
  for (size_t n : {0, 1, 2, 15, 16, 17, 100, 1000, 4097, 1000003})
    for (int dp = 1; dp <= 9; ++dp)
      for (size_t align : {1, 2, 16, 128}) {
        SCOPED_TRACE("n " + std::to_string(n) + " dp " + std::to_string(dp) + " align " + std::to_string(align));
        const ZeroShards s(n, dp, align);
        EXPECT_EQ(s.shard_size() % align, 0u);
        EXPECT_GE(s.padded_size(), n);
        EXPECT_LE(s.padded_size(), n + size_t(dp) * align);  // at most one align of padding per rank
        EXPECT_EQ(s.padded_size(), s.shard_size() * size_t(dp));
        size_t next = 0;
        for (int r = 0; r < dp; ++r) {
          const ShardRange range = s.range(r);
          EXPECT_EQ(range.begin, next) << "rank " << r;  // contiguous, in rank order, no gap or overlap
          EXPECT_LE(range.size(), s.shard_size());
          if (range.end < n) {
            EXPECT_EQ(range.size(), s.shard_size()) << "rank " << r;  // only the tail is short
          }
          next = range.end;
        }
        EXPECT_EQ(next, n);
        // Deterministic: the same inputs give the same split.
        EXPECT_EQ(ZeroShards(n, dp, align).shard_size(), s.shard_size());
      }
}

TEST(GradReducer, MeanOverRanksForEveryBucketing) {
  for (int dp : {1, 2, 3, 4})
    run_local_ranks(
        dp,
        [](Communicator& c) {
          for (size_t n : {0, 1, 17, 1000})
            for (size_t bucket : {0, 1, 7, 1000, 5000})
              for (size_t chunk : {1, 5, 1000}) {
                if (bucket == 1 && n == 1000) continue;  // 1000 one-element buckets: slow and adds nothing
                testing::check_grad_reducer(c, n, bucket, chunk);
              }
        },
        test_options());
}

TEST(GradReducer, BucketsAlongTheBackwardOrder) {
  for (int dp : {1, 2, 3})
    run_local_ranks(
        dp,
        [](Communicator& c) {
          for (size_t n : {10, 1000})
            for (size_t pieces : {1, 5, 9})
              for (size_t bucket : {0, 3, 64, 5000})
                for (size_t reported : {0, 2, 100})
                  testing::check_grad_reducer_in_order(c, n, pieces, bucket, reported);
        },
        test_options());
}

TEST(GradReducer, ReportingARangeTwiceIsAnInvariantFailure) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(run_local_ranks(1,
                               [](Communicator& c) {
                                 std::vector<float> g(10);
                                 GradReducer reducer(c, g.data(), g.size(), 4);
                                 reducer.ready(0, 3);
                                 reducer.ready(2, 4);
                               }),
               "reported ready twice");
}

TEST(Zero1, ShardedUpdateEqualsTheSingleRankUpdate) {
  for (int dp : {1, 2, 3, 4})
    run_local_ranks(
        dp,
        [](Communicator& c) {
          for (size_t n : {1, 17, 1000})
            for (size_t align : {1, 16}) testing::check_zero1(c, n, align);
        },
        test_options());
}

}  // namespace
}  // namespace llamatrain::parallel
