// The config's public API: load_config (a file or a text; the pipeline is in config_load.cpp),
// to_yaml (every bound key in schema order, a file load_config reads back to the same TrainConfig),
// config_keys, config_help and the docs reference, all generated from the schema table
// (config_schema.cpp) so they cannot drift from it; and the values TrainConfig, ModelConfig and
// SftDatasetConfig derive from their keys (they assume a TrainConfig that passed validate).
#include "config/config.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"
#include "model/shard.h"
#include "config/config_schema.h"

namespace llamatrain::train {

namespace fs = std::filesystem;
using config_detail::last_component;
using config_detail::load;
using config_detail::parent_of;
using config_detail::parse_yaml;
using config_detail::schema;
using config_detail::Status;

// ---------------------------------------------------------------------------------------------
// Public API.

LoadedConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    fail("config {}: is a folder, expected a YAML file\nhint: e.g. configs/llama2_7b.yaml", path);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail("config {}: cannot open it ({}), expected a readable YAML file\nhint: check the path", path,
         std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return load(parse_yaml(ss.str(), path), path, overrides);
}

LoadedConfig load_config_text(const std::string& yaml, const std::string& source,
                              const std::vector<std::string>& overrides) {
  return load(parse_yaml(yaml, source), source, overrides);
}

std::string to_yaml(const TrainConfig& config) {
  // A tree of sections in schema order; leaves are YAML texts.
  struct Node {
    std::string leaf;
    std::vector<std::pair<std::string, Node>> kids;
  };
  Node root;
  for (const auto& sp : schema().specs()) {
    if (!sp.bound()) continue;
    Node* n = &root;
    const std::string& path = sp.info.path;
    size_t start = 0;
    while (true) {
      const size_t dot = path.find('.', start);
      const std::string name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      auto it = std::find_if(n->kids.begin(), n->kids.end(), [&](const auto& kv) { return kv.first == name; });
      if (it == n->kids.end()) {
        n->kids.emplace_back(name, Node{});
        it = n->kids.end() - 1;
      }
      n = &it->second;
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    n->leaf = sp.emit(config);
  }
  std::string out;
  std::function<void(const Node&, int)> print = [&](const Node& n, int indent) {
    for (const auto& [name, kid] : n.kids) {
      out += std::string(size_t(indent), ' ') + name + ":";
      if (kid.kids.empty()) {
        out += " " + kid.leaf + "\n";
      } else {
        out += "\n";
        print(kid, indent + 2);
      }
    }
  };
  print(root, 0);
  return out;
}

const std::vector<KeyInfo>& config_keys() {
  static const std::vector<KeyInfo> keys = [] {
    std::vector<KeyInfo> k;
    for (const auto& sp : schema().specs()) k.push_back(sp.info);
    return k;
  }();
  return keys;
}

namespace {
const char* status_word(Status s) {
  switch (s) {
    case Status::used: return "";
    case Status::ours: return "llamatrain's own key";
    case Status::ignored: return "ignored";
    case Status::restricted: return "only";
    case Status::alias: return "alias";
  }
  return "";
}
}  // namespace

std::string config_help() {
  std::string out =
      "Config keys (NeMo megatron_llama_config.yaml names). Override any of them as key=value or +key=value.\n";
  std::string section = "\x01";
  for (const auto& k : config_keys()) {
    const std::string sec = parent_of(k.path);
    if (sec != section) {
      out += "\n[" + (sec.empty() ? std::string("top level") : sec) + "]\n";
      section = sec;
    }
    out += "  " + k.path;
    switch (k.status) {
      case Status::ignored: out += "  (ignored: " + k.doc + ")\n"; continue;
      case Status::alias: out += "  (" + k.doc + ")\n"; continue;
      case Status::restricted: out += "  (only " + k.allowed + ": " + k.doc + ")\n"; continue;
      default: break;
    }
    out += fmt::format("  {}, default {}", k.type, k.default_value);
    if (!k.allowed.empty()) out += ", allowed " + k.allowed;
    if (k.status == Status::ours) out += ", llamatrain's own key";
    out += "\n      " + k.doc + "\n";
  }
  return out;
}

std::string config_reference_markdown() {
  auto cell = [](std::string s) {
    std::string out;
    for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  std::string out;
  std::string section = "\x01";
  for (const auto& k : config_keys()) {
    const std::string sec = parent_of(k.path);
    if (sec != section) {
      out += fmt::format("\n#### `{}`\n\n| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n",
                         sec.empty() ? "(top level)" : sec);
      section = sec;
    }
    std::string type = k.type, def = k.default_value.empty() ? "" : "`" + k.default_value + "`";
    std::string doc = k.doc;
    if (k.status == Status::ignored || k.status == Status::alias || k.status == Status::restricted)
      type = status_word(k.status);
    if (k.status == Status::ours) doc = "*(ours)* " + doc;
    if (k.status == Status::ignored) def.clear();
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", last_component(k.path), cell(type), cell(def), cell(k.allowed),
                       cell(doc));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Derived values.

int64_t TrainConfig::data_parallel_size() const {
  const int64_t mp = int64_t(model.tensor_model_parallel_size) * model.pipeline_model_parallel_size;
  return world_size() / mp;
}

int64_t TrainConfig::num_micro_batches() const {
  return model.global_batch_size / (model.micro_batch_size * data_parallel_size());
}

LrSchedule TrainConfig::lr_schedule() const {
  return make_schedule(model.optim.sched, model.optim.lr, trainer.max_steps);
}

data::GptDataConfig TrainConfig::gpt_data_config() const {
  data::GptDataConfig g;
  g.data_prefix = model.data.data_prefix.train;
  g.per_split = model.data.data_prefix.per_split;
  g.validation_prefix = model.data.data_prefix.validation;
  g.test_prefix = model.data.data_prefix.test;
  g.splits_string = model.data.splits_string;
  g.seq_length = model.data.seq_length;
  g.seed = uint32_t(model.seed);
  g.drop_last_partial_validation = model.data.validation_drop_last;
  if (model.data.index_mapping_dir) g.cache.dir = *model.data.index_mapping_dir;
  return g;
}

data::SampleOptions TrainConfig::sample_options(int32_t eod_id) const {
  data::SampleOptions o;
  o.eod_id = eod_id;
  o.eod_mask_loss = model.data.eod_mask_loss;
  o.reset_position_ids = model.data.reset_position_ids;
  o.reset_attention_mask = model.data.reset_attention_mask;
  return o;
}

model::LlamaConfig ModelConfig::llama_config(int vocab_size) const {
  model::LlamaConfig c;
  c.dim = hidden_size;
  c.ffn_dim = ffn_hidden_size;
  c.n_layers = num_layers;
  c.n_heads = num_attention_heads;
  c.n_kv_heads = kv_heads();
  c.vocab_size = vocab_size;
  c.vocab_multiple = std::max(1, make_vocab_size_divisible_by);
  c.max_seq_len = int(max_position_embeddings);
  c.norm_eps = float(layernorm_epsilon);
  c.rope_theta = float(rotary_base);
  c.tie_embeddings = share_embeddings_and_output_weights;
  return c;
}

std::vector<int> ModelConfig::pipeline_layers(const FieldNames& names) const {
  return model::pipeline_split(num_layers, std::max(1, pipeline_model_parallel_size),
                               num_layers_in_first_pipeline_stage.value_or(0),
                               num_layers_in_last_pipeline_stage.value_or(0), names);
}

int64_t ModelConfig::padded_vocab_size(int64_t vocab_size) const {
  return llama_config(int(vocab_size)).padded_vocab_size(std::max(1, tensor_model_parallel_size));
}

std::string ModelConfig::tokenizer_model_path() const {
  if (tokenizer.library == "sentencepiece" && tokenizer.model) return *tokenizer.model;
  if (tokenizer.library == "huggingface" && tokenizer.type)
    return data::resolve_tokenizer_path(*tokenizer.type, data::TokenizerLibrary::kHuggingFace);
  if (!init_from) return "";
  // init_from's own tokenizer: tokenizer.model when the folder has one, else its tokenizer.json
  // (huggingface prefers the tokenizer.json).
  return data::resolve_tokenizer_path(*init_from, tokenizer.library == "huggingface"
                                                      ? data::TokenizerLibrary::kHuggingFace
                                                      : data::TokenizerLibrary::kAuto);
}

data::SftConfig SftDatasetConfig::sft_config(int32_t pad_id) const {
  data::SftConfig s;
  const std::string tail = "{" + label_key + "}";
  s.prompt_template = prompt_template.substr(0, prompt_template.size() - tail.size());
  s.completion_key = label_key;
  s.completion_map = completion_map;
  s.seq_length = max_seq_length;
  s.pad_id = pad_id;
  s.add_bos = add_bos;
  s.add_eos = add_eos;
  s.pack = pack;
  s.truncate_prompt_left = truncation_method == "left";
  return s;
}

}  // namespace llamatrain::train
