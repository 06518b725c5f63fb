// HF name mapping and checkpoint load/save; see hf_checkpoint.h. A model-parallel rank loads its part
// of each HF tensor through its TensorShards; saving takes a whole model.
#include "io/hf_checkpoint.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/file.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io/vocab_resize.h"

namespace llamatrain::io {

std::vector<HfTensorSlice> hf_tensor_slices(const model::LlamaConfig& c) {
  const int64_t C = c.dim, F = c.ffn_dim, D = c.head_dim(), H = c.n_heads, Hkv = c.n_kv_heads;
  const int64_t HD = H * D, QKV = c.qkv_dim();
  std::vector<HfTensorSlice> out;
  // rows_per_layer: rows of one layer's block in the stacked tensor.
  auto add = [&](std::string hf, const std::string& param, int layer, int64_t rows_per_layer, int64_t row_begin,
                 int64_t rows, int64_t cols) {
    HfTensorSlice t{std::move(hf), param, layer, row_begin, rows, cols, 0, -1, {rows, cols}};
    t.element = (layer < 0 ? 0 : int64_t(layer) * rows_per_layer * cols) + row_begin * cols;
    if (param.find("norm") != std::string::npos) t.shape = {cols};
    out.push_back(std::move(t));
  };
  // A q/k/v bias (Qwen2): rows of "bqkv" (L, QKV) in wqkv's order, one column each; HF shape {rows}.
  auto bias = [&](std::string hf, int layer, int64_t row_begin, int64_t rows) {
    add(std::move(hf), "bqkv", layer, QKV, row_begin, rows, 1);
    out.back().shape = {rows};
  };
  add("model.embed_tokens.weight", "wte", -1, 0, 0, c.vocab_size, C);
  for (int l = 0; l < c.n_layers; l++) {
    const std::string p = fmt::format("model.layers.{}.", l);
    add(p + "self_attn.q_proj.weight", "wqkv", l, QKV, 0, HD, C);
    if (c.qkv_bias) bias(p + "self_attn.q_proj.bias", l, 0, HD);
    add(p + "self_attn.k_proj.weight", "wqkv", l, QKV, HD, Hkv * D, C);
    if (c.qkv_bias) bias(p + "self_attn.k_proj.bias", l, HD, Hkv * D);
    add(p + "self_attn.v_proj.weight", "wqkv", l, QKV, HD + Hkv * D, Hkv * D, C);
    if (c.qkv_bias) bias(p + "self_attn.v_proj.bias", l, HD + Hkv * D, Hkv * D);
    add(p + "self_attn.o_proj.weight", "wo", l, C, 0, C, HD);
    add(p + "mlp.gate_proj.weight", "w13", l, 2 * F, 0, F, C);
    add(p + "mlp.up_proj.weight", "w13", l, 2 * F, F, F, C);
    add(p + "mlp.down_proj.weight", "w2", l, C, 0, C, F);
    add(p + "input_layernorm.weight", "attn_norm", l, 1, 0, 1, C);
    add(p + "post_attention_layernorm.weight", "ffn_norm", l, 1, 0, 1, C);
  }
  add("model.norm.weight", "norm", -1, 0, 0, 1, C);
  if (!c.tie_embeddings) add("lm_head.weight", "wout", -1, 0, 0, c.vocab_size, C);
  return out;
}

std::vector<HfTensorSlice> hf_tensor_slices(const model::LlamaModel& m) {
  CHECK(!m.is_sharded(), "hf_tensor_slices of a model-parallel rank's model: use the config's slices and each "
                         "tensor's shard, or gather the weights first");
  auto out = hf_tensor_slices(m.config());
  for (auto& t : out) {
    const model::ParamSpec* s = m.find_param(t.param);
    CHECK(s != nullptr, "no parameter tensor {}", t.param);
    t.offset = s->offset + t.element;
  }
  return out;
}

namespace {

bool ends_with_any(const std::string& name, std::initializer_list<const char*> tails) {
  return std::any_of(tails.begin(), tails.end(), [&](const char* t) { return name.ends_with(t); });
}

// A tied model's checkpoint that still holds lm_head.weight (some exports write the shared tensor
// under both names; Qwen2.5's small models ship without it): accepted only when it equals
// model.embed_tokens.weight element for element, since the tied model could not hold a different one.
// check_tied_shape checks its shape from the header; check_tied_copy, its values.
void check_tied_shape(const SafetensorsCheckpoint& ckpt, const model::LlamaConfig& c) {
  const std::string emb = "model.embed_tokens.weight", head = "lm_head.weight";
  const TensorView& b = ckpt.get(head);
  if (b.shape != std::vector<int64_t>{c.vocab_size, c.dim})
    fail("{}: tensor {} has shape [{}], expected [{}, {}] (a copy of {}: config.json says tie_word_embeddings)\n"
         "hint: set tie_word_embeddings to false in config.json if the model has its own output layer",
         ckpt.file_of(head), head, fmt::join(b.shape, ", "), c.vocab_size, c.dim, emb);
}

void check_tied_copy(const SafetensorsCheckpoint& ckpt, const model::LlamaConfig& c) {
  const std::string emb = "model.embed_tokens.weight", head = "lm_head.weight";
  const std::vector<int64_t> shape = {c.vocab_size, c.dim};
  const TensorView& a = ckpt.get(emb);
  const TensorView& b = ckpt.get(head);
  const std::string& file = ckpt.file_of(head);
  check_tied_shape(ckpt, c);
  bool equal = a.dtype == b.dtype && a.nbytes == b.nbytes && std::memcmp(a.data, b.data, a.nbytes) == 0;
  if (!equal && a.dtype != b.dtype) {  // the same values in two dtypes
    constexpr int64_t kChunk = 1 << 20;
    const int64_t n = b.numel();
    std::vector<float> x(size_t(std::min(n, kChunk))), y(x.size());
    equal = true;
    for (int64_t i = 0; i < n && equal; i += kChunk) {
      const int64_t k = std::min(kChunk, n - i);
      ckpt.read_f32(emb, shape, i, k, x.data());
      ckpt.read_f32(head, shape, i, k, y.data());
      equal = std::memcmp(x.data(), y.data(), size_t(k) * sizeof(float)) == 0;
    }
  }
  if (!equal)
    fail("{}: tensor {} differs from {}, but config.json says tie_word_embeddings (one tensor for both), "
         "expected no {} or an identical copy\nhint: set tie_word_embeddings to false in config.json if the model "
         "has its own output layer",
         file, head, emb, head);
}

// A tensor the config does not account for: Error naming it, its file and what is supported.
[[noreturn]] void refuse_unexpected(const SafetensorsCheckpoint& ckpt, const model::LlamaConfig& c,
                                    const std::string& name) {
  const std::string& file = ckpt.file_of(name);
  if (name.find(".W_pack.") != std::string::npos)
    fail("{}: tensor {} is a fused query/key/value projection (W_pack, as Baichuan stores it), which llamatrain "
         "does not support, expected separate self_attn.q_proj, k_proj and v_proj tensors\nhint: split W_pack's "
         "rows into q_proj, k_proj and v_proj (in that order) and convert the model to a Llama layout",
         file, name);
  if (ends_with_any(name, {".self_attn.q_proj.bias", ".self_attn.k_proj.bias", ".self_attn.v_proj.bias"}))
    fail("{}: tensor {} is a query/key/value bias, but config.json (model_type {}) declares no attention "
         "biases, expected none\nhint: models with q/k/v biases are Qwen2's: model_type \"qwen2\" in "
         "config.json",
         file, name, model::family_name(c.family));
  if (name.ends_with(".self_attn.o_proj.bias"))
    fail("{}: tensor {} is a bias on the attention output projection, which llamatrain does not support, "
         "expected biases on q/k/v only (Qwen2) or none\nhint: only the Llama, Qwen2 and Mistral architectures "
         "can be loaded",
         file, name);
  if (name.find(".mlp.") != std::string::npos && name.ends_with(".bias"))
    fail("{}: tensor {} is an MLP bias, which llamatrain does not support, expected gate/up/down projections "
         "without biases\nhint: only the Llama, Qwen2 and Mistral architectures can be loaded",
         file, name);
  fail("{}: unexpected tensor {}, expected only the tensors of config.json's architecture (model_type {})\n"
       "hint: the checkpoint does not match config.json (num_hidden_layers, tie_word_embeddings, model_type) or is "
       "not a Llama, Qwen2 or Mistral model",
       file, name, model::family_name(c.family));
}

// The checkpoint's tensors as the model of `config` reads them: those of its own vocab_size when the
// vocabulary grows (the model's first rows, as rows are row-major).
model::LlamaConfig file_config_of(const model::LlamaConfig& config, const VocabGrowth* growth) {
  model::LlamaConfig file_config = config;
  if (growth && growth->active()) {
    CHECK(growth->rows == file_config.vocab_size, "vocabulary growth to {} rows, model has {}", growth->rows,
          file_config.vocab_size);
    file_config.vocab_size = int(growth->base_rows);
  }
  return file_config;
}

// Every check of loading that needs no tensor's data, from the headers: tensors the architecture lacks
// first (a fused W_pack is refused as that, not as missing q_proj), then each tensor the model reads
// present with its shape and a dtype it converts.
void check_headers(const SafetensorsCheckpoint& ckpt, const model::LlamaConfig& config,
                   const model::LlamaConfig& file_config, const std::vector<HfTensorSlice>& slices) {
  std::set<std::string> used;
  for (const auto& t : slices) used.insert(t.hf_name);
  for (const auto& name : ckpt.names()) {
    if (used.count(name) || name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    if (name == "lm_head.weight" && config.tie_embeddings) {
      check_tied_shape(ckpt, file_config);
      continue;
    }
    refuse_unexpected(ckpt, config, name);
  }
  for (const auto& t : slices) ckpt.read_f32(t.hf_name, t.shape, 0, 0, nullptr);
}

}  // namespace

size_t check_hf_weights(const std::string& dir, const model::LlamaConfig& config, const VocabGrowth* growth) {
  const SafetensorsCheckpoint ckpt(dir);
  const model::LlamaConfig file_config = file_config_of(config, growth);
  check_headers(ckpt, config, file_config, hf_tensor_slices(file_config));
  return ckpt.names().size();
}

void load_hf_weights(model::LlamaModel& m, const std::string& dir, const BytesDone& progress,
                     const VocabGrowth* growth) {
  SafetensorsCheckpoint ckpt(dir);
  const model::LlamaConfig file_config = file_config_of(m.config(), growth);
  const std::vector<HfTensorSlice> slices = hf_tensor_slices(file_config);
  check_headers(ckpt, m.config(), file_config, slices);
  const std::vector<std::string> names = ckpt.names();
  if (m.config().tie_embeddings && std::find(names.begin(), names.end(), "lm_head.weight") != names.end())
    check_tied_copy(ckpt, file_config);
  for (const auto& t : slices) {
    const TensorView& view = ckpt.get(t.hf_name);  // present (and, below, the right shape) on every rank
    const model::ParamSpec* s = m.find_param(t.param);
    if (!m.is_sharded()) {  // the whole tensor, in pieces of the backend's memory
      CHECK(s != nullptr, "no parameter tensor {}", t.param);
      m.backend().write_elements(
          m.param_arena() + s->offset + t.element, t.rows * t.cols,
          [&](float* host, int64_t first, int64_t n) { ckpt.read_f32(t.hf_name, t.shape, first, n, host); });
      if (progress) progress(int64_t(view.nbytes));
      continue;
    }
    if (!s) {  // a tensor of another pipeline stage: its shape and dtype are still checked
      ckpt.read_f32(t.hf_name, t.shape, 0, 0, nullptr);
      continue;
    }
    // The HF tensor is the full elements [element, element + n) of the parameter: copy the part of
    // every run of this rank's shard that falls inside it.
    const int64_t begin = t.element, end = t.element + t.rows * t.cols;
    float* dst = m.param_arena() + s->offset;
    int64_t copied = 0;
    s->shard.for_each_run([&](int64_t local, int64_t full, int64_t n) {
      const int64_t a = std::max(full, begin), b = std::min(full + n, end);
      if (a >= b) return;
      m.backend().write_elements(dst + local + (a - full), b - a, [&](float* host, int64_t first, int64_t count) {
        ckpt.read_f32(t.hf_name, t.shape, a - begin + first, count, host);
      });
      copied += b - a;
    });
    if (progress) progress(copied * dtype_size(view.dtype));
  }
  if (growth && growth->active()) fill_new_rows(m, ckpt, *growth);
  m.params_changed();
}

std::unique_ptr<model::LlamaModel> load_hf_model(const std::string& dir, model::Precision precision,
                                                 model::Device device) {
  const model::LlamaConfig c = read_hf_config(dir);
  auto m = std::make_unique<model::LlamaModel>(c, precision, 1234, model::ShardPlan{}, nullptr, device);
  load_hf_weights(*m, dir);
  return m;
}

const std::vector<std::string>& hf_export_files() {
  static const std::vector<std::string> names = {"config.json",
                                                 "generation_config.json",
                                                 "model.safetensors",
                                                 "model.safetensors.index.json",
                                                 "model-*-of-*.safetensors",
                                                 "tokenizer.model",
                                                 "tokenizer.json",
                                                 "tokenizer_config.json",
                                                 "special_tokens_map.json"};
  return names;
}

void write_hf_weights(const model::LlamaModel& m, const std::string& dir, const std::string& torch_dtype,
                      int64_t max_shard_bytes, const BytesDone& progress) {
  const bool bf16_out = torch_dtype == "bfloat16";
  if (!bf16_out && torch_dtype != "float32") fail("export dtype: got '{}', expected float32 or bfloat16", torch_dtype);
  const DType dtype = bf16_out ? DType::BF16 : DType::F32;
  model::Kernels& k = m.backend();
  const float* base = m.param_arena();
  // Host memory: the writer reads the arena, or a bf16 copy of it. A device's memory: each tensor is
  // read in pieces as the writer asks for its bytes.
  std::vector<bf16> converted;
  if (bf16_out && k.host_memory()) {
    converted.resize(size_t(m.num_params()));
    bf16_from_float(converted.data(), base, m.num_params());
  }
  std::vector<TensorToWrite> tensors;
  for (const auto& t : hf_tensor_slices(m)) {
    if (k.host_memory()) {
      const void* data =
          bf16_out ? static_cast<const void*>(converted.data() + t.offset) : static_cast<const void*>(base + t.offset);
      tensors.push_back({t.hf_name, dtype, t.shape, data});
      continue;
    }
    const float* src = base + t.offset;
    auto read = [&k, src, bf16_out](void* out, size_t offset, size_t bytes) {
      const size_t es = bf16_out ? 2 : 4;
      k.read_elements(src + offset / es, int64_t(bytes / es), [&](const float* h, int64_t first, int64_t n) {
        if (bf16_out)
          bf16_from_float(static_cast<bf16*>(out) + first, h, n);
        else
          std::memcpy(static_cast<float*>(out) + first, h, sizeof(float) * size_t(n));
      });
    };
    tensors.push_back({t.hf_name, dtype, t.shape, nullptr, read});
  }
  write_safetensors_sharded(dir, tensors, max_shard_bytes, progress);
  write_hf_config(dir + "/config.json", m.config(), torch_dtype);
}

void save_hf_checkpoint(const model::LlamaModel& m, const std::string& dir, const std::string& torch_dtype,
                        int64_t max_shard_bytes, const std::vector<HfExtraFile>& extra_files) {
  if (torch_dtype != "bfloat16" && torch_dtype != "float32")
    fail("export dtype: got '{}', expected float32 or bfloat16", torch_dtype);
  AtomicDir out(dir, hf_export_files());
  write_hf_weights(m, out.temp_path(), torch_dtype, max_shard_bytes);
  for (const auto& f : extra_files) write_file_atomic(out.file(f.name), f.bytes);
  out.commit();
}

namespace {

// "model.layers.3.mlp.up_proj.weight" -> "model.layers.N.mlp.up_proj.weight" (with N = `layer`).
std::string layer_form(const HfTensorSlice& t, const std::string& layer) {
  if (t.layer < 0) return t.hf_name;
  const std::string p = fmt::format("model.layers.{}.", t.layer);
  return "model.layers." + layer + "." + t.hf_name.substr(p.size());
}

}  // namespace

std::string hf_names_of(const model::LlamaConfig& c, const std::string& tensor) {
  std::vector<std::string> names;
  for (const auto& t : hf_tensor_slices(c))
    if (t.param == tensor && (t.layer <= 0)) names.push_back(layer_form(t, "*"));
  return fmt::format("{}", fmt::join(names, ", "));
}

namespace {

// A model.freeze pattern: a glob over HF names, and optionally "[a:b]", the rows of each matched tensor
// (elements of a 1-D one) from a to b (Python's slice without a step; a or b may be left out).
struct FreezePattern {
  std::string glob;
  bool sliced = false;
  int64_t begin = 0, end = -1;  // end -1: to the end
};

FreezePattern parse_freeze_pattern(const std::string& p, const std::string& key) {
  FreezePattern out{p};
  if (p.empty() || p.back() != ']') return out;
  const size_t open = p.rfind('[');
  const size_t colon = p.find(':', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || colon == std::string::npos || colon > p.size() - 1)
    fail("{}: '{}' ends in ']' without a row range '[begin:end]'\nhint: e.g. model.embed_tokens.weight[:32000] "
         "freezes the first 32000 rows",
         key, p);
  auto number = [&](const std::string& text, int64_t fallback) {
    if (text.empty()) return fallback;
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || v < 0)
      fail("{}: '{}' has the row range [{}], expected [begin:end] with whole numbers >= 0 (either may be left "
           "out)\nhint: e.g. model.embed_tokens.weight[:32000]",
           key, p, p.substr(open + 1, p.size() - open - 2));
    return v;
  };
  out.glob = p.substr(0, open);
  out.sliced = true;
  out.begin = number(p.substr(open + 1, colon - open - 1), 0);
  out.end = number(p.substr(colon + 1, p.size() - colon - 2), -1);
  if (out.end >= 0 && out.end <= out.begin)
    fail("{}: '{}' is an empty row range, expected begin < end\nhint: e.g. model.embed_tokens.weight[:32000]", key, p);
  return out;
}

}  // namespace

FreezeSet resolve_freeze(const model::LlamaConfig& c, const std::vector<std::string>& patterns,
                         const std::string& key) {
  const auto slices = hf_tensor_slices(c);
  // The names once per form, with their shapes, for the message of a pattern that matches nothing.
  auto name_list = [&] {
    std::string out;
    for (const auto& t : slices) {
      if (t.layer > 0) continue;
      std::string shape;  // (a shape without its vocabulary yet says so)
      const bool vocab = t.param == "wte" || t.param == "wout";
      for (size_t i = 0; i < t.shape.size(); i++)
        shape += (i ? ", " : "") + (vocab && i == 0 && c.vocab_size <= 0 ? "vocab_size" : std::to_string(t.shape[i]));
      out += fmt::format("\n  {} ({})", layer_form(t, "N"), shape);
    }
    return out + fmt::format("\n  (N = 0..{})", c.n_layers - 1);
  };
  std::vector<FreezePattern> parsed;
  for (const auto& p : patterns) {
    if (p.empty()) fail("{}: an empty pattern, expected a Hugging Face parameter name or glob\nhint: remove it", key);
    parsed.push_back(parse_freeze_pattern(p, key));
    const FreezePattern& f = parsed.back();
    auto matches = [&](const HfTensorSlice& t) { return fnmatch(f.glob.c_str(), t.hf_name.c_str(), 0) == 0; };
    if (std::none_of(slices.begin(), slices.end(), matches))
      fail("{}: '{}' matches no parameter of the model, expected a Hugging Face parameter name or glob (* matches "
           "any characters, dots included), optionally with a row range [begin:end]; the model's parameters:{}\n"
           "hint: e.g. model.layers.* freezes every layer, model.layers.0.* the first",
           key, f.glob, name_list());
    for (const auto& t : slices) {  // a row range inside each tensor it names, where the size is known
      const bool vocab_unknown = (t.param == "wte" || t.param == "wout") && c.vocab_size <= 0;
      const int64_t units = t.shape.size() == 1 ? t.shape[0] : t.rows;
      if (f.sliced && matches(t) && !vocab_unknown && f.begin >= units)
        fail("{}: '{}' starts at row {} of {}, which has {} rows, expected a range inside it\nhint: rows are "
             "numbered from 0, e.g. {}[:{}]",
             key, p, f.begin, t.hf_name, units, f.glob, units);
    }
  }
  // Each model tensor's frozen element ranges in its full tensor, merged.
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> ranges;
  std::map<std::string, int64_t> size;
  for (const auto& t : slices) {
    const bool flat = t.shape.size() == 1;  // a norm weight or a bias: its elements are its rows
    const int64_t units = flat ? t.shape[0] : t.rows, per = flat ? 1 : t.cols;
    size[t.param] += t.rows * t.cols;
    for (const auto& f : parsed) {
      if (fnmatch(f.glob.c_str(), t.hf_name.c_str(), 0) != 0) continue;
      const int64_t b = f.sliced ? std::min(f.begin, units) : 0;
      const int64_t e = f.sliced && f.end >= 0 ? std::min(f.end, units) : units;
      if (b < e) ranges[t.param].emplace_back(t.element + b * per, t.element + e * per);
    }
  }
  FreezeSet out;
  for (const std::string& name : c.tensor_names()) {
    auto it = ranges.find(name);
    if (it == ranges.end()) continue;
    const auto merged = model::merged_ranges(std::move(it->second));
    const bool unknown_rows = (name == "wte" || name == "wout") && c.vocab_size <= 0;
    if (!unknown_rows && merged.size() == 1 && merged[0].first == 0 && merged[0].second == size[name]) {
      out.tensors.push_back(name);
      continue;
    }
    if (unknown_rows && std::none_of(parsed.begin(), parsed.end(), [](const FreezePattern& f) { return f.sliced; }) &&
        !merged.empty()) {
      out.tensors.push_back(name);  // a whole vocabulary tensor, its size not known yet
      continue;
    }
    for (const auto& [b, e] : merged) out.parts.push_back({name, b, e});
  }
  if (!patterns.empty() && out.tensors.size() == c.tensor_names().size())
    fail("{}: the patterns freeze every parameter of the model, expected something left to train\nhint: leave "
         "the embedding or the output layer out (e.g. [model.layers.*, model.norm.weight])",
         key);
  return out;
}

}  // namespace llamatrain::io
