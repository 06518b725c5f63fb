// parallel/comm_pairs: each TP/SP communication pair forward and backward against its definition,
// and composed into a tiny column-parallel / row-parallel MLP whose output and every gradient match
// the unsharded MLP (tests/parallel/collective_checks.h), on TP 1, 2 and 4 thread ranks with awkward
// sizes (one row, odd widths).
#include <gtest/gtest.h>

#include "collective_checks.h"
#include "parallel/local_communicator.h"

namespace llamatrain::parallel {
namespace {

using testing::test_options;

TEST(CommPairs, EachPairForwardAndBackward) {
  for (int tp : {1, 2, 4})
    run_local_ranks(
        tp,
        [](Communicator& c) {
          for (size_t n_local : {1, 3})
            for (size_t cols : {1, 5, 17}) testing::check_each_pair(c, n_local, cols);
        },
        test_options());
}

TEST(CommPairs, ShardedMlpMatchesUnsharded) {
  for (int tp : {1, 2, 4})
    run_local_ranks(
        tp,
        [](Communicator& c) {
          testing::check_tp_mlp(c, 1, 1, 1);
          testing::check_tp_mlp(c, 3, 5, 3);
          testing::check_tp_mlp(c, 2, 8, 7);
        },
        test_options());
}

TEST(CommPairs, PairsOnTheTpGroupOfAMixedLayout) {
  // TP 2 inside 8 ranks (PP 2, DP 2): the pairs run on a split communicator, four groups at once.
  run_local_ranks(
      8,
      [](Communicator& world) {
        const ParallelLayout l = ParallelLayout::make(world.size(), 2, 2, world.rank());
        ParallelGroups g = ParallelGroups::make(world, l);
        testing::check_each_pair(*g.tp, 3, 5);
        testing::check_tp_mlp(*g.tp, 3, 5, 3);
      },
      test_options());
}

}  // namespace
}  // namespace llamatrain::parallel
