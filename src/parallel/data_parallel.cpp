// Data-parallel gradient reduction (bucketed all-reduce) and ZeRO-1 shards. Means are taken after
// the sum (sum, then multiply by 1/DP), so the result is the sum's rounding plus one multiply.
#include "parallel/data_parallel.h"

#include <algorithm>

#include "core/error.h"

namespace llamatrain::parallel {

GradReducer::GradReducer(Communicator& dp, float* grads, size_t n, size_t bucket_elements)
    : dp_(dp), grads_(grads), n_(n) {
  CHECK(grads_ || n_ == 0, "gradient arena of {} elements is null", n_);
  const size_t b = bucket_elements == 0 ? std::max<size_t>(n_, 1) : bucket_elements;
  for (size_t begin = 0; begin < n_; begin += b) bucket_begin_.push_back(begin);
  ready_count_.assign(bucket_begin_.size(), 0);
  started_.assign(bucket_begin_.size(), false);
  bucket_begin_.push_back(n_);
}

void GradReducer::start(size_t bucket) {
  started_[bucket] = true;
  start_order_.push_back(bucket);
  const size_t begin = bucket_begin_[bucket], end = bucket_begin_[bucket + 1];
  requests_.push_back(dp_.iall_reduce(grads_ + begin, end - begin));
}

void GradReducer::ready(size_t begin, size_t end) {
  CHECK(begin <= end && end <= n_, "ready range [{}, {}) of a gradient arena of {}", begin, end, n_);
  // Buckets overlapping [begin, end), found from the boundaries.
  size_t b = size_t(std::upper_bound(bucket_begin_.begin(), bucket_begin_.end() - 1, begin) - bucket_begin_.begin()) - 1;
  for (; begin < end; ++b) {
    const size_t bucket_end = bucket_begin_[b + 1], take = std::min(end, bucket_end) - begin;
    ready_count_[b] += take;
    CHECK(!started_[b] && ready_count_[b] <= bucket_end - bucket_begin_[b],
          "gradients [{}, {}) reported ready twice in one step (bucket {})", begin, begin + take, b);
    if (ready_count_[b] == bucket_end - bucket_begin_[b]) start(b);
    begin += take;
  }
}

void GradReducer::finish() {
  // Buckets the backward started: wait for them. The rest: blocking all-reduces, which MPI runs with
  // its tuned algorithms (OpenMPI's non-blocking collectives take ~2x as long for the same bytes). Both
  // are issued in the same order on every rank: ready() order, then bucket order.
  const float scale = 1.0f / float(dp_.size());
  auto mean = [&](size_t b) {
    if (dp_.size() > 1)
      for (size_t j = bucket_begin_[b]; j < bucket_begin_[b + 1]; ++j) grads_[j] *= scale;
  };
  for (size_t i = 0; i < start_order_.size(); ++i) {
    requests_[i].wait();
    mean(start_order_[i]);
  }
  for (size_t b = 0; b + 1 < bucket_begin_.size(); ++b)
    if (!started_[b]) {
      dp_.all_reduce(grads_ + bucket_begin_[b], bucket_begin_[b + 1] - bucket_begin_[b]);
      mean(b);
    }
  std::fill(ready_count_.begin(), ready_count_.end(), 0);
  std::fill(started_.begin(), started_.end(), false);
  start_order_.clear();
  requests_.clear();
}

void all_reduce_gradients(Communicator& dp, float* grads, size_t n, size_t bucket_elements) {
  GradReducer reducer(dp, grads, n, bucket_elements);
  reducer.finish();
}

ZeroShards::ZeroShards(size_t n, int dp_size, size_t align) : n_(n), dp_size_(dp_size) {
  CHECK(dp_size >= 1 && align >= 1, "ZeRO shards over {} ranks aligned to {}", dp_size, align);
  const size_t per_rank = (n + size_t(dp_size) - 1) / size_t(dp_size);
  shard_size_ = (per_rank + align - 1) / align * align;
}

ShardRange ZeroShards::range(int dp_rank) const {
  CHECK(dp_rank >= 0 && dp_rank < dp_size_, "shard of rank {} of {}", dp_rank, dp_size_);
  const size_t begin = std::min(n_, size_t(dp_rank) * shard_size_);
  return {begin, std::min(n_, begin + shard_size_)};
}

void reduce_scatter_gradients(Communicator& dp, float* grads, const ZeroShards& shards) {
  CHECK(dp.size() == shards.dp_size(), "ZeRO shards for {} ranks on a DP communicator of {}", shards.dp_size(),
        dp.size());
  // An all-reduce of the arena, of which each rank keeps its shard: OpenMPI 4.1's reduce-scatter of a
  // 60 MB arena on 2 ranks of one machine takes ~50 ms against ~16 ms for the all-reduce (measured
  // with every algorithm it offers). It also makes ZeRO-1's sums those of plain data parallelism, bit
  // for bit on any number of ranks. A transport with a ring reduce-scatter (NCCL) would do better with
  // reduce_scatter(), which moves half the bytes.
  GradReducer reducer(dp, grads, shards.padded_size(), size_t(1) << 22);
  reducer.finish();
}

void all_gather_parameters(Communicator& dp, float* params, const ZeroShards& shards) {
  CHECK(dp.size() == shards.dp_size(), "ZeRO shards for {} ranks on a DP communicator of {}", shards.dp_size(),
        dp.size());
  const size_t s = shards.shard_size();
  dp.all_gather(params, params + size_t(dp.rank()) * s, s);
}

}  // namespace llamatrain::parallel
