// gather_full_weights; see gather_weights.h.
#include "train/gather_weights.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "parallel/communicator.h"

namespace llamatrain::train {

namespace {

constexpr int kTag = 7101;  // this exchange's messages on mp (matched in posting order)

// One rank's part of a full tensor.
struct Part {
  int rank = 0;
  int full_id = 0;
  int64_t numel = 0;
  model::TensorShard shard;
  const float* data = nullptr;  // mp rank 0's own parts; others arrive into a buffer
};

// The parts a rank sends: the elements its copies count for (ParamSpec::owned), in full_id order.
std::vector<const model::ParamSpec*> parts_to_send(const model::LlamaModel& m) {
  std::vector<const model::ParamSpec*> out;
  for (const auto& s : m.param_specs())
    if (s.owned.numel() > 0) out.push_back(&s);
  std::stable_sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->full_id < b->full_id; });
  return out;
}

// The weights of s this rank's copy counts for: the arena itself when it counts for all of them, else
// those elements packed into `buf` (the q rows of a kv-head replica's wqkv).
const float* owned_part(model::LlamaModel& m, const model::ParamSpec& s, std::vector<float>& buf) {
  const float* w = m.param_data() + s.offset;
  if (s.in_norm) return w;
  buf.assign(size_t(s.owned.numel()), 0.0f);
  model::copy_between_shards(buf.data(), s.owned, 0, s.owned.numel(), w, s.shard, 0, s.numel);
  return buf.data();
}

}  // namespace

std::unique_ptr<model::LlamaModel> gather_full_weights(model::LlamaModel& local, parallel::Communicator& mp) {
  const auto mine = parts_to_send(local);
  if (mp.rank() != 0) {
    // The shard table, then every part, straight from the arena.
    nlohmann::json table = nlohmann::json::array();
    for (const auto* s : mine) table.push_back({s->full_id, s->owned.numel(), s->owned.to_json()});
    const std::string text = table.dump();
    const uint64_t len = text.size();
    mp.isend(&len, sizeof len, 0, kTag).wait();
    mp.isend(text.data(), len, 0, kTag).wait();
    std::vector<float> packed;
    for (const auto* s : mine)
      mp.isend(owned_part(local, *s, packed), size_t(s->owned.numel()) * sizeof(float), 0, kTag).wait();
    return nullptr;
  }

  std::vector<Part> parts;
  std::vector<std::vector<float>> own_packed(mine.size());
  for (size_t i = 0; i < mine.size(); i++)
    parts.push_back(
        {0, mine[i]->full_id, mine[i]->owned.numel(), mine[i]->owned, owned_part(local, *mine[i], own_packed[i])});
  for (int r = 1; r < mp.size(); r++) {
    uint64_t len = 0;
    mp.irecv(&len, sizeof len, r, kTag).wait();
    std::string text(len, '\0');
    mp.irecv(text.data(), len, r, kTag).wait();
    for (const auto& p : nlohmann::json::parse(text))
      parts.push_back({r, p.at(0).get<int>(), p.at(1).get<int64_t>(),
                       model::TensorShard::from_json(p.at(2).get<std::string>()), nullptr});
  }

  auto full = std::make_unique<model::LlamaModel>(local.config(), model::Precision::fp32);
  std::vector<const model::ParamSpec*> targets;
  for (const auto& s : full->param_specs()) targets.push_back(&s);
  std::stable_sort(targets.begin(), targets.end(), [](auto* a, auto* b) { return a->full_id < b->full_id; });
  std::vector<float> buf;
  // Full tensors in full_id order, each from its holders in mp rank order: the order every rank
  // sent its parts in.
  for (const auto* t : targets) {
    int64_t copied = 0;
    for (const Part& p : parts) {
      if (p.full_id != t->full_id) continue;
      const float* src = p.data;
      if (!src) {
        buf.resize(size_t(p.numel));
        mp.irecv(buf.data(), size_t(p.numel) * sizeof(float), p.rank, kTag).wait();
        src = buf.data();
      }
      copied +=
          model::copy_between_shards(full->param_data() + t->offset, t->shard, 0, t->numel, src, p.shard, 0, p.numel);
    }
    CHECK(copied == t->shard.numel(), "gathering {}: the model-parallel ranks hold {} of its {} elements once", t->name,
          copied, t->shard.numel());  // the full model's padding rows stay zero
  }
  full->params_changed();
  return full;
}

}  // namespace llamatrain::train
