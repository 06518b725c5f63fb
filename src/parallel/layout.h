// ParallelLayout: how the world's ranks split into tensor- (TP), pipeline- (PP) and data-parallel
// (DP) groups, in Megatron's order rank = (pp * DP + dp) * TP + tp (TP innermost, so TP groups are
// neighbours on one node; PP outermost). Pure arithmetic, validated with errors that name the config
// keys. ParallelGroups makes the sub-communicators of one rank's groups. Context and expert
// parallelism are not modelled.
#pragma once

#include <memory>
#include <vector>

#include "core/names.h"
#include "parallel/communicator.h"

namespace llamatrain::parallel {

struct ParallelLayout {
  int world_size = 1;
  int tp_size = 1, pp_size = 1, dp_size = 1;
  int rank = 0;
  int tp_rank = 0, pp_rank = 0, dp_rank = 0;  // this rank's coordinates

  // The rule (check) and the layout it allows (make): TP and PP positive, their product dividing
  // world_size. Errors name model.tensor_model_parallel_size and model.pipeline_model_parallel_size
  // and "the N processes of this job" unless names says otherwise (fields tp_size, pp_size and
  // world_size; the divisibility message opens with head("layout"), by default "parallel layout").
  static void check(int world_size, int tp_size, int pp_size, const FieldNames& names = default_names());
  static ParallelLayout make(int world_size, int tp_size, int pp_size, int rank);
  static FieldNames default_names();

  int rank_of(int tp, int pp, int dp) const { return (pp * dp_size + dp) * tp_size + tp; }

  // Member world ranks of this rank's groups, in group-rank order (a rank's index in its TP group is
  // its tp coordinate, and so on).
  std::vector<int> tp_group() const;  // same (pp, dp), tp = 0..TP-1
  std::vector<int> pp_group() const;  // same (tp, dp), pp = 0..PP-1
  std::vector<int> dp_group() const;  // same (tp, pp), dp = 0..DP-1
  // Model-parallel group: the TP x PP ranks holding one model replica (same dp), ordered by
  // pp * TP + tp; global gradient norms sum over it.
  std::vector<int> mp_group() const;
  // Embedding group: the first and last stage of this rank's pipeline (one rank when PP = 1), which
  // both hold the tied embedding; empty when this rank is on neither.
  std::vector<int> embedding_group() const;

  bool is_first_stage() const { return pp_rank == 0; }
  bool is_last_stage() const { return pp_rank == pp_size - 1; }
};

// The sub-communicators of one rank's groups; split collectively from the world (every rank of the
// world must call make with its own layout of the same sizes). embedding is null on ranks outside it.
struct ParallelGroups {
  std::unique_ptr<Communicator> tp, pp, dp, mp, embedding;

  static ParallelGroups make(Communicator& world, const ParallelLayout& layout);
};

}  // namespace llamatrain::parallel
