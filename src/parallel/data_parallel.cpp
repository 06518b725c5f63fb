// Data-parallel gradient reduction (bucketed all-reduce) and ZeRO-1 shards. Means are taken after
// the sum (sum, then multiply by 1/DP), so the result is the sum's rounding plus one multiply.
#include "parallel/data_parallel.h"

#include <algorithm>

#include "core/error.h"

namespace llamatrain::parallel {

std::vector<std::vector<GradRange>> GradReducer::cut_buckets(size_t n, size_t bucket_elements,
                                                             const std::vector<GradRange>& order) {
  const size_t cap = bucket_elements == 0 ? std::max<size_t>(n, 1) : bucket_elements;
  std::vector<std::vector<GradRange>> buckets;
  // Buckets along `order`: consecutive ranges until a bucket holds cap elements (a longer range is cut).
  std::vector<GradRange> pieces;
  size_t size = 0;
  std::vector<GradRange> in_order;
  for (const GradRange& r : order) {
    CHECK(r.begin <= r.end && r.end <= n, "gradient range [{}, {}) of an arena of {}", r.begin, r.end, n);
    if (r.begin < r.end) in_order.push_back(r);
  }
  for (GradRange r : in_order)
    while (r.begin < r.end) {
      const size_t take = std::min(r.end - r.begin, cap - size);
      pieces.push_back({r.begin, r.begin + take});
      size += take;
      r.begin += take;
      if (size == cap) {
        buckets.push_back(std::move(pieces));
        pieces.clear();
        size = 0;
      }
    }
  if (!pieces.empty()) buckets.push_back(std::move(pieces));
  // The elements no range covers, in arena order, as buckets of their own that finish() reduces.
  std::vector<GradRange> sorted = in_order;
  std::sort(sorted.begin(), sorted.end(), [](const GradRange& a, const GradRange& b) { return a.begin < b.begin; });
  size_t at = 0;
  std::vector<GradRange> rest;
  for (const GradRange& r : sorted) {
    CHECK(r.begin >= at, "gradient ranges overlap at {}", r.begin);
    if (r.begin > at) rest.push_back({at, r.begin});
    at = r.end;
  }
  if (at < n) rest.push_back({at, n});
  for (GradRange r : rest)
    for (size_t b = r.begin; b < r.end; b += cap) buckets.push_back({{b, std::min(r.end, b + cap)}});
  return buckets;
}

size_t GradReducer::staging_elements(size_t n, size_t bucket_elements, const std::vector<GradRange>& order) {
  size_t staged = 0;
  for (const auto& pieces : cut_buckets(n, bucket_elements, order))
    if (pieces.size() > 1)
      for (const GradRange& p : pieces) staged += p.end - p.begin;
  return staged;
}

GradReducer::GradReducer(Communicator& dp, float* grads, size_t n, size_t bucket_elements,
                         const std::vector<GradRange>& order)
    : dp_(dp), grads_(grads), n_(n) {
  CHECK(grads_ || n_ == 0, "gradient arena of {} elements is null", n_);
  for (auto& pieces : cut_buckets(n_, bucket_elements, order)) add_bucket(std::move(pieces));
  std::sort(pieces_.begin(), pieces_.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
}

void GradReducer::add_bucket(std::vector<GradRange> pieces) {
  Bucket b;
  for (const GradRange& p : pieces) {
    b.size += p.end - p.begin;
    pieces_.push_back({p.begin, p.end, buckets_.size()});
  }
  if (pieces.size() > 1) b.staging.resize(b.size);
  b.pieces = std::move(pieces);
  buckets_.push_back(std::move(b));
}

float* GradReducer::stage(Bucket& b) {
  if (b.staging.empty()) return grads_ + b.pieces.front().begin;  // one piece: in place
  size_t at = 0;
  for (const GradRange& p : b.pieces) {
    std::copy(grads_ + p.begin, grads_ + p.end, b.staging.begin() + ptrdiff_t(at));
    at += p.end - p.begin;
  }
  return b.staging.data();
}

void GradReducer::start(size_t bucket) {
  Bucket& b = buckets_[bucket];
  b.started = true;
  start_order_.push_back(bucket);
  requests_.push_back(dp_.iall_reduce(stage(b), b.size));
}

void GradReducer::ready(size_t begin, size_t end) {
  CHECK(begin <= end && end <= n_, "ready range [{}, {}) of a gradient arena of {}", begin, end, n_);
  // Pieces overlapping [begin, end): from the last piece starting at or before begin.
  auto it =
      std::upper_bound(pieces_.begin(), pieces_.end(), begin, [](size_t v, const Piece& p) { return v < p.begin; });
  if (it != pieces_.begin()) --it;
  for (; it != pieces_.end() && it->begin < end; ++it) {
    const size_t a = std::max(begin, it->begin), e = std::min(end, it->end);
    if (a >= e) continue;
    Bucket& b = buckets_[it->bucket];
    b.ready += e - a;
    CHECK(!b.started && b.ready <= b.size, "gradients [{}, {}) reported ready twice in one step", a, e);
    if (b.ready == b.size) start(it->bucket);
  }
  for (Request& r : requests_) r.test();  // progress for the ones in flight
}

void GradReducer::finish() {
  // Buckets the backward started: wait for them. The rest: blocking all-reduces, which MPI runs with
  // its tuned algorithms (OpenMPI's non-blocking collectives take ~2x as long for the same bytes). Both
  // are issued in the same order on every rank: ready() order, then bucket order.
  const float scale = 1.0f / float(dp_.size());
  auto mean = [&](size_t bucket) {
    Bucket& b = buckets_[bucket];
    const bool multi = dp_.size() > 1;
    size_t at = 0;
    for (const GradRange& p : b.pieces) {
      float* g = grads_ + p.begin;
      const size_t len = p.end - p.begin;
      if (b.staging.empty()) {
        if (multi)
          for (size_t j = 0; j < len; ++j) g[j] *= scale;
      } else {
        const float* s = b.staging.data() + at;
        for (size_t j = 0; j < len; ++j) g[j] = multi ? s[j] * scale : s[j];
      }
      at += len;
    }
  };
  for (size_t i = 0; i < start_order_.size(); ++i) {
    requests_[i].wait();
    mean(start_order_[i]);
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!buckets_[b].started) {  // a bucket the backward did not complete (or nobody reported)
      dp_.all_reduce(stage(buckets_[b]), buckets_[b].size);
      mean(b);
    }
  for (Bucket& b : buckets_) b.ready = 0, b.started = false;
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

void all_reduce_gradients(Communicator& dp, const StagedArena& grads, size_t piece_elements) {
  CHECK(piece_elements > 0, "staged all-reduce in pieces of 0 elements");
  const float scale = 1.0f / float(dp.size());
  std::vector<float> host(std::min(piece_elements, grads.n));
  for (size_t first = 0; first < grads.n; first += piece_elements) {
    const size_t n = std::min(piece_elements, grads.n - first);
    grads.read(host.data(), first, n);
    dp.all_reduce(host.data(), n);
    for (size_t j = 0; j < n; ++j) host[j] *= scale;
    grads.write(first, host.data(), n);
  }
}

void all_gather_parameters(Communicator& dp, const StagedArena& params, const ZeroShards& shards,
                           size_t piece_elements) {
  CHECK(dp.size() == shards.dp_size(), "ZeRO shards for {} ranks on a DP communicator of {}", shards.dp_size(),
        dp.size());
  CHECK(params.n == shards.padded_size(), "all-gather of {} elements over shards of {}", params.n,
        shards.padded_size());
  // Piece k of every rank's shard, gathered: rank r's lands at r * shard_size + k * piece.
  const size_t s = shards.shard_size(), ranks = size_t(dp.size());
  const size_t piece = std::max<size_t>(1, std::min(s, piece_elements / ranks));
  std::vector<float> mine(piece), all(piece * ranks);
  for (size_t first = 0; first < s; first += piece) {
    const size_t n = std::min(piece, s - first);
    params.read(mine.data(), size_t(dp.rank()) * s + first, n);
    dp.all_gather(all.data(), mine.data(), n);
    for (size_t r = 0; r < ranks; ++r) params.write(r * s + first, all.data() + r * n, n);
  }
}

}  // namespace llamatrain::parallel
