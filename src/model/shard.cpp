// TensorShard arithmetic and the ShardPlan split; see shard.h.
#include "model/shard.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace llamatrain::model {

int64_t TensorShard::local_rows() const {
  int64_t n = 0;
  for (const auto& [b, c] : rows) n += c;
  return n;
}

TensorShard TensorShard::whole_tensor(int64_t layers, int64_t rows, int64_t cols) {
  TensorShard s;
  s.full_layers = s.layers = layers;
  s.full_rows = rows;
  s.rows = {{0, rows}};
  s.full_cols = s.cols = cols;
  return s;
}

void TensorShard::for_each_run(const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  if (whole()) {
    if (numel() > 0) fn(0, 0, numel());
    return;
  }
  const int64_t R = full_rows, K = full_cols;
  int64_t local = 0;
  for (int64_t l = 0; l < layers; l++)
    for (const auto& [b, count] : rows) {
      const int64_t full_row0 = ((layer_begin + l) * R + b) * K;
      if (cols == K) {  // whole rows: the block is contiguous in both
        fn(local, full_row0, count * K);
        local += count * K;
        continue;
      }
      for (int64_t r = 0; r < count; r++) {
        fn(local, full_row0 + r * K + col_begin, cols);
        local += cols;
      }
    }
}

int64_t TensorShard::local_offset(int64_t full) const {
  const int64_t K = full_cols, R = full_rows;
  const int64_t c = full % K, r = (full / K) % R, l = full / (K * R);
  if (l < layer_begin || l >= layer_begin + layers || c < col_begin || c >= col_begin + cols) return -1;
  int64_t local_row = 0;
  for (const auto& [b, count] : rows) {
    if (r >= b && r < b + count)
      return ((l - layer_begin) * local_rows() + local_row + (r - b)) * cols + (c - col_begin);
    local_row += count;
  }
  return -1;
}

std::string TensorShard::to_json() const {
  nlohmann::json rj = nlohmann::json::array();
  for (const auto& [b, c] : rows) rj.push_back({b, c});
  return nlohmann::json{{"full", {full_layers, full_rows, full_cols}},
                        {"layers", {layer_begin, layers}},
                        {"rows", rj},
                        {"cols", {col_begin, cols}}}
      .dump();
}

TensorShard TensorShard::from_json(const std::string& text) {
  TensorShard s;
  try {
    const auto j = nlohmann::json::parse(text);
    const auto full = j.at("full").get<std::vector<int64_t>>();
    const auto layers = j.at("layers").get<std::vector<int64_t>>();
    const auto cols = j.at("cols").get<std::vector<int64_t>>();
    s.full_layers = full.at(0), s.full_rows = full.at(1), s.full_cols = full.at(2);
    s.layer_begin = layers.at(0), s.layers = layers.at(1);
    s.col_begin = cols.at(0), s.cols = cols.at(1);
    s.rows.clear();
    for (const auto& r : j.at("rows")) s.rows.emplace_back(r.at(0).get<int64_t>(), r.at(1).get<int64_t>());
  } catch (const std::exception& e) {
    fail("tensor shard '{}' is not a shard description: {}", text, e.what());
  }
  auto bad = [&](bool b) {
    if (b) fail("tensor shard '{}' lies outside its full tensor", text);
  };
  bad(s.full_layers < 1 || s.full_rows < 1 || s.full_cols < 1);
  bad(s.layer_begin < 0 || s.layers < 0 || s.layer_begin + s.layers > s.full_layers);
  bad(s.col_begin < 0 || s.cols < 0 || s.col_begin + s.cols > s.full_cols);
  for (const auto& [b, c] : s.rows) bad(b < 0 || c < 0 || b + c > s.full_rows);
  return s;
}

int64_t copy_between_shards(float* dst, const TensorShard& ds, int64_t dst_first, int64_t dst_count, const float* src,
                            const TensorShard& ss, int64_t src_first, int64_t src_count) {
  CHECK(ds.full_layers == ss.full_layers && ds.full_rows == ss.full_rows && ds.full_cols == ss.full_cols,
        "copy_between_shards: shards of different tensors");
  const int64_t K = ds.full_cols;
  const int64_t dst_end = dst_first + dst_count, src_end = src_first + src_count;
  int64_t copied = 0;
  ds.for_each_run([&](int64_t local, int64_t full, int64_t n) {
    // Clip the run to the destination's range.
    const int64_t a = std::max(local, dst_first), b = std::min(local + n, dst_end);
    if (a >= b) return;
    full += a - local;
    local = a;
    n = b - a;
    // Piece by full row: within one full row the source holds one contiguous column range.
    while (n > 0) {
      const int64_t c = full % K, len = std::min(n, K - c);
      const int64_t lo = std::max(c, ss.col_begin), hi = std::min(c + len, ss.col_begin + ss.cols);
      if (lo < hi) {
        const int64_t s0 = ss.local_offset(full + (lo - c));
        if (s0 >= 0) {
          // Clip to the source's range (contiguous in the source's local order).
          const int64_t s_lo = std::max(s0, src_first), s_hi = std::min(s0 + (hi - lo), src_end);
          if (s_lo < s_hi) {
            const int64_t d = local + (lo - c) + (s_lo - s0);
            std::memcpy(dst + (d - dst_first), src + (s_lo - src_first), sizeof(float) * size_t(s_hi - s_lo));
            copied += s_hi - s_lo;
          }
        }
      }
      full += len;
      local += len;
      n -= len;
    }
  });
  return copied;
}

ShardPlan ShardPlan::single(const LlamaConfig& full) {
  ShardPlan p;
  p.layer_end = full.n_layers;
  return p;
}

void check_tensor_parallel(const LlamaConfig& full, int tp, const FieldNames& names) {
  CHECK(tp >= 1);
  if (full.n_heads % tp != 0 || (full.n_kv_heads % tp != 0 && tp % full.n_kv_heads != 0))
    fail("{}: got {}, expected a divisor of {} {}, and a divisor or a multiple of the key/value heads {}\nhint: "
         "tensor parallelism splits heads (with fewer kv heads than ranks, each kv head is replicated)",
         names.head("tp_size"), tp, names("n_heads"), full.n_heads, full.n_kv_heads);
  if (full.ffn_dim % tp != 0)
    fail("{}: got {}, expected a divisor of {} {}", names.head("tp_size"), tp, names("ffn_dim"), full.ffn_dim);
}

std::optional<std::vector<int>> try_pipeline_split(int L, int pp, int first, int last) {
  CHECK(L >= 1 && pp >= 1 && first >= 0 && last >= 0);
  if (pp > L) return std::nullopt;
  if (pp == 1) return std::vector<int>{L};
  const int middle = pp - (first > 0) - (last > 0), rest = L - first - last;
  if (rest < middle || (middle == 0 ? rest != 0 : rest % middle != 0)) return std::nullopt;
  std::vector<int> split(size_t(pp), middle > 0 ? rest / middle : 0);
  if (first > 0) split.front() = first;
  if (last > 0) split.back() = last;
  return split;
}

std::vector<int> pipeline_split(int L, int pp, int first, int last, const FieldNames& names) {
  if (auto split = try_pipeline_split(L, pp, first, last)) return *split;
  if (pp > L)
    fail("{}: got {}, expected at most {} {} (a stage holds at least one layer)", names.head("pp_size"), pp,
         names("n_layers"), L);
  fail("{}: got {} stages for {} {} (first stage {}, last stage {}), expected the other stages to split the "
       "remaining {} layers evenly, at least one each\nhint: change the pipeline size or set {} / {}",
       names.head("pp_size"), pp, names("n_layers"), L, first ? std::to_string(first) : "even",
       last ? std::to_string(last) : "even", L - first - last, names("first_stage_layers"), names("last_stage_layers"));
}

ShardPlan ShardPlan::make(const LlamaConfig& full, int tp_size, int tp_rank, int pp_size, int pp_rank,
                          bool sequence_parallel, const std::vector<int>& layers_per_stage) {
  CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size && pp_size >= 1 && pp_rank >= 0 && pp_rank < pp_size);
  check_tensor_parallel(full, tp_size);
  if (sequence_parallel && tp_size == 1) sequence_parallel = false;  // nothing to split
  ShardPlan p;
  p.tp_size = tp_size, p.tp_rank = tp_rank, p.pp_size = pp_size, p.pp_rank = pp_rank;
  p.sequence_parallel = sequence_parallel;
  const int L = full.n_layers;
  std::vector<int> split = layers_per_stage;
  if (split.empty()) {
    split = pipeline_split(L, pp_size);
  } else {
    int sum = 0;
    for (int n : split) {
      if (n < 1) fail("pipeline layer split: a stage has {} layers, expected at least 1", n);
      sum += n;
    }
    if (int(split.size()) != pp_size || sum != L)
      fail("pipeline layer split: {} stages holding {} layers, expected {} stages (pp_size) holding all {} layers",
           split.size(), sum, pp_size, L);
  }
  for (int s = 0; s < pp_rank; s++) p.layer_begin += split[size_t(s)];
  p.layer_end = p.layer_begin + split[size_t(pp_rank)];
  return p;
}

void ShardPlan::check_micro_batch(int64_t B, int64_t T, const FieldNames& names) const {
  if (sequence_parallel && (B * T) % tp_size != 0)
    fail("{}: micro batch {} x seq {} = {} tokens, expected a multiple of {} {} (sequence parallelism splits the "
         "tokens over the ranks)\nhint: choose a sequence length divisible by {}",
         names.head("seq_len"), B, T, B * T, names("tp_size"), tp_size, names("tp_size"));
}

LocalDims local_dims(const LlamaConfig& full, const ShardPlan& plan) {
  LocalDims d;
  d.C = full.dim;
  d.L = plan.layers();
  d.D = full.head_dim();
  d.H = full.n_heads / plan.tp_size;
  if (full.n_kv_heads >= plan.tp_size) {
    d.Hkv = full.n_kv_heads / plan.tp_size;
    d.kv_head_begin = d.Hkv * plan.tp_rank;
  } else {  // replicated: ranks r*k .. r*k + k-1 share kv head r (k = TP / n_kv_heads)
    d.Hkv = 1;
    d.kv_replicas = plan.tp_size / full.n_kv_heads;
    d.kv_head_begin = plan.tp_rank / d.kv_replicas;
    d.kv_owner = plan.tp_rank % d.kv_replicas == 0;
  }
  d.F = full.ffn_dim / plan.tp_size;
  d.V = int(full.padded_vocab_size(plan.tp_size) / plan.tp_size);
  d.vocab_begin = int64_t(d.V) * plan.tp_rank;
  d.V_valid = int(std::clamp<int64_t>(full.vocab_size - d.vocab_begin, 0, d.V));
  return d;
}

}  // namespace llamatrain::model
