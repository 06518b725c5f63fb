// parallel/layout: ParallelLayout against hand-made tables (one copied from Megatron-LM's
// initialize_model_parallel docstring: 16 GPUs, TP 2, PP 4), coordinates round-trip for every rank of
// many layouts, and the errors for layouts that cannot be built name the config keys and the fix.
#include <gtest/gtest.h>

#include <array>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/layout.h"

namespace llamatrain::parallel {
namespace {

using Groups = std::vector<std::vector<int>>;

// The group of `groups` that holds `rank` (empty when none does).
std::vector<int> group_of(const Groups& groups, int rank) {
  for (const auto& g : groups)
    for (int r : g)
      if (r == rank) return g;
  return {};
}

struct Table {
  int world, tp, pp;
  std::vector<std::array<int, 3>> coords;  // rank -> (tp, pp, dp)
  Groups tp_groups, pp_groups, dp_groups, mp_groups, embedding_groups;
};

void check_table(const Table& t) {
  const std::string where =
      "TP" + std::to_string(t.tp) + " PP" + std::to_string(t.pp) + " on " + std::to_string(t.world);
  for (int rank = 0; rank < t.world; ++rank) {
    SCOPED_TRACE(where + ", rank " + std::to_string(rank));
    const ParallelLayout l = ParallelLayout::make(t.world, t.tp, t.pp, rank);
    EXPECT_EQ(l.dp_size, t.world / (t.tp * t.pp));
    if (!t.coords.empty()) {
      EXPECT_EQ(l.tp_rank, t.coords[size_t(rank)][0]);
      EXPECT_EQ(l.pp_rank, t.coords[size_t(rank)][1]);
      EXPECT_EQ(l.dp_rank, t.coords[size_t(rank)][2]);
    }
    EXPECT_EQ(l.tp_group(), group_of(t.tp_groups, rank));
    EXPECT_EQ(l.pp_group(), group_of(t.pp_groups, rank));
    EXPECT_EQ(l.dp_group(), group_of(t.dp_groups, rank));
    if (!t.mp_groups.empty()) {
      EXPECT_EQ(l.mp_group(), group_of(t.mp_groups, rank));
    }
    EXPECT_EQ(l.embedding_group(), group_of(t.embedding_groups, rank));
  }
}

TEST(ParallelLayout, MegatronDocstringExample16RanksTp2Pp4) {
  check_table({.world = 16,
               .tp = 2,
               .pp = 4,
               .coords = {},
               .tp_groups = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}},
               .pp_groups = {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}},
               .dp_groups = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}},
               .mp_groups = {{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}},
               .embedding_groups = {{0, 12}, {1, 13}, {2, 14}, {3, 15}}});
}

TEST(ParallelLayout, Tp2Pp2Dp2On8) {
  check_table({.world = 8,
               .tp = 2,
               .pp = 2,
               .coords = {{0, 0, 0}, {1, 0, 0}, {0, 0, 1}, {1, 0, 1}, {0, 1, 0}, {1, 1, 0}, {0, 1, 1}, {1, 1, 1}},
               .tp_groups = {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
               .pp_groups = {{0, 4}, {1, 5}, {2, 6}, {3, 7}},
               .dp_groups = {{0, 2}, {1, 3}, {4, 6}, {5, 7}},
               .mp_groups = {{0, 1, 4, 5}, {2, 3, 6, 7}},
               .embedding_groups = {{0, 4}, {1, 5}, {2, 6}, {3, 7}}});
}

TEST(ParallelLayout, PipelineOnlyEmbeddingIsFirstAndLastStage) {
  check_table({.world = 4,
               .tp = 1,
               .pp = 4,
               .coords = {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {0, 3, 0}},
               .tp_groups = {{0}, {1}, {2}, {3}},
               .pp_groups = {{0, 1, 2, 3}},
               .dp_groups = {{0}, {1}, {2}, {3}},
               .mp_groups = {{0, 1, 2, 3}},
               .embedding_groups = {{0, 3}}});  // ranks 1 and 2 hold no embedding
}

TEST(ParallelLayout, TensorOnlyAndDataOnly) {
  check_table({.world = 4,
               .tp = 4,
               .pp = 1,
               .coords = {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0}},
               .tp_groups = {{0, 1, 2, 3}},
               .pp_groups = {{0}, {1}, {2}, {3}},
               .dp_groups = {{0}, {1}, {2}, {3}},
               .mp_groups = {{0, 1, 2, 3}},
               .embedding_groups = {{0}, {1}, {2}, {3}}});
  check_table({.world = 4,
               .tp = 1,
               .pp = 1,
               .coords = {{0, 0, 0}, {0, 0, 1}, {0, 0, 2}, {0, 0, 3}},
               .tp_groups = {{0}, {1}, {2}, {3}},
               .pp_groups = {{0}, {1}, {2}, {3}},
               .dp_groups = {{0, 1, 2, 3}},
               .mp_groups = {{0}, {1}, {2}, {3}},
               .embedding_groups = {{0}, {1}, {2}, {3}}});
  check_table({.world = 1,
               .tp = 1,
               .pp = 1,
               .coords = {{0, 0, 0}},
               .tp_groups = {{0}},
               .pp_groups = {{0}},
               .dp_groups = {{0}},
               .mp_groups = {{0}},
               .embedding_groups = {{0}}});
}

TEST(ParallelLayout, SixRanksThreeWays) {
  // TP 2 PP 3: rank = pp * 2 + tp; the middle stage (ranks 2, 3) holds no embedding.
  check_table({.world = 6,
               .tp = 2,
               .pp = 3,
               .coords = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 2, 0}, {1, 2, 0}},
               .tp_groups = {{0, 1}, {2, 3}, {4, 5}},
               .pp_groups = {{0, 2, 4}, {1, 3, 5}},
               .dp_groups = {{0}, {1}, {2}, {3}, {4}, {5}},
               .mp_groups = {{0, 1, 2, 3, 4, 5}},
               .embedding_groups = {{0, 4}, {1, 5}}});
  // TP 1 PP 2 DP 3: rank = pp * 3 + dp
  check_table({.world = 6,
               .tp = 1,
               .pp = 2,
               .coords = {{0, 0, 0}, {0, 0, 1}, {0, 0, 2}, {0, 1, 0}, {0, 1, 1}, {0, 1, 2}},
               .tp_groups = {{0}, {1}, {2}, {3}, {4}, {5}},
               .pp_groups = {{0, 3}, {1, 4}, {2, 5}},
               .dp_groups = {{0, 1, 2}, {3, 4, 5}},
               .mp_groups = {{0, 3}, {1, 4}, {2, 5}},
               .embedding_groups = {{0, 3}, {1, 4}, {2, 5}}});
  // TP 3 PP 1 DP 2: rank = dp * 3 + tp
  check_table({.world = 6,
               .tp = 3,
               .pp = 1,
               .coords = {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {0, 0, 1}, {1, 0, 1}, {2, 0, 1}},
               .tp_groups = {{0, 1, 2}, {3, 4, 5}},
               .pp_groups = {{0}, {1}, {2}, {3}, {4}, {5}},
               .dp_groups = {{0, 3}, {1, 4}, {2, 5}},
               .mp_groups = {{0, 1, 2}, {3, 4, 5}},
               .embedding_groups = {{0}, {1}, {2}, {3}, {4}, {5}}});
}

// For every layout of up to 24 ranks: coordinates round-trip, each kind of group partitions the world,
// and a rank's index in its TP / PP / DP group is its coordinate.
TEST(ParallelLayout, GroupsPartitionTheWorldForEveryLayout) {
  for (int world = 1; world <= 24; ++world)
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 1; tp * pp <= world; ++pp) {
        if (world % (tp * pp)) continue;
        SCOPED_TRACE("TP" + std::to_string(tp) + " PP" + std::to_string(pp) + " on " + std::to_string(world));
        std::set<std::vector<int>> tp_groups, pp_groups, dp_groups;
        for (int rank = 0; rank < world; ++rank) {
          const ParallelLayout l = ParallelLayout::make(world, tp, pp, rank);
          ASSERT_EQ(l.rank_of(l.tp_rank, l.pp_rank, l.dp_rank), rank);
          EXPECT_EQ(l.tp_group()[size_t(l.tp_rank)], rank);
          EXPECT_EQ(l.pp_group()[size_t(l.pp_rank)], rank);
          EXPECT_EQ(l.dp_group()[size_t(l.dp_rank)], rank);
          tp_groups.insert(l.tp_group());
          pp_groups.insert(l.pp_group());
          dp_groups.insert(l.dp_group());
        }
        for (const auto* kind : {&tp_groups, &pp_groups, &dp_groups}) {
          std::multiset<int> members;
          for (const auto& g : *kind) members.insert(g.begin(), g.end());
          EXPECT_EQ(members.size(), size_t(world));
          EXPECT_EQ(std::set<int>(members.begin(), members.end()).size(), size_t(world));
        }
        EXPECT_EQ(tp_groups.size(), size_t(world / tp));
        EXPECT_EQ(pp_groups.size(), size_t(world / pp));
        EXPECT_EQ(dp_groups.size(), size_t(tp * pp));
      }
}

std::string error_of(int world, int tp, int pp) {
  try {
    ParallelLayout::make(world, tp, pp, 0);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ParallelLayout, ImpossibleLayoutsAreErrorsNamingTheKeys) {
  const std::string not_divisor = error_of(6, 4, 1);
  EXPECT_NE(not_divisor.find("model.tensor_model_parallel_size 4 x model.pipeline_model_parallel_size 1 = 4 does "
                             "not divide the 6 processes"),
            std::string::npos)
      << not_divisor;
  EXPECT_NE(not_divisor.find("hint: start a multiple of 4 processes"), std::string::npos) << not_divisor;
  const std::string product = error_of(8, 2, 3);
  EXPECT_NE(product.find("2 x model.pipeline_model_parallel_size 3 = 6 does not divide the 8"), std::string::npos)
      << product;
  EXPECT_NE(error_of(4, 8, 1).find("= 8 does not divide the 4 processes"), std::string::npos);
  const std::string zero_tp = error_of(4, 0, 1);
  EXPECT_NE(zero_tp.find("model.tensor_model_parallel_size: got 0, expected a positive integer"), std::string::npos)
      << zero_tp;
  const std::string negative_pp = error_of(4, 1, -2);
  EXPECT_NE(negative_pp.find("model.pipeline_model_parallel_size: got -2, expected a positive integer"),
            std::string::npos)
      << negative_pp;
}

}  // namespace
}  // namespace llamatrain::parallel
