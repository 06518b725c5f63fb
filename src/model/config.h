// Llama architecture hyperparameters, as Hugging Face's LlamaConfig names them (short names here,
// HF names in io/hf_config.cpp, the only place they appear). validate() rejects inconsistent
// values with an Error naming the field; derived sizes are methods, never stored twice. The shape
// rules are stated here once; callers with names of their own (the YAML config) pass FieldNames
// (core/names.h), so the same rule speaks in their keys. vocab_size is the real vocabulary, the same
// under every layout; the embedding and the lm head hold it padded (padded_vocab_size), and the
// padding rows are inert (model/shard.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/names.h"
#include "core/rope.h"

namespace llamatrain::model {

// The Hugging Face model family a config came from (config.json's model_type), kept so an export
// writes the same architecture back. The families differ only in the fields below.
enum class Family { llama, qwen2, mistral };
const char* family_name(Family f);  // "llama", "qwen2", "mistral" (HF model_type)

// RoPE frequency scaling (config.json rope_scaling). llama3: Llama 3.1's piecewise rescaling of the
// inverse frequencies (transformers' _compute_llama3_parameters): wavelengths above
// original_max_pos / low_freq_factor divide by factor, those below original_max_pos /
// high_freq_factor stay, and those between blend smoothly.
struct RopeScaling {
  enum class Type { none, llama3 };
  Type type = Type::none;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_pos = 8192;  // original_max_position_embeddings
};

// Elements [begin, end) of the full (unsharded) tensor `tensor` ("wte", "wqkv", ...), in its
// row-major order: one layer of a stacked tensor, q_proj's rows of one layer, a vocabulary's rows.
struct FrozenPart {
  std::string tensor;
  int64_t begin = 0, end = 0;
  bool operator==(const FrozenPart&) const = default;
};

// Element ranges [begin, end) sorted, with those that overlap or touch merged into one.
std::vector<std::pair<int64_t, int64_t>> merged_ranges(std::vector<std::pair<int64_t, int64_t>> ranges);

struct LlamaConfig {
  int dim = 0;         // C   hidden_size
  int ffn_dim = 0;     // F   intermediate_size
  int n_layers = 0;    // L   num_hidden_layers
  int n_heads = 0;     // H   num_attention_heads
  int n_kv_heads = 0;  // Hkv num_key_value_heads (== n_heads for MHA)
  int vocab_size = 0;  // V   the real vocabulary: token ids are < vocab_size
  // Megatron's make_vocab_size_divisible_by (not a Hugging Face field): under TP the embedding and
  // the lm head hold padded_vocab_size(TP) rows, the real ones then inert padding. 1: pad only to TP.
  int vocab_multiple = 1;
  int max_seq_len = 2048;  // max_position_embeddings
  float norm_eps = 1e-6f;  // rms_norm_eps
  float rope_theta = 10000.0f;
  bool tie_embeddings = false;          // tie_word_embeddings
  int bos_id = 1;                       // -1: the model has none (Qwen2)
  int eos_id = 2;                       // the first of eos_token_id when that is a list
  std::vector<int> extra_eos_ids = {};  // the rest of an eos_token_id list: generation stops on any
  Family family = Family::llama;
  bool qkv_bias = false;  // Qwen2: biases on q/k/v (not o): tensor "bqkv", (L, QKV), rows as wqkv's
  int head_size = 0;      // config.json head_dim when given; 0: dim / n_heads (head_dim())
  RopeScaling rope_scaling = {};
  // Mistral: a key j is visible to query i iff i - sliding_window < j <= i. 0: none (plain causal).
  int sliding_window = 0;
  // Tensors that do not train, by the model's names ("wte", "wqkv", ...; all layers of a stacked
  // one): no gradient, no optimizer state. Set from the Hugging Face name patterns of model.freeze
  // (io::resolve_freeze); not part of the architecture (checkpoints and exports ignore it).
  std::vector<std::string> frozen = {};
  // Parts of trainable tensors that do not train (model.freeze patterns over some layers or rows):
  // their weights are not updated (nor decayed) and their gradients count in no norm; they keep
  // their gradient and moment storage, which stays zero. Not part of the architecture either.
  std::vector<FrozenPart> frozen_parts = {};

  int head_dim() const { return head_size > 0 ? head_size : dim / n_heads; }  // D
  RopeFreqs rope_freqs() const;  // rope_theta and rope_scaling as the kernels take them
  int qkv_dim() const { return (n_heads + 2 * n_kv_heads) * head_dim(); }  // rows of packed wqkv
  // Rows of the embedding and the lm head over tp ranks: vocab_size rounded up to a multiple of
  // vocab_multiple x tp (Megatron's _vocab_size_with_padding). Rows >= vocab_size are padding.
  int64_t padded_vocab_size(int tp) const {
    const int64_t m = int64_t(vocab_multiple) * tp;
    return (vocab_size + m - 1) / m * m;
  }

  // Throws Error("config <where>: <field> ...") for non-positive sizes, heads not dividing dim,
  // kv heads not dividing heads, odd head dim (RoPE pairs), eps/theta out of range.
  void validate(const std::string& where) const;
  // The heads rule, part of validate(): n_heads divides dim with an even head_dim, n_kv_heads divides
  // n_heads. Fields: dim, n_heads, n_kv_heads.
  void check_heads(const FieldNames& names = FieldNames()) const;
  // A sequence of T tokens fits the context: T <= max_seq_len. Fields: seq_len, max_seq_len.
  void check_seq_len(int64_t T, const FieldNames& names = FieldNames()) const;
  // Total parameter count (embedding, layers, final norm, lm head unless tied), without padding rows.
  int64_t num_params() const;
  // The model's tensor names, in arena order (wout only when untied), and whether one is frozen.
  std::vector<std::string> tensor_names() const;
  bool is_frozen(const std::string& tensor) const;
};

// Named presets for bench and demos (llama2.c "stories" models, TinyLlama); nullptr-safe lookup
// throws Error listing the known names.
LlamaConfig preset_config(const std::string& name);

}  // namespace llamatrain::model
