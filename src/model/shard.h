// Model parallelism as data: which part of the full model one rank holds. A ShardPlan says where the
// rank sits (tensor-parallel rank, pipeline stage and its layers, sequence parallelism); a TensorShard
// says how one local parameter tensor maps into the full one. Everything that crosses layouts (random
// init, Hugging Face loading, gathering the weights for a save, resharding the optimizer state of a
// checkpoint written under another layout) goes through TensorShard, so the layouts agree by
// construction. Megatron's split: q/k/v heads, gate/up rows and the vocabulary are split in rank
// order over TP (column parallel), o_proj and down_proj split their input columns (row parallel),
// the norms are replicated, and the layers are split over pipeline stages in order. With fewer
// key/value heads than TP ranks, each kv head is replicated on TP / n_kv_heads consecutive ranks
// (Megatron's rule), the first of them owning it (its copy counts and is saved).
//
// The vocabulary is split after padding it to LlamaConfig::padded_vocab_size(TP) rows, so each TP
// rank holds an equal block; the padding rows are the last rows of the full table, hence the last
// rows of the ranks' blocks (LocalDims::V_valid says where they start). They are inert: outside every
// TensorShard (the full tensor is the real vocabulary, the same under every layout), so they are
// zero from construction and never initialized, loaded, saved, gathered or exported; the passes give
// the embedding, the lm head and the cross-entropy only the real rows, so they are never looked up,
// have no logit (no softmax, loss, sampling) and a gradient of exactly 0, which leaves AdamW's update
// of them 0 and adds nothing to the gradient norm.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/names.h"
#include "model/config.h"

namespace llamatrain::model {

// How a local tensor sits in the full tensor, both seen as 3-D (layers, rows, cols): the local one
// is full layers [layer_begin, layer_begin + layers), the concatenation of the full row blocks
// `rows`, and full columns [col_begin, col_begin + cols). An unsplit tensor has one block of all rows.
struct TensorShard {
  int64_t full_layers = 1, full_rows = 1, full_cols = 1;
  int64_t layer_begin = 0, layers = 1;
  std::vector<std::pair<int64_t, int64_t>> rows;  // (first full row, count), in local order
  int64_t col_begin = 0, cols = 1;

  int64_t local_rows() const;
  int64_t numel() const { return layers * local_rows() * cols; }
  int64_t full_numel() const { return full_layers * full_rows * full_cols; }
  bool whole() const { return numel() == full_numel(); }
  // Calls fn(local_offset, full_offset, n) for every run of n elements contiguous in both tensors
  // (one local row, or more where rows are whole and consecutive), in local order.
  void for_each_run(const std::function<void(int64_t local, int64_t full, int64_t n)>& fn) const;
  // The local flat offset of full element `full`, or -1 when this shard does not hold it.
  int64_t local_offset(int64_t full) const;

  // Serialized for checkpoint metadata: {"full":[L,R,K],"layers":[b,n],"rows":[[b,n],..],"cols":[b,n]}.
  std::string to_json() const;
  static TensorShard from_json(const std::string& text);  // throws Error on malformed text
  static TensorShard whole_tensor(int64_t layers, int64_t rows, int64_t cols);
};

// Copies every element that both shards hold from src (elements [src_first, src_first + src_count)
// of the src shard's local tensor) into dst (elements [dst_first, dst_first + dst_count) of the dst
// shard's local tensor); both shards describe the same full tensor. Returns the elements copied.
// T is float (or any trivially copyable element).
int64_t copy_between_shards(float* dst, const TensorShard& dst_shard, int64_t dst_first, int64_t dst_count,
                            const float* src, const TensorShard& src_shard, int64_t src_first, int64_t src_count);

// Where one rank sits in the model-parallel layout.
struct ShardPlan {
  int tp_size = 1, tp_rank = 0;
  int pp_size = 1, pp_rank = 0;
  int layer_begin = 0, layer_end = 0;  // this stage's layers [begin, end) of the full model
  bool sequence_parallel = false;

  // Validates the split against the model (check_tensor_parallel; explicit layers_per_stage: one
  // count >= 1 per stage, all layers; empty: pipeline_split's even split), in model terms.
  static ShardPlan make(const LlamaConfig& full, int tp_size, int tp_rank, int pp_size, int pp_rank,
                        bool sequence_parallel, const std::vector<int>& layers_per_stage = {});
  static ShardPlan single(const LlamaConfig& full);  // the whole model on one rank

  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp_size - 1; }
  int layers() const { return layer_end - layer_begin; }
  bool is_single() const { return tp_size == 1 && pp_size == 1; }
  // The stage holds the token embedding: the first, and the last when it is tied to the lm head.
  bool holds_embedding(const LlamaConfig& full) const { return first_stage() || (full.tie_embeddings && last_stage()); }
  // Sequence parallelism splits a micro-batch's B*T tokens over the TP ranks: they must divide evenly.
  // Fields: seq_len, tp_size.
  void check_micro_batch(int64_t B, int64_t T, const FieldNames& names = FieldNames()) const;
};

// The model-parallel rules, each stated once (callers pass their names; see core/names.h).
// Tensor parallelism over tp ranks splits the heads (tp divides n_heads; the kv heads are split, or
// each replicated when tp is a multiple of them), the FFN rows and the padded vocabulary (any
// vocabulary: the padding makes it divide). Fields: tp_size, n_heads, ffn_dim.
void check_tensor_parallel(const LlamaConfig& full, int tp_size, const FieldNames& names = FieldNames());
// The layers of each of pp stages, Megatron-core's rule: the first and last stage hold `first` and
// `last` layers when those are > 0, the other stages an equal share of the rest, at least one each;
// nothing when that is impossible (pp > n_layers, or a remainder that does not split evenly).
std::optional<std::vector<int>> try_pipeline_split(int n_layers, int pp_size, int first = 0, int last = 0);
// The same, or an Error saying why not. Fields: pp_size, n_layers, first_stage_layers, last_stage_layers.
std::vector<int> pipeline_split(int n_layers, int pp_size, int first = 0, int last = 0,
                                const FieldNames& names = FieldNames());

// The local sizes of a rank's part: heads, kv heads, ffn rows and padded vocabulary divided by TP,
// the stage's layers. head_dim stays the full model's.
struct LocalDims {
  int C = 0, L = 0, H = 0, Hkv = 0, D = 0, F = 0;
  int V = 0;                // rows of the local embedding / lm head: padded_vocab_size(TP) / TP
  int V_valid = 0;          // of which the first V_valid are real tokens (0 <= V_valid <= V), the rest padding
  int64_t vocab_begin = 0;  // first full vocabulary row this rank holds
  int kv_head_begin = 0;    // first full kv head this rank holds
  int kv_replicas = 1;      // TP ranks holding each of its kv heads (> 1 when n_kv_heads < TP)
  bool kv_owner = true;     // this rank's kv heads count as its own (the first of their replicas)
  int QKV() const { return (H + 2 * Hkv) * D; }
  int HD() const { return H * D; }
};
LocalDims local_dims(const LlamaConfig& full, const ShardPlan& plan);

}  // namespace llamatrain::model
