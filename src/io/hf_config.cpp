// Hugging Face config.json <-> LlamaConfig (docs/formats.md 4.1). The only file that spells HF config
// keys. Reading accepts 4.x keys and the newer spellings (rope_parameters, dtype), applies 4.x
// defaults, takes the Llama, Mistral and Qwen2 families (q/k/v biases, explicit head_dim, llama3
// RoPE scaling, sliding window, eos lists), and refuses what the model cannot run (other RoPE
// scalings, o/MLP biases, non-SiLU activations, Qwen2's per-layer sliding window, other model
// types) by name instead of silently computing garbage.
#include "io/hf_config.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <vector>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"

namespace llamatrain::io {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string type_of(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "float";
  return v.type_name();
}

std::string preview(const json& v) {
  std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Typed access to the config object; every failure names the file and the key.
class Reader {
 public:
  Reader(const json& j, const std::string& file) : j_(j), file_(file) {}

  const json* get(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  // Present and not null.
  const json* value(const char* key) const {
    const json* v = get(key);
    return v && !v->is_null() ? v : nullptr;
  }
  [[noreturn]] void wrong_type(const char* key, const json& v, const char* expected) const {
    fail("{}: key \"{}\" has type {} (value {}), expected {}\nhint: fix config.json", file_, key, type_of(v),
         preview(v), expected);
  }
  int as_int(const char* key, const json& v) const {
    if (!v.is_number_integer()) wrong_type(key, v, "integer");
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(INT_MAX)
                               : (v.get<int64_t>() < INT_MIN || v.get<int64_t>() > INT_MAX))
      fail("{}: key \"{}\" is {}, expected an integer that fits in 32 bits\nhint: fix config.json", file_, key,
           preview(v));
    return int(v.get<int64_t>());
  }
  int required_int(const char* key) const {
    const json* v = get(key);
    if (!v)
      fail("{}: required key \"{}\" is missing, expected an integer\nhint: is this a Llama config.json?", file_, key);
    return as_int(key, *v);
  }
  int optional_int(const char* key, int def) const {
    const json* v = value(key);
    return v ? as_int(key, *v) : def;
  }
  double as_number(const char* key, const json& v) const {
    if (!v.is_number()) wrong_type(key, v, "number");
    return v.get<double>();
  }
  double optional_number(const char* key, double def) const {
    const json* v = value(key);
    return v ? as_number(key, *v) : def;
  }
  bool optional_bool(const char* key, bool def) const {
    const json* v = value(key);
    if (!v) return def;
    if (!v->is_boolean()) wrong_type(key, *v, "boolean");
    return v->get<bool>();
  }
  const std::string* optional_string(const char* key) const {
    const json* v = value(key);
    if (!v) return nullptr;
    if (!v->is_string()) wrong_type(key, *v, "string");
    return &v->get_ref<const std::string&>();
  }
  // Token ids: an integer, or a non-empty list of them (Llama 3 lists several eos ids).
  std::vector<int> token_ids(const char* key, int def) const {
    const json* v = value(key);
    if (!v) return {def};
    if (v->is_array()) {
      if (v->empty()) wrong_type(key, *v, "integer or non-empty list of integers");
      std::vector<int> out;
      for (const json& e : *v) out.push_back(as_int(key, e));
      return out;
    }
    if (!v->is_number_integer()) wrong_type(key, *v, "integer or list of integers");
    return {as_int(key, *v)};
  }
  const std::string& file() const { return file_; }

 private:
  const json& j_;
  const std::string& file_;
};

[[noreturn]] void unsupported(const std::string& file, const std::string& what, const std::string& got,
                              const std::string& expected) {
  fail("{}: {} is {}, which llamatrain does not support, expected {}\nhint: llamatrain trains Llama, Mistral "
       "and Qwen2 models (SiLU, q/k/v biases only as in Qwen2, RoPE scaling none or llama3)",
       file, what, got, expected);
}

// rope_scaling / rope_parameters: {"rope_type" (or 4.x "type"): "default" | "llama3", factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings}.
model::RopeScaling read_rope_scaling(const std::string& file, const std::string& key, const json& v) {
  if (!v.is_object())
    fail("{}: {} has type {} (value {}), expected an object or null\nhint: fix config.json", file, key, type_of(v),
         preview(v));
  Reader r(v, file);
  const std::string* type = r.optional_string("rope_type");
  if (!type) type = r.optional_string("type");
  model::RopeScaling out;
  if (!type || *type == "default") return out;
  if (*type != "llama3") unsupported(file, key + ".rope_type", "\"" + *type + "\"", "\"default\" or \"llama3\"");
  auto number = [&](const char* k) {
    const json* x = r.value(k);
    if (!x)
      fail("{}: {} of rope_type llama3 has no \"{}\", expected a number\nhint: Llama 3.1's config.json has "
           "factor, low_freq_factor, high_freq_factor and original_max_position_embeddings",
           file, key, k);
    double d = r.as_number(k, *x);
    if (!std::isfinite(d) || std::fabs(d) > 1e30) fail("{}: {}.{} is {}, expected a finite number", file, key, k, d);
    return float(d);
  };
  out.type = model::RopeScaling::Type::llama3;
  out.factor = number("factor");
  out.low_freq_factor = number("low_freq_factor");
  out.high_freq_factor = number("high_freq_factor");
  const json* omp = r.value("original_max_position_embeddings");
  if (!omp) number("original_max_position_embeddings");  // fails, naming the key
  out.original_max_pos = r.as_int("original_max_position_embeddings", *omp);
  return out;
}

// config.json inside a model folder, or the file itself.
std::string config_file(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
}

// The config file as a JSON object.
json read_config_object(const std::string& file) {
  constexpr size_t kMaxConfigBytes = 16u << 20;
  const std::string text = read_small_file(file, kMaxConfigBytes, "Hugging Face config.json");
  // nlohmann stops at a NUL as if the input ended there; JSON text never contains one.
  if (text.find('\0') != std::string::npos)
    fail("{}: has a NUL byte at offset {}, expected JSON text\nhint: fix or re-download config.json", file,
         text.find('\0'));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({}), expected a JSON object\nhint: fix or re-download config.json", file, e.what());
  }
  if (!j.is_object())
    fail("{}: config is a JSON {}, expected an object\nhint: fix or re-download config.json", file, type_of(j));
  return j;
}

// Architecture: Llama, and the families that are the same network with small differences:
// Mistral (sliding-window attention), Qwen2 / Qwen2.5 (biases on q, k and v). Refuses other
// activations and biases.
model::Family read_family(const Reader& r) {
  const std::string& file = r.file();
  model::Family family = model::Family::llama;
  if (const std::string* mt = r.optional_string("model_type")) {
    if (*mt == "mistral")
      family = model::Family::mistral;
    else if (*mt == "qwen2")
      family = model::Family::qwen2;
    else if (*mt != "llama")
      unsupported(file, "model_type", "\"" + *mt + "\"", "\"llama\", \"mistral\" or \"qwen2\"");
  }
  if (const std::string* act = r.optional_string("hidden_act"))
    if (*act != "silu") unsupported(file, "hidden_act", "\"" + *act + "\"", "\"silu\"");
  // Llama's attention_bias puts biases on o_proj too; only Qwen2's q/k/v biases are supported.
  if (r.optional_bool("attention_bias", false))
    unsupported(file, "attention_bias", "true", "false (q/k/v biases come with model_type \"qwen2\")");
  if (r.optional_bool("mlp_bias", false)) unsupported(file, "mlp_bias", "true", "false");
  r.optional_string("torch_dtype");
  r.optional_string("dtype");
  return family;
}

// The sizes: model dim, FFN dim, heads, layers, vocabulary, KV heads, context; tied embeddings.
void read_sizes(const Reader& r, model::LlamaConfig* c) {
  c->dim = r.required_int("hidden_size");
  c->ffn_dim = r.required_int("intermediate_size");
  c->n_heads = r.required_int("num_attention_heads");
  c->n_layers = r.required_int("num_hidden_layers");
  c->vocab_size = r.required_int("vocab_size");
  c->n_kv_heads = r.optional_int("num_key_value_heads", c->n_heads);
  c->max_seq_len = r.optional_int("max_position_embeddings", 2048);
  c->tie_embeddings = r.optional_bool("tie_word_embeddings", false);
}

// BOS and EOS ids (EOS: the first of a list, the others as extra EOS ids).
void read_special_ids(const Reader& r, model::LlamaConfig* c) {
  // bos_token_id null (or absent in a Qwen2 config): the model has no BOS.
  c->bos_id = r.get("bos_token_id") && !r.value("bos_token_id")
                  ? -1
                  : r.token_ids("bos_token_id", c->family == model::Family::qwen2 ? -1 : 1).front();
  const std::vector<int> eos = r.token_ids("eos_token_id", 2);
  c->eos_id = eos.front();
  for (size_t i = 1; i < eos.size(); i++)
    if (eos[i] != c->eos_id &&
        std::find(c->extra_eos_ids.begin(), c->extra_eos_ids.end(), eos[i]) == c->extra_eos_ids.end())
      c->extra_eos_ids.push_back(eos[i]);
}

bool same_scaling(const model::RopeScaling& a, const model::RopeScaling& b) {
  return a.type == b.type && a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
         a.high_freq_factor == b.high_freq_factor && a.original_max_pos == b.original_max_pos;
}

// RoPE: rope_theta and the scaling, from rope_scaling (4.x) or rope_parameters (transformers v5, which
// also holds rope_theta); both present must agree. "default" (or null) is no scaling; "llama3" is
// Llama 3.1's; others are refused. Returns rope_theta.
double read_rope(const Reader& r, model::RopeScaling* scaling) {
  const std::string& file = r.file();
  double theta = r.optional_number("rope_theta", 10000.0);
  const json* rs = r.value("rope_scaling");
  const json* rp = r.value("rope_parameters");
  if (rp) {
    if (!rp->is_object()) r.wrong_type("rope_parameters", *rp, "object");
    Reader rr(*rp, file);
    if (const json* t = rr.value("rope_theta")) {
      double t2 = rr.as_number("rope_theta", *t);
      if (r.value("rope_theta") && t2 != theta)
        fail("{}: rope_theta is {} but rope_parameters.rope_theta is {}, expected one value\nhint: fix "
             "config.json",
             file, theta, t2);
      theta = t2;
    }
    *scaling = read_rope_scaling(file, "rope_parameters", *rp);
  }
  if (rs) {
    const model::RopeScaling old = read_rope_scaling(file, "rope_scaling", *rs);
    if (rp && !same_scaling(old, *scaling))
      fail("{}: rope_scaling and rope_parameters describe different RoPE scalings, expected one\nhint: fix "
           "config.json",
           file);
    *scaling = old;
  }
  return theta;
}

// head_dim: kept only where it is not dim / n_heads.
void read_head_dim(const Reader& r, model::LlamaConfig* c) {
  const json* hd = r.value("head_dim");
  if (!hd) return;
  int head_dim = r.as_int("head_dim", *hd);
  if (head_dim < 2 || head_dim % 2 != 0)
    fail("{}: head_dim is {}, expected a positive even integer (RoPE rotates pairs)\nhint: fix config.json", r.file(),
         head_dim);
  if (c->n_heads <= 0 || c->dim % c->n_heads != 0 || head_dim != c->dim / c->n_heads) c->head_size = head_dim;
}

// Sliding-window attention: Mistral's sliding_window (null: none); Qwen2 has one only with
// use_sliding_window, and then on some layers (max_window_layers), which is not supported.
void read_sliding_window(const Reader& r, model::LlamaConfig* c) {
  const std::string& file = r.file();
  if (c->family == model::Family::mistral) {
    c->sliding_window = r.optional_int("sliding_window", 0);
    if (r.value("sliding_window") && c->sliding_window < 1)
      fail("{}: sliding_window is {}, expected a positive number of tokens or null\nhint: fix config.json", file,
           c->sliding_window);
  } else if (c->family == model::Family::qwen2) {
    if (r.optional_bool("use_sliding_window", false))
      unsupported(file, "use_sliding_window", "true", "false (full attention on every layer)");
    r.optional_int("sliding_window", 0);
    r.optional_int("max_window_layers", 0);
  } else if (const json* sw = r.value("sliding_window")) {
    unsupported(file, "sliding_window", preview(*sw), "null for model_type \"llama\" (Mistral's is supported)");
  }
}

}  // namespace

model::LlamaConfig read_hf_config(const std::string& path) {
  const std::string file = config_file(path);
  const json j = read_config_object(file);
  Reader r(j, file);
  model::LlamaConfig c;
  c.family = read_family(r);
  read_sizes(r, &c);
  c.qkv_bias = c.family == model::Family::qwen2;
  read_special_ids(r, &c);
  const double eps = r.optional_number("rms_norm_eps", 1e-6);
  const double theta = read_rope(r, &c.rope_scaling);
  read_head_dim(r, &c);
  read_sliding_window(r, &c);
  if (!std::isfinite(eps) || !std::isfinite(theta) || eps > 1e30 || theta > 1e30)
    fail("{}: rms_norm_eps {} / rope_theta {} are out of range, expected finite values\nhint: fix config.json", file,
         eps, theta);
  c.norm_eps = float(eps);
  c.rope_theta = float(theta);
  c.validate(file);
  return c;
}

void write_hf_config(const std::string& path, const model::LlamaConfig& config, const std::string& torch_dtype) {
  config.validate(path);
  if (torch_dtype != "float32" && torch_dtype != "float16" && torch_dtype != "bfloat16")
    fail("torch_dtype is \"{}\", expected float32, float16 or bfloat16", torch_dtype);
  const std::string file = config_file(path);
  // Floats go through their shortest decimal form so that 1e-5f is written as 1e-05, not
  // 9.999999747378752e-06.
  auto shortest = [](float f) {
    double d = std::stod(fmt::format("{}", f));
    return float(d) == f ? d : double(f);  // guard against double rounding
  };
  // The keys transformers writes for each family, with this model's values.
  const bool qwen2 = config.family == model::Family::qwen2, mistral = config.family == model::Family::mistral;
  json eos = config.eos_id;
  if (!config.extra_eos_ids.empty()) {
    eos = json::array({config.eos_id});
    for (int id : config.extra_eos_ids) eos.push_back(id);
  }
  json rope_scaling = nullptr;
  if (config.rope_scaling.type == model::RopeScaling::Type::llama3) {
    const model::RopeScaling& rs = config.rope_scaling;
    rope_scaling = {{"factor", shortest(rs.factor)},
                    {"high_freq_factor", shortest(rs.high_freq_factor)},
                    {"low_freq_factor", shortest(rs.low_freq_factor)},
                    {"original_max_position_embeddings", rs.original_max_pos},
                    {"rope_type", "llama3"}};
  }
  const char* architecture = qwen2 ? "Qwen2ForCausalLM" : mistral ? "MistralForCausalLM" : "LlamaForCausalLM";
  json j = {
      {"architectures", json::array({architecture})},
      {"attention_dropout", 0.0},
      {"bos_token_id", config.bos_id < 0 ? json(nullptr) : json(config.bos_id)},
      {"eos_token_id", eos},
      {"hidden_act", "silu"},
      {"hidden_size", config.dim},
      {"initializer_range", 0.02},
      {"intermediate_size", config.ffn_dim},
      {"max_position_embeddings", config.max_seq_len},
      {"model_type", model::family_name(config.family)},
      {"num_attention_heads", config.n_heads},
      {"num_hidden_layers", config.n_layers},
      {"num_key_value_heads", config.n_kv_heads},
      {"rms_norm_eps", shortest(config.norm_eps)},
      {"rope_scaling", rope_scaling},
      {"rope_theta", shortest(config.rope_theta)},
      {"tie_word_embeddings", config.tie_embeddings},
      {"torch_dtype", torch_dtype},
      {"use_cache", true},
      {"vocab_size", config.vocab_size},
  };
  if (!qwen2 || config.head_size > 0) j["head_dim"] = config.head_dim();
  if (qwen2) {
    j["max_window_layers"] = config.n_layers;
    j["sliding_window"] = nullptr;
    j["use_sliding_window"] = false;
  } else if (mistral) {
    j["sliding_window"] = config.sliding_window > 0 ? json(config.sliding_window) : json(nullptr);
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  write_file_atomic(file, j.dump(2) + "\n");  // sorted keys, indent 2, as transformers writes
}

}  // namespace llamatrain::io
