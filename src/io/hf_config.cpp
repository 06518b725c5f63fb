// Hugging Face config.json <-> LlamaConfig (docs/formats.md 4.1). The only file that spells HF config
// keys. Reading accepts 4.x keys and the newer spellings (rope_parameters, dtype), applies 4.x
// defaults, and refuses what the model cannot run (rope scaling, biases, non-SiLU activations,
// a head_dim other than hidden/heads, other model types) instead of silently computing garbage.
#include "io/hf_config.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
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
    if (!v) fail("{}: required key \"{}\" is missing, expected an integer\nhint: is this a Llama config.json?", file_, key);
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
  // A token id: an integer, or a non-empty list of them (Llama 3 lists several eos ids; the
  // first one is used).
  int token_id(const char* key, int def) const {
    const json* v = value(key);
    if (!v) return def;
    if (v->is_array()) {
      if (v->empty()) wrong_type(key, *v, "integer or non-empty list of integers");
      return as_int(key, (*v)[0]);
    }
    if (!v->is_number_integer()) wrong_type(key, *v, "integer or list of integers");
    return as_int(key, *v);
  }
  const std::string& file() const { return file_; }

 private:
  const json& j_;
  const std::string& file_;
};

[[noreturn]] void unsupported(const std::string& file, const std::string& what, const std::string& got,
                              const std::string& expected) {
  fail("{}: {} is {}, which llamatrain does not support, expected {}\nhint: only plain Llama "
       "models (no rope scaling, no biases, SiLU) can be trained",
       file, what, got, expected);
}

}  // namespace

model::LlamaConfig read_hf_config(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "config.json").string();
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
  Reader r(j, file);

  // Architecture: only Llama (and Mistral without sliding-window attention) is the same network.
  if (const std::string* mt = r.optional_string("model_type")) {
    if (*mt == "mistral") {
      const json* sw = r.value("sliding_window");
      int max_pos = r.optional_int("max_position_embeddings", 2048);
      if (sw && r.as_int("sliding_window", *sw) < max_pos)
        unsupported(file, "sliding_window", preview(*sw), "null (no sliding-window attention)");
    } else if (*mt != "llama") {
      unsupported(file, "model_type", "\"" + *mt + "\"", "\"llama\" (or \"mistral\" without sliding window)");
    }
  }
  if (const std::string* act = r.optional_string("hidden_act"))
    if (*act != "silu") unsupported(file, "hidden_act", "\"" + *act + "\"", "\"silu\"");
  if (r.optional_bool("attention_bias", false)) unsupported(file, "attention_bias", "true", "false");
  if (r.optional_bool("mlp_bias", false)) unsupported(file, "mlp_bias", "true", "false");
  if (const json* rs = r.value("rope_scaling")) unsupported(file, "rope_scaling", preview(*rs), "null");
  r.optional_string("torch_dtype");
  r.optional_string("dtype");

  model::LlamaConfig c;
  c.dim = r.required_int("hidden_size");
  c.ffn_dim = r.required_int("intermediate_size");
  c.n_heads = r.required_int("num_attention_heads");
  c.n_layers = r.required_int("num_hidden_layers");
  c.vocab_size = r.required_int("vocab_size");
  c.n_kv_heads = r.optional_int("num_key_value_heads", c.n_heads);
  c.max_seq_len = r.optional_int("max_position_embeddings", 2048);
  c.tie_embeddings = r.optional_bool("tie_word_embeddings", false);
  c.bos_id = r.token_id("bos_token_id", 1);
  c.eos_id = r.token_id("eos_token_id", 2);
  double eps = r.optional_number("rms_norm_eps", 1e-6);
  double theta = r.optional_number("rope_theta", 10000.0);
  // transformers v5: {"rope_type": "default", "rope_theta": ...}; anything else is a scaling.
  if (const json* rp = r.value("rope_parameters")) {
    if (!rp->is_object()) r.wrong_type("rope_parameters", *rp, "object");
    Reader rr(*rp, file);
    if (const std::string* type = rr.optional_string("rope_type"))
      if (*type != "default") unsupported(file, "rope_parameters.rope_type", "\"" + *type + "\"", "\"default\"");
    if (const json* t = rr.value("rope_theta")) {
      double t2 = rr.as_number("rope_theta", *t);
      if (r.value("rope_theta") && t2 != theta)
        fail("{}: rope_theta is {} but rope_parameters.rope_theta is {}, expected one value\nhint: fix "
             "config.json",
             file, theta, t2);
      theta = t2;
    }
  }
  if (const json* hd = r.value("head_dim")) {
    int head_dim = r.as_int("head_dim", *hd);
    if (c.n_heads <= 0 || c.dim % c.n_heads != 0 || head_dim != c.dim / c.n_heads)
      unsupported(file, "head_dim", std::to_string(head_dim),
                  fmt::format("hidden_size / num_attention_heads = {} / {}", c.dim, c.n_heads));
  }
  if (!std::isfinite(eps) || !std::isfinite(theta) || eps > 1e30 || theta > 1e30)
    fail("{}: rms_norm_eps {} / rope_theta {} are out of range, expected finite values\nhint: fix config.json",
         file, eps, theta);
  c.norm_eps = float(eps);
  c.rope_theta = float(theta);
  c.validate(file);
  return c;
}

void write_hf_config(const std::string& path, const model::LlamaConfig& config, const std::string& torch_dtype) {
  config.validate(path);
  if (torch_dtype != "float32" && torch_dtype != "float16" && torch_dtype != "bfloat16")
    fail("torch_dtype is \"{}\", expected float32, float16 or bfloat16", torch_dtype);
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "config.json").string();
  // Floats go through their shortest decimal form so that 1e-5f is written as 1e-05, not
  // 9.999999747378752e-06.
  auto shortest = [](float f) {
    double d = std::stod(fmt::format("{}", f));
    return float(d) == f ? d : double(f);  // guard against double rounding
  };
  json j = {
      {"architectures", json::array({"LlamaForCausalLM"})},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"bos_token_id", config.bos_id},
      {"eos_token_id", config.eos_id},
      {"head_dim", config.head_dim()},
      {"hidden_act", "silu"},
      {"hidden_size", config.dim},
      {"initializer_range", 0.02},
      {"intermediate_size", config.ffn_dim},
      {"max_position_embeddings", config.max_seq_len},
      {"mlp_bias", false},
      {"model_type", "llama"},
      {"num_attention_heads", config.n_heads},
      {"num_hidden_layers", config.n_layers},
      {"num_key_value_heads", config.n_kv_heads},
      {"pretraining_tp", 1},
      {"rms_norm_eps", shortest(config.norm_eps)},
      {"rope_scaling", nullptr},
      {"rope_theta", shortest(config.rope_theta)},
      {"tie_word_embeddings", config.tie_embeddings},
      {"torch_dtype", torch_dtype},
      {"use_cache", true},
      {"vocab_size", config.vocab_size},
  };
  write_file_atomic(file, j.dump(2) + "\n");  // sorted keys, indent 2, as transformers writes
}

}  // namespace llamatrain::io
