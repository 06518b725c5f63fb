// Data parallelism over a flat fp32 gradient arena: the DP ranks hold the same parameters, compute
// gradients on different samples, and need their mean.
//  * GradReducer: buckets of a configurable size over the arena; the backward reports which
//    gradients are final (ready), a bucket's all-reduce starts as soon as all of it is, finish()
//    waits for every bucket and divides by the DP size. One reducer per arena, reused every step.
//  * ZeRO-1 (optimizer state sharded over DP): ZeroShards splits an arena into DP equal shards
//    (padded to a multiple of DP x align elements), reduce_scatter_gradients leaves each rank (at
//    least) the mean gradient of its shard, all_gather_parameters spreads the updated shards to every rank.
// bf16 gradients, reductions in other precisions and the overlap of ZeRO's reduce-scatter with the
// backward are not here.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "parallel/communicator.h"

namespace llamatrain::parallel {

// A range [begin, end) of a gradient arena.
struct GradRange {
  size_t begin = 0, end = 0;
};

class GradReducer {
 public:
  // grads (n) is the arena. Buckets of about bucket_elements (0: one bucket) are cut from `order`, the
  // ranges in the order the backward finishes them (a model's grad_ready_order()), so that each bucket
  // is complete as early as possible; a bucket of several ranges is reduced through a staging buffer.
  // Elements in no range of `order` (all of them when it is empty) are reduced by finish(), in arena
  // order. Every DP rank must make the same reducer and report the same ready() ranges in the same
  // order, so that buckets start in the same order everywhere.
  GradReducer(Communicator& dp, float* grads, size_t n, size_t bucket_elements,
              const std::vector<GradRange>& order = {});

  // Gradients [begin, end) are final for this step. Starts the all-reduce of every bucket this
  // completes, and lets the ones in flight progress. A range may not be reported twice in one step.
  void ready(size_t begin, size_t end);
  // Waits for the started buckets, all-reduces the rest (blocking), divides by the DP size; ready for
  // the next step.
  void finish();

  size_t bucket_count() const { return buckets_.size(); }
  // The elements a reducer of these arguments copies into staging buffers (the memory it adds).
  static size_t staging_elements(size_t n, size_t bucket_elements, const std::vector<GradRange>& order);
  size_t started_count() const { return start_order_.size(); }  // buckets ready() has started this step

 private:
  struct Bucket {
    std::vector<GradRange> pieces;  // of the arena, in `order`
    size_t size = 0, ready = 0;
    bool started = false;
    std::vector<float> staging;  // (size) when the bucket has several pieces
  };
  struct Piece {
    size_t begin, end, bucket;  // a bucket's piece, for lookups by arena offset
  };
  void start(size_t bucket);
  float* stage(Bucket& b);  // the bucket's contiguous data: in the arena, or copied to its staging buffer
  void add_bucket(std::vector<GradRange> pieces);
  // The buckets' pieces: `order` cut into buckets, then the elements no range covers.
  static std::vector<std::vector<GradRange>> cut_buckets(size_t n, size_t bucket_elements,
                                                         const std::vector<GradRange>& order);

  Communicator& dp_;
  float* grads_;  // (n)
  size_t n_;
  std::vector<Bucket> buckets_;
  std::vector<Piece> pieces_;        // sorted by begin
  std::vector<size_t> start_order_;  // buckets in the order their all-reduce started
  std::vector<Request> requests_;    // indexed like start_order_
};

// grads (n) on every DP rank becomes the mean over the ranks, in buckets of bucket_elements.
void all_reduce_gradients(Communicator& dp, float* grads, size_t n, size_t bucket_elements);

struct ShardRange {
  size_t begin = 0, end = 0;  // [begin, end) of the arena
  size_t size() const { return end - begin; }
};

// The ZeRO-1 split of an arena of n elements over dp_size ranks: shard r is
// [r*shard_size, (r+1)*shard_size) of an arena padded to padded_size = dp_size * shard_size, where
// shard_size = ceil(n / dp_size) rounded up to `align` elements; range(r) clips it to the n real
// elements. A pure function of (n, dp_size, align): every rank computes the same split.
class ZeroShards {
 public:
  ZeroShards(size_t n, int dp_size, size_t align = 16);

  size_t n() const { return n_; }
  int dp_size() const { return dp_size_; }
  size_t shard_size() const { return shard_size_; }
  size_t padded_size() const { return shard_size_ * size_t(dp_size_); }
  ShardRange range(int dp_rank) const;

 private:
  size_t n_;
  int dp_size_;
  size_t shard_size_;
};

// grads (padded_size; padding zero) summed over the DP ranks and divided by their number; rank r's
// shard [r*shard_size, (r+1)*shard_size) is what ZeRO-1 needs, and callers may rely on nothing else
// (today the whole arena is reduced, as all_reduce_gradients does; see the .cpp for why).
void reduce_scatter_gradients(Communicator& dp, float* grads, const ZeroShards& shards);
// params (padded_size): every rank's shard, copied to every rank.
void all_gather_parameters(Communicator& dp, float* params, const ZeroShards& shards);

// An arena the host cannot read (a GPU's), staged through host memory: `read` copies its elements
// [first, first + count) to host, `write` copies host values back to them.
struct StagedArena {
  size_t n = 0;  // elements
  std::function<void(float* host, size_t first, size_t count)> read;
  std::function<void(size_t first, const float* host, size_t count)> write;
};
// The staged forms of the above, in pieces of at most piece_elements on the host at a time, with the
// same arithmetic (sum over the ranks, then times 1/DP). Without overlap: each piece is read,
// reduced and written back in turn, after the backward (ZeRO-1's reduce-scatter is the all-reduce of
// the padded arena, as above).
void all_reduce_gradients(Communicator& dp, const StagedArena& grads, size_t piece_elements);
void all_gather_parameters(Communicator& dp, const StagedArena& params, const ZeroShards& shards,
                           size_t piece_elements);

}  // namespace llamatrain::parallel
