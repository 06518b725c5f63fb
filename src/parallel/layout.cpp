// ParallelLayout: coordinates and group members from Megatron's rank order; ParallelGroups: one
// split of the world per group kind, with the color naming the group and the key its order.
#include "parallel/layout.h"

#include "core/error.h"

namespace llamatrain::parallel {

FieldNames ParallelLayout::default_names() {
  return FieldNames("", {{"tp_size", "model.tensor_model_parallel_size"},
                         {"pp_size", "model.pipeline_model_parallel_size"},
                         {"world_size", "processes of this job"},
                         {"layout", "parallel layout"}});
}

void ParallelLayout::check(int world_size, int tp_size, int pp_size, const FieldNames& names) {
  if (tp_size < 1)
    fail("{}: got {}, expected a positive integer\nhint: 1 means no tensor parallelism", names.head("tp_size"),
         tp_size);
  if (pp_size < 1)
    fail("{}: got {}, expected a positive integer\nhint: 1 means no pipeline parallelism", names.head("pp_size"),
         pp_size);
  const int64_t mp = int64_t(tp_size) * pp_size;
  if (world_size % mp != 0)
    fail("{}: {} {} x {} {} = {} does not divide the {} {}, expected a divisor of {}\nhint: start a multiple of {} "
         "processes (mpirun -np N, srun --ntasks N), or choose TP and PP whose product divides {}",
         names.head("layout"), names("tp_size"), tp_size, names("pp_size"), pp_size, mp, world_size,
         names("world_size"), world_size, mp, world_size);
}

ParallelLayout ParallelLayout::make(int world_size, int tp_size, int pp_size, int rank) {
  CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "rank {} of a world of {}", rank, world_size);
  check(world_size, tp_size, pp_size);
  const int64_t mp = int64_t(tp_size) * pp_size;
  ParallelLayout l;
  l.world_size = world_size;
  l.tp_size = tp_size;
  l.pp_size = pp_size;
  l.dp_size = int(world_size / mp);
  l.rank = rank;
  // rank = (pp * DP + dp) * TP + tp
  l.tp_rank = rank % tp_size;
  l.dp_rank = (rank / tp_size) % l.dp_size;
  l.pp_rank = rank / (tp_size * l.dp_size);
  CHECK(l.rank_of(l.tp_rank, l.pp_rank, l.dp_rank) == rank);
  return l;
}

std::vector<int> ParallelLayout::tp_group() const {
  std::vector<int> g;
  for (int t = 0; t < tp_size; ++t) g.push_back(rank_of(t, pp_rank, dp_rank));
  return g;
}

std::vector<int> ParallelLayout::pp_group() const {
  std::vector<int> g;
  for (int p = 0; p < pp_size; ++p) g.push_back(rank_of(tp_rank, p, dp_rank));
  return g;
}

std::vector<int> ParallelLayout::dp_group() const {
  std::vector<int> g;
  for (int d = 0; d < dp_size; ++d) g.push_back(rank_of(tp_rank, pp_rank, d));
  return g;
}

std::vector<int> ParallelLayout::mp_group() const {
  std::vector<int> g;
  for (int p = 0; p < pp_size; ++p)
    for (int t = 0; t < tp_size; ++t) g.push_back(rank_of(t, p, dp_rank));
  return g;
}

std::vector<int> ParallelLayout::embedding_group() const {
  if (!is_first_stage() && !is_last_stage()) return {};
  if (pp_size == 1) return {rank};
  return {rank_of(tp_rank, 0, dp_rank), rank_of(tp_rank, pp_size - 1, dp_rank)};
}

ParallelGroups ParallelGroups::make(Communicator& world, const ParallelLayout& l) {
  CHECK(world.size() == l.world_size && world.rank() == l.rank, "layout of rank {} of {} on world rank {} of {}",
        l.rank, l.world_size, world.rank(), world.size());
  ParallelGroups g;
  // Colors number the groups of each kind; keys order a group's members by their coordinate.
  g.tp = world.split(l.pp_rank * l.dp_size + l.dp_rank, l.tp_rank, "tp");
  g.pp = world.split(l.dp_rank * l.tp_size + l.tp_rank, l.pp_rank, "pp");
  g.dp = world.split(l.pp_rank * l.tp_size + l.tp_rank, l.dp_rank, "dp");
  g.mp = world.split(l.dp_rank, l.pp_rank * l.tp_size + l.tp_rank, "mp");
  const bool in_embedding = l.is_first_stage() || l.is_last_stage();
  g.embedding = world.split(in_embedding ? l.dp_rank * l.tp_size + l.tp_rank : -1, l.pp_rank, "embedding");
  // Each group holds the ranks the layout names (as world ranks, should `world` be a sub-communicator).
  auto in_world = [&](std::vector<int> ranks) {
    for (int& r : ranks) r = world.world_ranks()[size_t(r)];
    return ranks;
  };
  CHECK(g.tp && g.tp->rank() == l.tp_rank && g.tp->world_ranks() == in_world(l.tp_group()));
  CHECK(g.pp && g.pp->rank() == l.pp_rank && g.pp->world_ranks() == in_world(l.pp_group()));
  CHECK(g.dp && g.dp->rank() == l.dp_rank && g.dp->world_ranks() == in_world(l.dp_group()));
  CHECK(g.mp && g.mp->world_ranks() == in_world(l.mp_group()));
  CHECK((g.embedding ? g.embedding->world_ranks() : std::vector<int>{}) == in_world(l.embedding_group()));
  return g;
}

}  // namespace llamatrain::parallel
