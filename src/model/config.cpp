// LlamaConfig validation, parameter count and named presets. validate() bounds every size so that
// products of dimensions fit comfortably in int64 (a hostile config.json cannot overflow them);
// the presets copy llama2.c's "stories" models, TinyLlama 1.1B, Llama 2 7B/13B and the tiny demo.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "core/error.h"

namespace llamatrain::model {

namespace {

// Generous upper bounds: far above any Llama model, low enough that products never overflow.
constexpr int kMaxDim = 1 << 16;
constexpr int kMaxFfnDim = 1 << 20;
constexpr int kMaxLayers = 1 << 12;
constexpr int kMaxVocab = 1 << 24;
constexpr int kMaxVocabMultiple = 1 << 16;  // the padded vocabulary stays below 2^31 even at TP 64
constexpr int kMaxSeqLen = 1 << 24;

void check_range(const std::string& where, const char* field, int value, int lo, int hi) {
  if (value < lo || value > hi)
    fail("config {}: {} is {}, expected an integer in [{}, {}]\nhint: fix the model config", where, field, value, lo,
         hi);
}

}  // namespace

const char* family_name(Family f) {
  switch (f) {
    case Family::llama: return "llama";
    case Family::qwen2: return "qwen2";
    case Family::mistral: return "mistral";
  }
  return "llama";
}

void LlamaConfig::validate(const std::string& where) const {
  check_range(where, "dim", dim, 1, kMaxDim);
  check_range(where, "ffn_dim", ffn_dim, 1, kMaxFfnDim);
  check_range(where, "n_layers", n_layers, 1, kMaxLayers);
  check_range(where, "n_heads", n_heads, 1, dim);
  check_range(where, "n_kv_heads", n_kv_heads, 1, n_heads);
  check_range(where, "vocab_size", vocab_size, 1, kMaxVocab);
  check_range(where, "vocab_multiple", vocab_multiple, 1, kMaxVocabMultiple);
  check_range(where, "max_seq_len", max_seq_len, 1, kMaxSeqLen);
  check_heads(FieldNames("config " + where + ": "));
  if (!(norm_eps > 0.0f && norm_eps < 1.0f))
    fail("config {}: norm_eps is {}, expected a value in (0, 1)\nhint: Llama uses 1e-5 or 1e-6", where, norm_eps);
  if (!(rope_theta > 0.0f && std::isfinite(rope_theta)))
    fail("config {}: rope_theta is {}, expected a finite positive value\nhint: Llama 2 uses 10000", where, rope_theta);
  if (bos_id < -1 || bos_id >= vocab_size)
    fail("config {}: bos_id is {}, expected a token id in [0, {})\nhint: check the tokenizer's ids", where, bos_id,
         vocab_size);
  if (eos_id < 0 || eos_id >= vocab_size)
    fail("config {}: eos_id is {}, expected a token id in [0, {})\nhint: check the tokenizer's ids", where, eos_id,
         vocab_size);
  for (int id : extra_eos_ids)
    if (id < 0 || id >= vocab_size)
      fail("config {}: eos id {} is not a token id in [0, {})\nhint: check the tokenizer's ids", where, id, vocab_size);
  if (head_size != 0) check_range(where, "head_dim", head_size, 2, kMaxDim);
  check_range(where, "sliding_window", sliding_window, 0, kMaxSeqLen);
  if (rope_scaling.type == RopeScaling::Type::llama3) {
    const RopeScaling& r = rope_scaling;
    if (!(r.factor >= 1.0f && std::isfinite(r.factor)) || !(r.low_freq_factor > 0.0f) ||
        !(r.high_freq_factor > r.low_freq_factor && std::isfinite(r.high_freq_factor)) || r.original_max_pos < 1)
      fail("config {}: rope_scaling llama3 has factor {}, low_freq_factor {}, high_freq_factor {}, "
           "original_max_position_embeddings {}, expected factor >= 1, 0 < low < high, a positive length\n"
           "hint: Llama 3.1 uses 8, 1, 4, 8192",
           where, r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_pos);
  }
  const std::vector<std::string> names = tensor_names();
  for (const std::string& f : frozen)
    if (std::find(names.begin(), names.end(), f) == names.end())
      fail("config {}: frozen tensor {} is not a tensor of this model, expected one of {}\nhint: freeze by Hugging "
           "Face name (model.freeze)",
           where, f, fmt::join(names, ", "));
  for (const FrozenPart& part : frozen_parts)
    if (std::find(names.begin(), names.end(), part.tensor) == names.end() || part.begin < 0 || part.end <= part.begin)
      fail("config {}: frozen part {} [{}, {}) is not a range of a tensor of this model, expected one of {}\nhint: "
           "freeze by Hugging Face name (model.freeze)",
           where, part.tensor, part.begin, part.end, fmt::join(names, ", "));
}

std::vector<std::pair<int64_t, int64_t>> merged_ranges(std::vector<std::pair<int64_t, int64_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& x : ranges) {
    if (!merged.empty() && x.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, x.second);
    else
      merged.push_back(x);
  }
  return merged;
}

std::vector<std::string> LlamaConfig::tensor_names() const {
  std::vector<std::string> out{"wte", "attn_norm", "wqkv"};
  if (qkv_bias) out.push_back("bqkv");
  for (const char* name : {"wo", "ffn_norm", "w13", "w2", "norm"}) out.push_back(name);
  if (!tie_embeddings) out.push_back("wout");
  return out;
}

RopeFreqs LlamaConfig::rope_freqs() const {
  RopeFreqs r(rope_theta);
  if (rope_scaling.type == RopeScaling::Type::llama3) {
    r.llama3 = true;
    r.factor = rope_scaling.factor;
    r.low_freq_factor = rope_scaling.low_freq_factor;
    r.high_freq_factor = rope_scaling.high_freq_factor;
    r.original_max_pos = rope_scaling.original_max_pos;
  }
  return r;
}

bool LlamaConfig::is_frozen(const std::string& tensor) const {
  return std::find(frozen.begin(), frozen.end(), tensor) != frozen.end();
}

void LlamaConfig::check_heads(const FieldNames& names) const {
  if (head_size <= 0 && dim % n_heads != 0)
    fail("{}: got {}, expected a divisor of {} {}\nhint: head dim = {} / {}", names.head("n_heads"), n_heads,
         names("dim"), dim, names("dim"), names("n_heads"));
  if (head_dim() % 2 != 0)
    fail("{}: gives head dim {} ({} {} / {}), expected an even head dim (RoPE rotates pairs)\nhint: change {} or {}",
         names.head("n_heads"), head_dim(), names("dim"), dim, n_heads, names("dim"), names("n_heads"));
  if (n_kv_heads < 1 || n_kv_heads > n_heads || n_heads % n_kv_heads != 0)
    fail("{}: got {}, expected a divisor of {} {}\nhint: each key/value head serves the same number of query heads",
         names.head("n_kv_heads"), n_kv_heads, names("n_heads"), n_heads);
}

void LlamaConfig::check_seq_len(int64_t T, const FieldNames& names) const {
  if (T > max_seq_len)
    fail("{}: got {}, expected at most {} ({})\nhint: shorten the sequences, or use a model with a longer context",
         names.head("seq_len"), T, names("max_seq_len"), max_seq_len);
}

int64_t LlamaConfig::num_params() const {
  const int64_t C = dim, F = ffn_dim, H = n_heads, Hkv = n_kv_heads, V = vocab_size;
  const int64_t D = head_dim();
  int64_t per_layer = (H + 2 * Hkv) * D * C                  // wq, wk, wv
                      + H * D * C                            // wo
                      + 3 * F * C                            // w1 (gate), w3 (up), w2 (down)
                      + 2 * C                                // attn_norm, ffn_norm
                      + (qkv_bias ? (H + 2 * Hkv) * D : 0);  // q/k/v biases (Qwen2)
  int64_t total = V * C                                      // embedding
                  + int64_t(n_layers) * per_layer + C;       // final norm
  if (!tie_embeddings) total += V * C;                       // lm head
  return total;
}

LlamaConfig preset_config(const std::string& name) {
  // name, dim, n_layers, n_heads, n_kv_heads, ffn_dim, vocab, max_seq, eps, tied
  struct Preset {
    const char* name;
    int dim, n_layers, n_heads, n_kv_heads, ffn_dim, vocab, max_seq;
    float eps;
    bool tied;
  };
  // llama2.c's stories models share the classifier with the embedding and use eps 1e-5 (model.py).
  static const Preset presets[] = {
      {"stories15m", 288, 6, 6, 6, 768, 32000, 256, 1e-5f, true},
      {"stories42m", 512, 8, 8, 8, 1376, 32000, 1024, 1e-5f, true},
      {"stories110m", 768, 12, 12, 12, 2048, 32000, 1024, 1e-5f, true},
      {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 1e-5f, false},
      {"llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 1e-5f, false},
      {"llama2-13b", 5120, 40, 40, 40, 13824, 32000, 4096, 1e-5f, false},
      {"tiny", 64, 2, 4, 2, 176, 256, 256, 1e-6f, false},
  };
  std::string known;
  for (const Preset& p : presets) {
    if (name == p.name) {
      LlamaConfig c;
      c.dim = p.dim;
      c.n_layers = p.n_layers;
      c.n_heads = p.n_heads;
      c.n_kv_heads = p.n_kv_heads;
      c.ffn_dim = p.ffn_dim;
      c.vocab_size = p.vocab;
      c.max_seq_len = p.max_seq;
      c.norm_eps = p.eps;
      c.tie_embeddings = p.tied;
      c.validate(std::string("preset ") + p.name);
      return c;
    }
    known += known.empty() ? "" : ", ";
    known += p.name;
  }
  fail("unknown model preset '{}', expected one of: {}\nhint: pick a preset or give a config.json", name, known);
}

}  // namespace llamatrain::model
