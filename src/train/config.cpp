// YAML config -> TrainConfig. Pipeline: parse the file (yaml-cpp, keeping marks), flatten it against
// the schema into one entry per key (unknown and duplicate keys are errors), apply the overrides,
// add schema defaults, resolve interpolations (OmegaConf semantics: after overrides, `${.x}`
// relative to the key's section, `${a.b}` absolute, `${multiply:a,b}`), fold aliases, convert each
// entry into its typed field, then check cross-key rules and, with model.init_from, agreement with
// the Hugging Face config.json. The schema table (build_schema) is the only list of keys: help
// text, the docs reference and to_yaml() are generated from it.
#include "train/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "io/hf_config.h"

namespace llamatrain::train {

namespace {

namespace fs = std::filesystem;
using Status = KeyInfo::Status;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr const char* kHelpHint = "`llamatrain train --help-config` and docs/configuration.md list every key";

// ---------------------------------------------------------------------------------------------
// Entries: one per key, after flattening.

// yaml-cpp's Node::operator= writes through to the node it refers to (it can rewrite a shared
// tree), so entries are only ever created fresh (set_entry) and nodes rebound with reset().
struct Entry {
  YAML::Node node;
  std::string where;   // "file.yaml:12:5", "override 'a.b=1'" or "default"
  std::string interp;  // the original text when the value came from an interpolation
  bool given = false;  // from the file or an override (not a default)
  bool resolved = false;
};
using Entries = std::map<std::string, Entry>;

void set_entry(Entries& entries, const std::string& path, Entry e) {
  entries.erase(path);
  entries.emplace(path, std::move(e));
}

bool is_missing(const YAML::Node& n) { return n.IsScalar() && n.Scalar() == "???"; }

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  std::string s = n.Scalar();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return "'" + s + "'";
}

std::string last_component(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}
std::string parent_of(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}
std::string join_path(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

std::string where_of(const std::string& source, const YAML::Mark& m) {
  if (m.is_null()) return source;
  return fmt::format("{}:{}:{}", source, m.line + 1, m.column + 1);
}

// ---------------------------------------------------------------------------------------------
// Schema rows.

struct Limits {
  double lo = -kInf;
  double hi = kInf;
  bool lo_open = false;  // lo excluded
};

struct Spec;
// A value being converted, with what error messages need.
struct Field {
  const Spec& spec;
  const Entry& entry;
  [[noreturn]] void bad(const std::string& expected, const std::string& hint = "") const;
  const std::string& text() const { return entry.node.Scalar(); }
};

struct Spec {
  KeyInfo info;
  std::string choices;                // '|'-separated strings allowed (string fields, restricted keys)
  Limits lim;
  std::string why;                    // restricted keys: why other values are refused
  std::string alias_of;               // alias keys
  std::function<void(TrainConfig&, const Field&)> set;  // bound keys
  std::function<std::string(const TrainConfig&)> emit;  // bound keys: YAML text of the value
  bool can_be_unset = false;                            // bound keys: ??? ("must be given") leaves it unset
  bool bound() const { return static_cast<bool>(set); }
};

void Field::bad(const std::string& expected, const std::string& hint) const {
  std::string via = entry.interp.empty() ? "" : fmt::format(" (resolved from '{}')", entry.interp);
  fail("{} ({}): got {}{}, expected {}\nhint: {}", spec.info.path, entry.where, describe(entry.node), via, expected,
       hint.empty() ? std::string(kHelpHint) : hint);
}

std::string format_double(double v) { return fmt::format("{}", v); }

std::string limits_text(const Limits& l, bool integer) {
  auto num = [&](double v) { return integer ? fmt::format("{}", int64_t(v)) : format_double(v); };
  if (l.lo == -kInf && l.hi == kInf) return "";
  if (l.hi == kInf) return fmt::format("{} {}", l.lo_open ? ">" : ">=", num(l.lo));
  return fmt::format("{}{}, {}]", l.lo_open ? "(" : "[", num(l.lo), num(l.hi));
}

std::vector<std::string> split_choices(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t bar = s.find('|', start);
    if (bar == std::string::npos) bar = s.size();
    out.push_back(s.substr(start, bar - start));
    start = bar + 1;
  }
  return out;
}

std::string choices_text(const std::string& choices) {
  std::string out;
  for (const auto& c : split_choices(choices)) out += (out.empty() ? "" : ", ") + c;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Scalar parsing shared by the converters.

bool parse_int64(const std::string& s, int64_t* v) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') b++;
  auto r = std::from_chars(b, e, *v);
  return b != e && r.ec == std::errc() && r.ptr == e;
}

bool parse_double(const std::string& s, double* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*v) && s.find_first_of("xXnN") == std::string::npos;
}

bool parse_bool(const std::string& s, bool* v) {
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (l == "true" || l == "yes" || l == "on") return *v = true, true;
  if (l == "false" || l == "no" || l == "off") return *v = false, true;
  return false;
}

// A string written back as YAML: plain when it reloads as the same text, double-quoted otherwise;
// "${" is escaped so a literal is not re-read as an interpolation.
std::string yaml_string(const std::string& text) {
  std::string s;
  for (size_t i = 0; i < text.size(); i++) {
    if (text.compare(i, 2, "${") == 0) s += '\\';
    s += text[i];
  }
  YAML::Emitter plain;
  plain << s;
  bool ok = false;
  try {
    YAML::Node n = YAML::Load(plain.c_str());
    ok = n.IsScalar() && n.Scalar() == s && s != "???" && !s.empty();
  } catch (const YAML::Exception&) {
  }
  if (ok) return plain.c_str();
  YAML::Emitter quoted;
  quoted << YAML::DoubleQuoted << s;
  return quoted.c_str();
}

// ---------------------------------------------------------------------------------------------
// Converters: YAML node <-> field, per C++ type.

template <class T>
struct Conv;

template <>
struct Conv<bool> {
  static std::string type() { return "bool"; }
  static bool parse(const Field& f) {
    bool v;
    if (!f.entry.node.IsScalar() || !parse_bool(f.text(), &v)) f.bad("true or false");
    return v;
  }
  static std::string emit(bool v) { return v ? "true" : "false"; }
};

template <>
struct Conv<int64_t> {
  static std::string type() { return "integer"; }
  static int64_t parse(const Field& f) {
    int64_t v;
    if (!f.entry.node.IsScalar() || !parse_int64(f.text(), &v)) f.bad("an integer", "write a whole number such as 100");
    return v;
  }
  static std::string emit(int64_t v) { return fmt::format("{}", v); }
};

template <>
struct Conv<int> {
  static std::string type() { return "integer"; }
  static int parse(const Field& f) {
    const int64_t v = Conv<int64_t>::parse(f);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) f.bad("an integer that fits in 32 bits");
    return int(v);
  }
  static std::string emit(int v) { return fmt::format("{}", v); }
};

template <>
struct Conv<double> {
  static std::string type() { return "number"; }
  static double parse(const Field& f) {
    double v;
    if (!f.entry.node.IsScalar() || !parse_double(f.text(), &v)) f.bad("a finite number", "write it as e.g. 3.0e-4");
    return v;
  }
  static std::string emit(double v) { return format_double(v); }
};

template <>
struct Conv<std::string> {
  static std::string type() { return "string"; }
  static std::string parse(const Field& f) {
    if (!f.entry.node.IsScalar()) f.bad("a string");
    return f.text();
  }
  static std::string emit(const std::string& v) { return yaml_string(v); }
};

template <>
struct Conv<model::Precision> {
  static std::string type() { return "precision"; }
  static model::Precision parse(const Field& f) {
    const std::string expected = "32 (fp32), bf16-mixed or bf16 (bf16 weights with stochastic rounding)";
    if (!f.entry.node.IsScalar()) f.bad(expected);
    const std::string& s = f.text();
    if (s == "32-true") return model::Precision::fp32;  // Lightning 2's spelling of 32
    if (s == "16" || s == "16-mixed" || s == "fp16")
      f.bad(expected, "fp16 is not supported (no loss scaling); bf16-mixed is the mixed-precision mode");
    if (s == "bf16-true")
      f.bad(expected, "bf16 here means bf16 weights updated with stochastic rounding, as on Trainium; "
                      "bf16-mixed keeps fp32 master weights");
    try {
      return model::parse_precision(s);  // 32 / fp32, bf16-mixed, bf16 / bf16-sr
    } catch (const Error&) {
      f.bad(expected);
    }
  }
  static std::string emit(model::Precision p) {
    switch (p) {
      case model::Precision::fp32: return "32";
      case model::Precision::bf16_mixed: return "bf16-mixed";
      case model::Precision::bf16_sr: return "bf16";
    }
    return "32";
  }
};

template <class T>
struct Conv<std::optional<T>> {
  static std::string type() { return Conv<T>::type() + " or null"; }
  static std::optional<T> parse(const Field& f) {
    if (f.entry.node.IsNull() || is_missing(f.entry.node)) return std::nullopt;
    return Conv<T>::parse(f);
  }
  static std::string emit(const std::optional<T>& v) { return v ? Conv<T>::emit(*v) : "null"; }
};

std::vector<std::string> scalar_list(const Field& f, const std::string& expected) {
  const YAML::Node& n = f.entry.node;
  std::vector<std::string> out;
  if (n.IsNull() || is_missing(n)) return out;
  if (n.IsScalar()) return {n.Scalar()};
  if (!n.IsSequence()) f.bad(expected);
  for (const auto& item : n) {
    if (!item.IsScalar()) f.bad(expected);
    out.push_back(item.Scalar());
  }
  return out;
}

std::string emit_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); i++) out += (i ? ", " : "") + items[i];
  return out + "]";
}

template <>
struct Conv<std::vector<std::string>> {
  static std::string type() { return "list of strings"; }
  static std::vector<std::string> parse(const Field& f) { return scalar_list(f, "a list of strings"); }
  static std::string emit(const std::vector<std::string>& v) {
    std::vector<std::string> items;
    for (const auto& s : v) items.push_back(yaml_string(s));
    return emit_list(items);
  }
};

template <>
struct Conv<std::vector<double>> {
  static std::string type() { return "list of numbers"; }
  static std::vector<double> parse(const Field& f) {
    if (f.entry.node.IsScalar() && !is_missing(f.entry.node)) f.bad("a list of numbers such as [0.9, 0.95]");
    std::vector<double> out;
    for (const auto& s : scalar_list(f, "a list of numbers such as [0.9, 0.95]")) {
      double v;
      if (!parse_double(s, &v)) f.bad("a list of numbers such as [0.9, 0.95]", fmt::format("'{}' is not a number", s));
      out.push_back(v);
    }
    return out;
  }
  static std::string emit(const std::vector<double>& v) {
    std::vector<std::string> items;
    for (double d : v) items.push_back(format_double(d));
    return emit_list(items);
  }
};

template <>
struct Conv<std::map<std::string, std::string>> {
  static std::string type() { return "mapping of strings"; }
  static std::map<std::string, std::string> parse(const Field& f) {
    const YAML::Node& n = f.entry.node;
    std::map<std::string, std::string> out;
    if (n.IsNull() || is_missing(n)) return out;
    const std::string expected = "a mapping such as {entailment: yes, not_entailment: no}";
    if (!n.IsMap()) f.bad(expected);
    for (const auto& kv : n) {
      if (!kv.first.IsScalar() || !kv.second.IsScalar()) f.bad(expected);
      out[kv.first.Scalar()] = kv.second.Scalar();
    }
    return out;
  }
  static std::string emit(const std::map<std::string, std::string>& m) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : m) {
      out += (first ? "" : ", ") + yaml_string(k) + ": " + yaml_string(v);
      first = false;
    }
    return out + "}";
  }
};

template <>
struct Conv<DataPrefix> {
  static std::string type() { return "data prefix list or {train, validation, test}"; }
  static DataPrefix parse(const Field& f) {
    const YAML::Node& n = f.entry.node;
    DataPrefix p;
    if (!n.IsMap()) {
      p.train = scalar_list(f, "a list [weight, prefix, ...] or [prefix, ...], or {train: [...], validation: [...], test: [...]}");
      return p;
    }
    p.per_split = true;
    for (const auto& kv : n) {
      const std::string k = kv.first.IsScalar() ? kv.first.Scalar() : "";
      Entry sub{kv.second, f.entry.where, f.entry.interp, true, true};
      Field sf{f.spec, sub};
      std::vector<std::string>* dst = k == "train" ? &p.train : k == "validation" ? &p.validation : k == "test" ? &p.test : nullptr;
      if (!dst) f.bad("the dictionary keys train, validation and test", fmt::format("'{}' is not a split name", k));
      *dst = scalar_list(sf, "a list of prefixes for each split");
    }
    return p;
  }
  static std::string emit(const DataPrefix& p) {
    auto list = [](const std::vector<std::string>& v) { return Conv<std::vector<std::string>>::emit(v); };
    if (!p.per_split) return list(p.train);
    return fmt::format("{{train: {}, validation: {}, test: {}}}", list(p.train), list(p.validation), list(p.test));
  }
};

// Types whose field can stay unset, so ??? (OmegaConf's "must be given") parses as unset and the
// cross-key checks decide whether the key was needed.
template <class T>
constexpr bool kCanBeUnset = false;
template <class T>
constexpr bool kCanBeUnset<std::optional<T>> = true;
template <class T>
constexpr bool kCanBeUnset<std::vector<T>> = true;
template <>
constexpr bool kCanBeUnset<std::map<std::string, std::string>> = true;
template <>
constexpr bool kCanBeUnset<DataPrefix> = true;

template <class T>
void check_value(const Field& f, const T& v) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    const Limits& l = f.spec.lim;
    const double d = double(v);
    if (d < l.lo || d > l.hi || (l.lo_open && d == l.lo)) f.bad(limits_text(l, std::is_integral_v<T>));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (f.spec.choices.empty()) return;
    const auto c = split_choices(f.spec.choices);
    if (std::find(c.begin(), c.end(), v) == c.end()) f.bad("one of " + choices_text(f.spec.choices));
  } else if constexpr (requires { v.has_value(); }) {
    if (v) check_value(f, *v);
  }
}

// ---------------------------------------------------------------------------------------------
// The schema table.

class Schema {
 public:
  // A key the trainer reads, bound to a TrainConfig field through `field` (TrainConfig& -> T*).
  template <class F>
  void key(const std::string& path, F field, const std::string& def, const std::string& doc, Limits lim = {},
           const std::string& choices = "", Status status = Status::used) {
    using T = std::remove_pointer_t<std::invoke_result_t<F, TrainConfig&>>;
    Spec s;
    s.info.path = path;
    s.info.type = Conv<T>::type();
    s.info.default_value = def;
    s.info.doc = doc;
    s.info.status = status;
    s.lim = lim;
    s.choices = choices;
    if (!choices.empty()) s.info.allowed = choices_text(choices);
    else s.info.allowed = limits_text(lim, std::is_integral_v<T> || std::is_same_v<T, std::optional<int>> ||
                                               std::is_same_v<T, std::optional<int64_t>>);
    s.can_be_unset = kCanBeUnset<T>;
    s.set = [field](TrainConfig& c, const Field& f) {
      T v = Conv<T>::parse(f);
      check_value(f, v);
      *field(c) = std::move(v);
    };
    s.emit = [field](const TrainConfig& c) { return Conv<T>::emit(*field(const_cast<TrainConfig&>(c))); };
    add(std::move(s));
  }
  template <class F>
  void ours(const std::string& path, F field, const std::string& def, const std::string& doc, Limits lim = {},
            const std::string& choices = "") {
    key(path, field, def, doc, lim, choices, Status::ours);
  }
  // A NeMo key that changes nothing here: any value is accepted and reported in the notes.
  void ignored(const std::string& path, const std::string& doc) {
    Spec s;
    s.info = {path, "any", "", "", doc, Status::ignored};
    add(std::move(s));
  }
  // A NeMo key of which only `allowed` ('|'-separated YAML values; the first is the default) can be
  // honoured; anything else is an Error quoting `why`.
  void only(const std::string& path, const std::string& allowed, const std::string& why) {
    Spec s;
    s.info = {path, "fixed", split_choices(allowed)[0], choices_text(allowed), why, Status::restricted};
    s.choices = allowed;
    s.why = why;
    add(std::move(s));
  }
  void alias(const std::string& path, const std::string& target) {
    Spec s;
    s.info = {path, "alias", "", "", "another spelling of " + target, Status::alias};
    s.alias_of = target;
    add(std::move(s));
  }

  const std::vector<Spec>& specs() const { return specs_; }
  const Spec* find(const std::string& path) const {
    auto it = index_.find(path);
    return it == index_.end() ? nullptr : &specs_[it->second];
  }
  bool is_section(const std::string& path) const { return sections_.count(path) > 0; }
  const std::set<std::string>& sections() const { return sections_; }

 private:
  void add(Spec s) {
    CHECK(!index_.count(s.info.path), "schema key {} twice", s.info.path);
    for (std::string p = parent_of(s.info.path); !p.empty(); p = parent_of(p)) sections_.insert(p);
    index_[s.info.path] = specs_.size();
    specs_.push_back(std::move(s));
  }
  std::vector<Spec> specs_;
  std::map<std::string, size_t> index_;
  std::set<std::string> sections_;
};

#define FIELD(member) [](TrainConfig& c) { return &c.member; }

Limits at_least(double lo) { return {lo, kInf, false}; }
Limits positive() { return {0, kInf, true}; }
Limits range(double lo, double hi) { return {lo, hi, false}; }

void add_sft_dataset(Schema& s, const std::string& ds, SftDatasetConfig DataConfig::*member) {
  const std::string p = "model.data." + ds + ".";
  const bool train = ds == "train_ds";
  auto from_train = [&](const std::string& k, const std::string& train_default) {
    return train ? train_default : "${model.data.train_ds." + k + "}";
  };
#define DS(field) [member](TrainConfig& c) { return &(c.model.data.*member).field; }
  s.key(p + "file_names", DS(file_names), "null",
        train ? "JSONL files of (prompt, completion) rows; required when model.data.fine_tuning is true"
              : "JSONL files of the same form; null: no " + std::string(ds == "test_ds" ? "test" : "validation") + " set");
  s.key(p + "shuffle", DS(shuffle), train ? "true" : "false", "shuffle the examples every epoch");
  s.key(p + "max_seq_length", DS(max_seq_length), "${model.encoder_seq_length}",
        "tokens per sample; longer examples are truncated (prompt first)", at_least(1));
  s.only(p + "min_seq_length", "1", "examples are never dropped for being short");
  s.key(p + "drop_last", DS(drop_last), train ? "true" : "false", "drop the last incomplete global batch");
  s.key(p + "concat_sampling_probabilities", DS(concat_sampling_probabilities), "null",
        "sampling weight of each file (same length as file_names, sums to 1); null: files weighted equally");
  s.key(p + "label_key", DS(label_key), from_train("label_key", "output"),
        "the row field holding the completion (the loss covers only it and EOS)");
  s.key(p + "add_bos", DS(add_bos), from_train("add_bos", "false"), "prepend BOS to every example");
  s.key(p + "add_eos", DS(add_eos), from_train("add_eos", "true"), "append EOS to every example");
  s.only(p + "add_sep", "false", "no separator token is inserted between prompt and completion");
  s.key(p + "prompt_template", DS(prompt_template), from_train("prompt_template", "\"{input} {output}\""),
        "{field} placeholders filled from the row; must end with {<label_key>}, the completion");
  s.key(p + "truncation_method", DS(truncation_method), from_train("truncation_method", "right"),
        "which end of an over-long prompt is cut: right keeps its beginning", {}, "right|left");
  s.ours(p + "completion_map", DS(completion_map), from_train("completion_map", "{}"),
         "map from the label's text to the completion, e.g. {entailment: yes, not_entailment: no}; {}: the label as is");
  s.ours(p + "pack", DS(pack), from_train("pack", "false"),
         "pack consecutive examples into one sample (positions restart per example) instead of padding each");
#undef DS
  s.ignored(p + "truncation_field", "the prompt is what gets truncated, whichever field it came from");
  for (const char* k : {"global_batch_size", "micro_batch_size", "num_workers", "memmap_workers", "pin_memory",
                        "index_mapping_dir", "hf_dataset", "names", "global_sample_mapping"})
    s.ignored(p + k, "batch sizes come from model.*; data loading is in-process");
  if (!train) {
    for (const char* k : {"write_predictions_to_file", "output_file_path_prefix", "tokens_to_generate", "metric"})
      s.ignored(p + k, "validation reports the loss only");
  }
}

Schema build_schema() {
  Schema s;
  // Root.
  s.key("name", FIELD(name), "megatron_llama", "experiment name");
  s.only("restore_from_path", "null",
         ".nemo archives are not read; start from Hugging Face weights with model.init_from or resume with "
         "model.resume_from_checkpoint");
  s.key("convert_to_hf", FIELD(convert_to_hf), "false", "write a Hugging Face checkpoint at the end of training");
  s.ignored("enable_recovery_time_instrumentation", "Neuron timing traces");
  s.ignored("async_checkpointing", "checkpoints are written synchronously");
  s.ignored("enable_checkpoint_removal_protection", "always on: an old checkpoint is removed only after the new one is complete");

  // trainer.
  s.key("trainer.devices", FIELD(trainer.devices), "1", "processes per node", range(1, 1 << 20));
  s.key("trainer.num_nodes", FIELD(trainer.num_nodes), "1", "nodes", range(1, 1 << 20));
  s.key("trainer.precision", FIELD(trainer.precision), "32",
        "32 or fp32: fp32 everywhere; bf16-mixed: bf16 matmul operands, fp32 master weights and Adam states; "
        "bf16: bf16 weights and Adam states, every update rounded stochastically (what bf16 means on Trainium)",
        {}, "32|fp32|32-true|bf16-mixed|bf16|bf16-sr");
  s.key("trainer.max_steps", FIELD(trainer.max_steps), "100000",
        "optimizer steps; also sizes the training data (max_steps x global_batch_size samples)", at_least(1));
  s.key("trainer.max_epochs", FIELD(trainer.max_epochs), "-1",
        "passes over the data before stopping (fine-tuning); -1 or null: max_steps alone ends training", at_least(-1));
  s.key("trainer.log_every_n_steps", FIELD(trainer.log_every_n_steps), "10", "steps between log lines", at_least(1));
  s.key("trainer.val_check_interval", FIELD(trainer.val_check_interval), "100",
        "steps between validations (an integer; NeMo's epoch fractions are not supported)", at_least(1));
  s.key("trainer.limit_val_batches", FIELD(trainer.limit_val_batches), "50", "global batches per validation",
        at_least(0));
  s.key("trainer.limit_test_batches", FIELD(trainer.limit_test_batches), "500", "global batches of the test run",
        at_least(0));
  s.only("trainer.accumulate_grad_batches", "1",
         "gradient accumulation follows from global_batch_size / (micro_batch_size x data-parallel size)");
  s.key("trainer.gradient_clip_val", FIELD(trainer.gradient_clip_val), "1.0",
        "clip the global gradient L2 norm to this; 0 or null: no clipping", at_least(0));
  s.ours("trainer.max_consecutive_nonfinite", FIELD(trainer.max_consecutive_nonfinite), "3",
         "a step whose loss or gradient norm is not finite is skipped (no update); after this many in a row the "
         "run goes back to the last checkpoint; 0: stop at the first",
         at_least(0));
  for (const char* k : {"accelerator", "logger", "enable_checkpointing", "replace_sampler_ddp", "use_distributed_sampler",
                        "benchmark", "enable_model_summary", "num_sanity_val_steps"})
    s.ignored(std::string("trainer.") + k, "Lightning setting with no counterpart here");

  // exp_manager.
  s.key("exp_manager.exp_dir", FIELD(exp_manager.exp_dir), "null", "root of the log folders; null: ./nemo_experiments");
  s.key("exp_manager.name", FIELD(exp_manager.name), "${name}", "second component of the log folder");
  s.key("exp_manager.explicit_log_dir", FIELD(exp_manager.explicit_log_dir), "null",
        "log folder used as is, instead of exp_dir/name/version");
  s.key("exp_manager.version", FIELD(exp_manager.version), "null",
        "third component of the log folder; null: NEMO_EXPM_VERSION, else the start time");
  s.key("exp_manager.resume_if_exists", FIELD(exp_manager.resume_if_exists), "true",
        "resume from the newest checkpoint in the log folder");
  s.key("exp_manager.resume_ignore_no_checkpoint", FIELD(exp_manager.resume_ignore_no_checkpoint), "true",
        "with resume_if_exists: start fresh when there is no checkpoint instead of failing");
  s.key("exp_manager.create_tensorboard_logger", FIELD(exp_manager.create_tensorboard_logger), "true",
        "write TensorBoard event files");
  s.key("exp_manager.create_checkpoint_callback", FIELD(exp_manager.create_checkpoint_callback), "true",
        "write checkpoints");
  s.ignored("exp_manager.log_local_rank_0_only", "per-rank logs are prefixed by rank");
  s.only("exp_manager.create_wandb_logger", "false", "Weights & Biases is not available; TensorBoard files are written");
  s.ignored("exp_manager.wandb_logger_kwargs", "Weights & Biases is not available");
  s.only("exp_manager.create_early_stopping_callback", "false", "early stopping is not implemented");
  s.ignored("exp_manager.early_stopping_callback_params", "early stopping is not implemented");
  const std::string ck = "exp_manager.checkpoint_callback_params.";
  s.key(ck + "save_top_k", FIELD(exp_manager.checkpoint_callback_params.save_top_k), "1",
        "keep the newest K checkpoints (checkpoints are ranked by step); -1: keep all", at_least(-1));
  s.key(ck + "every_n_train_steps", FIELD(exp_manager.checkpoint_callback_params.every_n_train_steps), "null",
        "save every N optimizer steps; null: at each validation", at_least(1));
  s.key(ck + "train_time_interval", FIELD(exp_manager.checkpoint_callback_params.train_time_interval), "null",
        "also save when this many seconds passed since the last save", positive());
  s.key(ck + "save_last", FIELD(exp_manager.checkpoint_callback_params.save_last), "false",
        "also save a -last checkpoint at the end of training");
  s.key(ck + "filename", FIELD(exp_manager.checkpoint_callback_params.filename), "${name}--{step}-{consumed_samples}",
        "checkpoint name pattern; {step} and {consumed_samples} are filled in");
  s.key(ck + "dirpath", FIELD(exp_manager.checkpoint_callback_params.dirpath), "null",
        "checkpoint folder; null: <log folder>/checkpoints");
  s.only(ck + "monitor", "step", "checkpoints are ranked by step: save_top_k keeps the newest K");
  s.only(ck + "mode", "max", "checkpoints are ranked by step: save_top_k keeps the newest K");
  s.only(ck + "always_save_nemo", "false", ".nemo archives are not written; convert_to_hf exports Hugging Face files");
  s.only(ck + "save_nemo_on_train_end", "false", ".nemo archives are not written; convert_to_hf exports Hugging Face files");
  s.only(ck + "save_weights_only", "false", "checkpoints always hold the optimizer state too");
  s.ignored(ck + "model_parallel_size", "derived from the layout");
  s.ignored(ck + "every_n_epochs", "saving follows steps");

  // model: batch and layout.
  s.key("model.micro_batch_size", FIELD(model.micro_batch_size), "4", "sequences per rank per forward/backward",
        at_least(1));
  s.key("model.global_batch_size", FIELD(model.global_batch_size), "8",
        "sequences per optimizer step; a multiple of micro_batch_size x data-parallel size", at_least(1));
  s.key("model.tensor_model_parallel_size", FIELD(model.tensor_model_parallel_size), "1", "tensor-parallel ranks (TP)",
        range(1, 1024));
  s.key("model.pipeline_model_parallel_size", FIELD(model.pipeline_model_parallel_size), "1",
        "pipeline stages (PP)", range(1, 1024));
  s.key("model.num_layers_in_first_pipeline_stage", FIELD(model.num_layers_in_first_pipeline_stage), "null",
        "layers of the first pipeline stage (it also holds the embedding); null: an even share", at_least(1));
  s.key("model.num_layers_in_last_pipeline_stage", FIELD(model.num_layers_in_last_pipeline_stage), "null",
        "layers of the last pipeline stage (it also holds the lm head and loss); null: an even share", at_least(1));
  s.only("model.virtual_pipeline_model_parallel_size", "null|1", "interleaved pipeline stages are not implemented");
  s.only("model.context_parallel_size", "null|1", "context parallelism is not implemented");
  s.key("model.sequence_parallel", FIELD(model.sequence_parallel), "true",
        "shard norms along the sequence inside tensor-parallel groups (no effect with TP 1)");
  s.ours("model.distributed_optimizer", FIELD(model.distributed_optimizer), "false",
         "shard the optimizer state over data-parallel ranks (ZeRO-1); Neuron's wrap_with_zero and "
         "model.optim.distributed_optimizer are accepted too");
  s.alias("model.wrap_with_zero", "model.distributed_optimizer");
  s.ignored("model.zero_use_master_weight", "master weights follow trainer.precision");
  s.ignored("model.zero_use_fp32_grad_accum", "gradients accumulate in fp32 in every precision");

  // model: architecture.
  s.key("model.encoder_seq_length", FIELD(model.encoder_seq_length), "512", "training sequence length",
        range(1, 1 << 24));
  s.key("model.max_position_embeddings", FIELD(model.max_position_embeddings), "${.encoder_seq_length}",
        "longest sequence the RoPE tables cover; with init_from and unset: config.json's", range(1, 1 << 24));
  s.key("model.num_layers", FIELD(model.num_layers), "12", "transformer layers (L)", range(1, 4096));
  s.key("model.hidden_size", FIELD(model.hidden_size), "768", "model width (C)", range(1, 1 << 16));
  s.key("model.ffn_hidden_size", FIELD(model.ffn_hidden_size), "3072", "SwiGLU inner width (F)", range(1, 1 << 20));
  s.key("model.num_attention_heads", FIELD(model.num_attention_heads), "12", "query heads (H)", range(1, 1 << 16));
  s.key("model.num_query_groups", FIELD(model.num_query_groups), "null",
        "key/value heads for grouped-query attention (Hkv); null: num_attention_heads", range(1, 1 << 16));
  s.alias("model.num_kv_heads", "model.num_query_groups");
  s.key("model.kv_channels", FIELD(model.kv_channels), "null",
        "head dim; null or hidden_size / num_attention_heads (other values are not supported)", range(1, 1 << 16));
  s.key("model.init_method_std", FIELD(model.init_method_std), "0.02", "std of the normal initialization", positive());
  s.key("model.use_scaled_init_method", FIELD(model.use_scaled_init_method), "true",
        "output projections (o_proj, down_proj) use std / sqrt(2 x num_layers)");
  s.key("model.layernorm_epsilon", FIELD(model.layernorm_epsilon), "1e-5", "RMSNorm epsilon", {0, 1, true});
  s.key("model.rotary_base", FIELD(model.rotary_base), "10000", "RoPE theta; Neuron's position_freq_base is accepted too",
        positive());
  s.alias("model.position_freq_base", "model.rotary_base");
  s.key("model.share_embeddings_and_output_weights", FIELD(model.share_embeddings_and_output_weights), "false",
        "tie the lm head to the token embedding");
  s.key("model.make_vocab_size_divisible_by", FIELD(model.make_vocab_size_divisible_by), "8",
        "the vocabulary is padded to a multiple of this x TP", range(1, 1 << 16));
  s.key("model.seed", FIELD(model.seed), "1234", "seed of initialization, data order and stochastic rounding",
        range(0, 4294967295.0));
  s.key("model.activations_checkpoint_granularity", FIELD(model.activations_checkpoint_granularity), "selective",
        "recompute activations in backward: null (none), selective (attention core) or full (whole layers)", {},
        "selective|full");
  s.key("model.activations_checkpoint_method", FIELD(model.activations_checkpoint_method), "uniform",
        "with full: uniform (every num_layers-th layer input kept) or block (first num_layers layers per stage)", {},
        "uniform|block");
  s.key("model.activations_checkpoint_num_layers", FIELD(model.activations_checkpoint_num_layers), "1",
        "layers per recomputed group (uniform) or recomputed layers per stage (block)", at_least(1));
  s.key("model.resume_from_checkpoint", FIELD(model.resume_from_checkpoint), "null",
        "a checkpoint folder to load (weights, optimizer, step, data position)");
  s.ours("model.init_from", FIELD(model.init_from), "null",
         "a Hugging Face folder (config.json, safetensors, tokenizer.model) to start from; the architecture then "
         "comes from its config.json and model shape keys must agree with it or be absent");
  s.alias("model.convert_to_hf", "convert_to_hf");
  s.key("model.output_dir", FIELD(model.output_dir), "null",
        "where convert_to_hf writes the Hugging Face checkpoint; null: chosen by the trainer under the log folder");
  s.ignored("model.config_path", "the exported config.json is written from the model itself");
  for (const char* k : {"hidden_dropout", "attention_dropout", "ffn_dropout"})
    s.only(std::string("model.") + k, "0", "dropout is not implemented (Llama pretraining uses none)");
  s.only("model.normalization", "rmsnorm", "Llama uses RMSNorm; layernorm is not implemented");
  s.only("model.position_embedding_type", "rope", "Llama uses rotary position embeddings");
  s.only("model.rotary_percentage", "1", "RoPE rotates the whole head dim");
  s.only("model.position_abf_factor", "1", "RoPE base scaling is not implemented; set model.rotary_base instead");
  s.only("model.positition_interpolation_factor", "1", "RoPE position interpolation is not implemented");
  s.only("model.sliding_window_size", "null", "attention is full causal; sliding windows are not implemented");
  s.only("model.activation", "swiglu", "Llama's MLP is SwiGLU");
  s.only("model.transformer_block_type", "pre_ln", "Llama blocks are pre-norm");
  s.only("model.has_bias", "false", "Llama has no biases");
  s.only("model.bias", "false", "Llama has no biases");
  s.only("model.do_layer_norm_weight_decay", "false", "norm weights never get weight decay here");
  s.only("model.pre_process", "true", "every model has its embedding");
  s.only("model.post_process", "true", "every model has its lm head");
  s.only("model.answer_only_loss", "true", "fine-tuning loss always covers only the completion");
  s.only("model.flexible_pipeline_parallel_stages", "null", "layers are split evenly over pipeline stages");
  s.only("model.num_micro_batches_with_partial_activation_checkpoints", "null",
         "partial activation checkpointing is not implemented");
  s.only("model.activations_checkpoint_layers_per_pipeline", "null",
         "partial activation checkpointing is not implemented");
  s.only("model.fp8", "false", "fp8 is not implemented");
  for (const char* k : {"fp8_e4m3", "fp8_hybrid", "fp8_margin", "fp8_interval", "fp8_amax_history_len",
                        "fp8_amax_compute_algo", "transformer_engine", "use_emha"})
    s.ignored(std::string("model.") + k, "GPU library switch");
  for (const char* k : {"apply_query_key_layer_scaling", "persist_layer_norm", "native_amp_init_scale",
                        "native_amp_growth_interval", "hysteresis", "fp32_residual_connection", "fp16_lm_cross_entropy",
                        "grad_allreduce_chunk_size_mb", "grad_div_ar_fusion", "gradient_accumulation_fusion",
                        "bias_activation_fusion", "bias_dropout_add_fusion", "masked_softmax_fusion",
                        "use_cpu_initialization", "onnx_safe", "apex_transformer_log_level", "gradient_as_bucket_view",
                        "sync_batch_comm", "disable_layer_norm_checkpointing", "use_flash_attention"})
    s.ignored(std::string("model.") + k, "a fusion, fp16 or framework switch; the computation is the same here");
  s.ignored("model.megatron_amp_O2", "precision comes from trainer.precision");
  for (const char* k : {"log_parameter_norm", "log_gradient_norm"})
    s.ignored(std::string("model.") + k, "the gradient norm is always logged");
  for (const char* k : {"save_xser", "load_xser", "force_dump_checkpoint", "save_logits"})
    s.ignored(std::string("model.") + k, "checkpoints are written in llamatrain's own format");
  s.ignored("model.nsys_profile", "Nsight profiling is not wired");

  // model.tokenizer.
  s.key("model.tokenizer.library", FIELD(model.tokenizer.library), "sentencepiece",
        "sentencepiece: tokenizer.model is the file; huggingface: tokenizer.type is a folder holding tokenizer.model",
        {}, "sentencepiece|huggingface");
  s.key("model.tokenizer.type", FIELD(model.tokenizer.type), "null", "huggingface: the tokenizer folder");
  s.key("model.tokenizer.model", FIELD(model.tokenizer.model), "null", "sentencepiece: the tokenizer.model file");
  for (const char* k : {"vocab_file", "merge_file", "delimiter", "sentencepiece_legacy", "use_fast"})
    s.ignored(std::string("model.tokenizer.") + k, "only SentencePiece models are read");

  // model.data.
  s.key("model.data.data_prefix", FIELD(model.data.data_prefix), "???",
        "[weight, prefix, ...], [prefix, ...] or {train: [...], validation: [...], test: [...]}; a prefix is the "
        ".bin/.idx path without extension; required unless fine_tuning");
  s.key("model.data.index_mapping_dir", FIELD(model.data.index_mapping_dir), "null",
        "folder of the sample-index cache; null: next to the data");
  s.key("model.data.splits_string", FIELD(model.data.splits_string), "980,10,10", "train,valid,test weights of the documents");
  s.key("model.data.seq_length", FIELD(model.data.seq_length), "${model.encoder_seq_length}",
        "tokens per training sample", range(1, 1 << 24));
  s.key("model.data.reset_position_ids", FIELD(model.data.reset_position_ids), "false",
        "restart positions after each end-of-document token");
  s.key("model.data.eod_mask_loss", FIELD(model.data.eod_mask_loss), "false",
        "no loss on predictions made from an end-of-document token");
  s.key("model.data.validation_drop_last", FIELD(model.data.validation_drop_last), "true",
        "drop the last partial validation sample");
  s.key("model.data.fine_tuning", FIELD(model.data.fine_tuning), "false",
        "train on JSONL (train_ds, validation_ds, test_ds) instead of data_prefix");
  s.only("model.data.data_impl", "mmap", "datasets are Megatron mmap .bin/.idx files");
  s.only("model.data.dataloader_type", "single",
         "samples are consumed in order (MegatronPretrainingSampler); cyclic is not implemented");
  s.only("model.data.reset_attention_mask", "false", "attention is causal over the whole packed sequence");
  s.only("model.data.no_seqlen_plus_one_input_tokens", "false", "samples always read seq_length + 1 tokens");
  s.only("model.data.pad_samples_to_global_batch_size", "false", "partial global batches are dropped");
  s.only("model.data.chat", "false", "chat-format fine-tuning is not implemented");
  s.ignored("model.data.skip_warmup", "datasets are mmapped without warm-up");
  s.ignored("model.data.num_workers", "data loading is in-process");
  add_sft_dataset(s, "train_ds", &DataConfig::train_ds);
  add_sft_dataset(s, "validation_ds", &DataConfig::validation_ds);
  add_sft_dataset(s, "test_ds", &DataConfig::test_ds);

  // model.optim.
  s.key("model.optim.name", FIELD(model.optim.name), "adamw", "AdamW (decoupled weight decay); fused_adam is the same update",
        {}, "adamw|fused_adam");
  s.key("model.optim.lr", FIELD(model.optim.lr), "2e-4", "peak learning rate", positive());
  s.key("model.optim.weight_decay", FIELD(model.optim.weight_decay), "0.01",
        "AdamW weight decay (not applied to norm weights)", at_least(0));
  s.key("model.optim.betas", FIELD(model.optim.betas), "[0.9, 0.98]", "Adam [beta1, beta2], each in [0, 1)");
  s.key("model.optim.eps", FIELD(model.optim.eps), "1e-8", "Adam epsilon", positive());
  s.alias("model.optim.distributed_optimizer", "model.distributed_optimizer");
  s.ours("model.optim.overlap_grad_sync", FIELD(model.overlap_grad_sync), "false",
         "data parallelism without ZeRO-1: all-reduce gradient buckets while the backward of a step's last "
         "micro-batch goes on, in the order it completes them (false: all of them after it, with blocking "
         "all-reduces; faster where ranks share a machine's cores)");
  s.ignored("model.optim.capturable", "a CUDA-graph switch of torch's AdamW");
  const std::string sc = "model.optim.sched.";
  s.key(sc + "name", FIELD(model.optim.sched.name), "CosineAnnealing",
        "CosineAnnealing, WarmupAnnealing (linear decay), WarmupPolicy (warmup then constant), WarmupHoldPolicy, WSD "
        "(warmup-stable-decay, Megatron-core) or none (constant lr)",
        {}, "CosineAnnealing|WarmupAnnealing|WarmupPolicy|WarmupHoldPolicy|WSD|none");
  s.key(sc + "warmup_steps", FIELD(model.optim.sched.warmup_steps), "null",
        "linear warmup steps; null: none (NeMo's Llama YAML uses 500)", at_least(0));
  s.key(sc + "warmup_ratio", FIELD(model.optim.sched.warmup_ratio), "null",
        "warmup as a fraction of max_steps (instead of warmup_steps)", range(0, 1));
  s.key(sc + "constant_steps", FIELD(model.optim.sched.constant_steps), "null",
        "CosineAnnealing: steps at min_lr at the end; null: 0 (NeMo's Llama YAML uses 50000)", at_least(0));
  s.key(sc + "constant_ratio", FIELD(model.optim.sched.constant_ratio), "null",
        "CosineAnnealing: constant_steps as a fraction of max_steps", range(0, 1));
  s.key(sc + "hold_steps", FIELD(model.optim.sched.hold_steps), "null", "WarmupHoldPolicy: steps at the peak after warmup",
        at_least(0));
  s.key(sc + "hold_ratio", FIELD(model.optim.sched.hold_ratio), "null", "WarmupHoldPolicy: hold_steps as a fraction",
        range(0, 1));
  s.key(sc + "min_lr", FIELD(model.optim.sched.min_lr), "0", "floor of the decay, and the lr after max_steps",
        at_least(0));
  s.key(sc + "max_steps", FIELD(model.optim.sched.max_steps), "null",
        "length of the schedule; null: trainer.max_steps (NeMo always uses trainer.max_steps)", at_least(1));
  s.ours(sc + "wsd_decay_steps", FIELD(model.optim.sched.wsd_decay_steps), "null",
         "WSD: length of the final decay (Megatron-core's lr_wsd_decay_iters)", at_least(1));
  s.ours(sc + "wsd_decay_style", FIELD(model.optim.sched.wsd_decay_style), "exponential",
         "WSD: shape of the final decay (Megatron-core's lr_wsd_decay_style)", {},
         "exponential|linear|cosine|minus_sqrt");
  s.ignored(sc + "monitor", "the schedule depends on the step only");
  s.only(sc + "reduce_on_plateau", "false", "the schedule depends on the step only");
  return s;
}
#undef FIELD

const Schema& schema() {
  static const Schema s = build_schema();
  return s;
}

// ---------------------------------------------------------------------------------------------
// Unknown keys: the closest valid ones.

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) prev[j] = j;
  for (size_t i = 1; i <= a.size(); i++) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); j++)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Distance of a key to the bad path: on the whole dotted path, or on the last component (+1 when
// the key sits in another section, so a known name in the wrong section is still found).
std::vector<std::string> closest_keys(const std::string& bad) {
  std::vector<std::string> candidates;
  for (const auto& sp : schema().specs()) candidates.push_back(sp.info.path);
  for (const auto& sec : schema().sections()) candidates.push_back(sec);
  const std::string last = last_component(bad), parent = parent_of(bad);
  // Ranked by that distance, then by the whole-path distance (trainr.max_steps -> trainer.max_steps
  // before model.optim.sched.max_steps).
  std::pair<size_t, size_t> best{SIZE_MAX, SIZE_MAX};
  std::vector<std::string> out;
  for (const auto& c : candidates) {
    const size_t full = edit_distance(bad, c);
    const std::pair<size_t, size_t> d{
        std::min(full, edit_distance(last, last_component(c)) + (parent_of(c) == parent ? 0 : 1)), full};
    if (d < best) {
      best = d;
      out.clear();
    }
    if (d == best && out.size() < 3) out.push_back(c);
  }
  const size_t limit = std::clamp<size_t>(last.size() / 3, 1, 3);
  if (best.first > limit) out.clear();
  return out;
}

std::string keys_under(const std::string& section) {
  std::set<std::string> names;
  for (const auto& sp : schema().specs()) {
    const std::string& p = sp.info.path;
    if (parent_of(p) == section && sp.info.status != Status::ignored && sp.info.status != Status::restricted)
      names.insert(last_component(p));
  }
  for (const auto& sec : schema().sections())
    if (parent_of(sec) == section) names.insert(last_component(sec));
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string unknown_key_line(const std::string& path, const std::string& where) {
  const auto close = closest_keys(path);
  std::string line = fmt::format("unknown key '{}' ({})", path, where);
  if (!close.empty()) {
    line += ": did you mean ";
    for (size_t i = 0; i < close.size(); i++) line += (i ? (i + 1 == close.size() ? " or " : ", ") : "") + close[i];
    line += "?";
  } else {
    std::string sec = parent_of(path);
    while (!sec.empty() && !schema().is_section(sec)) sec = parent_of(sec);
    line += fmt::format(": keys {} are {}", sec.empty() ? "at the top" : "under " + sec, keys_under(sec));
  }
  return line;
}

// ---------------------------------------------------------------------------------------------
// Loading: flatten, overrides, defaults.

class Loader {
 public:
  explicit Loader(const std::string& source) : source_(source) {}

  void add_document(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) return;
    if (!root.IsMap())
      fail("config {}: the document is {}, expected a mapping of keys (trainer:, exp_manager:, model:, ...)\n"
           "hint: start from one of the files in configs/",
           source_, describe(root));
    flatten("", root, /*override_where=*/"");
  }

  void add_override(const std::string& arg) {
    std::string key, value;
    parse_override(arg, &key, &value);
    YAML::Node node;
    try {
      node = YAML::Load(hydra_flow_fix(value));
    } catch (const YAML::Exception& e) {
      fail("override '{}': the value is not valid YAML ({}), expected a scalar or a [list]\n"
           "hint: quote values with spaces or special characters for the shell and YAML",
           arg, e.msg);
    }
    const std::string where = "override '" + arg + "'";
    // An override replaces the whole value at its path.
    for (auto it = entries_.lower_bound(key); it != entries_.end() && (it->first == key || it->first.rfind(key + ".", 0) == 0);)
      it = entries_.erase(it);
    place(key, node, where, YAML::Mark::null_mark(), where);
  }

  void throw_unknown() const {
    if (unknown_.empty()) return;
    std::string msg = unknown_.size() == 1 ? "config: " : "config: " + std::to_string(unknown_.size()) + " unknown keys\n";
    for (size_t i = 0; i < unknown_.size(); i++) msg += (i ? "\n" : "") + unknown_[i];
    fail("{}\nhint: {}", msg, kHelpHint);
  }

  Entries& entries() { return entries_; }
  const std::vector<std::string>& ignored_overrides() const { return ignored_overrides_; }

 private:
  static void parse_override(const std::string& arg, std::string* key, std::string* value) {
    const size_t eq = arg.find('=');
    std::string k = eq == std::string::npos ? arg : arg.substr(0, eq);
    if (!k.empty() && k[0] == '~')
      fail("override '{}': deleting keys is not supported, expected key=value\nhint: set the key to its default "
           "or to null instead",
           arg);
    while (!k.empty() && k[0] == '+') k.erase(0, 1);
    bool ok = eq != std::string::npos && !k.empty();
    for (size_t i = 0; ok && i < k.size(); i++) {
      const char c = k[i];
      const bool start = i == 0 || k[i - 1] == '.';
      ok = std::isalpha(uint8_t(c)) || c == '_' || (!start && (std::isdigit(uint8_t(c)) || c == '.'));
    }
    if (!ok || k.back() == '.')
      fail("override '{}': expected key=value with a dotted key\nhint: e.g. trainer.max_steps=100 or "
           "model.data.data_prefix=[1.0,/data/corpus_text_document]",
           arg);
    *key = k;
    std::string v = arg.substr(eq + 1);
    // Hydra escapes '=' in values as '\='.
    for (size_t p = v.find("\\="); p != std::string::npos; p = v.find("\\=", p + 1)) v.erase(p, 1);
    *value = v;
  }

  // Hydra writes flow maps as {a:1,b:[x]}; YAML needs a space after a key's colon.
  static std::string hydra_flow_fix(const std::string& v) {
    if (v.empty() || (v[0] != '{' && v[0] != '[')) return v;
    std::string out;
    std::vector<char> stack;
    bool in_key = false;
    char quote = 0;
    for (size_t i = 0; i < v.size(); i++) {
      const char c = v[i];
      out += c;
      if (quote) {
        if (c == quote) quote = 0;
        continue;
      }
      if (c == '\'' || c == '"') quote = c;
      else if (c == '{' || c == '[') {
        stack.push_back(c);
        in_key = c == '{';
      } else if (c == '}' || c == ']') {
        if (!stack.empty()) stack.pop_back();
        in_key = false;
      } else if (c == ',') {
        in_key = !stack.empty() && stack.back() == '{';
      } else if (c == ':' && in_key) {
        if (i + 1 < v.size() && v[i + 1] != ' ') out += ' ';
        in_key = false;
      }
    }
    return out;
  }

  void flatten(const std::string& prefix, const YAML::Node& map, const std::string& override_where) {
    std::set<std::string> seen;
    for (const auto& kv : map) {
      const YAML::Node& k = kv.first;
      const std::string where_key = override_where.empty() ? where_of(source_, k.Mark()) : override_where;
      if (!k.IsScalar())
        fail("config {}: a key under '{}' is {}, expected a plain name\nhint: keys are names such as max_steps",
             where_key, prefix.empty() ? "the top" : prefix, describe(k));
      const std::string path = join_path(prefix, k.Scalar());
      if (!seen.insert(k.Scalar()).second)
        fail("config {}: key '{}' appears twice in the same mapping, expected it once\nhint: remove one of them",
             where_key, path);
      const YAML::Mark vm = kv.second.Mark();
      place(path, kv.second, override_where.empty() ? where_of(source_, vm.is_null() ? k.Mark() : vm) : override_where,
            k.Mark(), override_where);
    }
  }

  void place(const std::string& path, const YAML::Node& node, const std::string& where, const YAML::Mark& key_mark,
             const std::string& override_where) {
    const Schema& s = schema();
    if (s.find(path)) {
      set_entry(entries_, path, Entry{node, where, "", true, false});
      return;
    }
    if (s.is_section(path)) {
      // `sched: null` is NeMo's "no scheduler" (a constant lr); other null sections take their defaults.
      if (node.IsNull() && path == "model.optim.sched") {
        set_entry(entries_, "model.optim.sched.name", Entry{YAML::Node("none"), where, "", true, false});
        return;
      }
      if (node.IsNull()) return;
      if (!node.IsMap())
        fail("config {}: '{}' is {}, expected a mapping of its keys ({})\nhint: {}", where, path, describe(node),
             keys_under(path), kHelpHint);
      flatten(path, node, override_where);
      return;
    }
    // Below an ignored key (e.g. model.nsys_profile.enabled=true): accepted, nothing to store.
    for (std::string p = parent_of(path); !p.empty(); p = parent_of(p)) {
      if (const Spec* sp = s.find(p)) {
        if (sp->info.status == Status::ignored) {
          ignored_overrides_.push_back(p);
          return;
        }
        fail("config {}: '{}' sets a part of {} ({}), expected the whole value\nhint: set {} itself, e.g. {}={{...}} "
             "or [..]",
             where, path, p, sp->info.type, p, p);
      }
    }
    unknown_.push_back(unknown_key_line(path, override_where.empty() ? where_of(source_, key_mark) : where));
  }

  std::string source_;
  Entries entries_;
  std::vector<std::string> unknown_;
  std::vector<std::string> ignored_overrides_;
};

// ---------------------------------------------------------------------------------------------
// Interpolation.

class Resolver {
 public:
  explicit Resolver(Entries& e) : entries_(e) {}

  // Resolves every entry except those `lazy` selects (ignored keys: resolved only if referenced, as
  // OmegaConf resolves on access, so a NeMo-only interpolation there cannot fail a load).
  void resolve_all(const std::function<bool(const std::string&)>& lazy) {
    for (auto& [path, entry] : entries_)
      if (!lazy(path)) resolve_entry(path);
  }

 private:
  const YAML::Node& resolve_entry(const std::string& path) {
    Entry& e = entries_.at(path);
    if (e.resolved) return e.node;
    if (std::find(stack_.begin(), stack_.end(), path) != stack_.end()) {
      std::string cycle;
      for (const auto& s : stack_) cycle += s + " -> ";
      fail("config {}: interpolation cycle {}{}, expected each key to resolve to a value\nhint: break the cycle",
           e.where, cycle, path);
    }
    stack_.push_back(path);
    const bool has_interp = e.node.IsScalar() && e.node.Scalar().find("${") != std::string::npos;
    const std::string original = has_interp ? e.node.Scalar() : "";
    YAML::Node out = resolve_node(path, e.node, e.where);
    e.node.reset(out);
    if (has_interp) e.interp = original;
    e.resolved = true;
    stack_.pop_back();
    return e.node;
  }

  YAML::Node resolve_node(const std::string& key, const YAML::Node& n, const std::string& where) {
    if (n.IsScalar()) {
      if (n.Scalar().find("${") == std::string::npos) return n;
      return resolve_string(key, n.Scalar(), where);
    }
    if (n.IsSequence()) {
      YAML::Node out(YAML::NodeType::Sequence);
      for (const auto& item : n) out.push_back(resolve_node(key, item, where));
      return out;
    }
    if (n.IsMap()) {
      YAML::Node out(YAML::NodeType::Map);
      for (const auto& kv : n) out[kv.first.Scalar()] = resolve_node(key, kv.second, where);
      return out;
    }
    return n;
  }

  // Index of the '}' closing the "${" at `open`, or npos.
  static size_t matching_close(const std::string& s, size_t open) {
    int depth = 0;
    for (size_t i = open; i < s.size(); i++) {
      if (s.compare(i, 2, "${") == 0) {
        depth++;
        i++;
      } else if (s[i] == '}' && --depth == 0) {
        return i;
      }
    }
    return std::string::npos;
  }

  YAML::Node resolve_string(const std::string& key, const std::string& s, const std::string& where) {
    const size_t first = s.find("${");
    if (first == 0 && matching_close(s, 0) == s.size() - 1) return resolve_expr(key, s.substr(2, s.size() - 3), where);
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
      if (s.compare(i, 3, "\\${") == 0) {
        out += "${";
        i += 3;
        continue;
      }
      if (s.compare(i, 2, "${") != 0) {
        out += s[i++];
        continue;
      }
      const size_t close = matching_close(s, i);
      if (close == std::string::npos)
        fail("{} ({}): '{}' has an unclosed '${{', expected ${{key}}\nhint: close the interpolation", key, where, s);
      const YAML::Node v = resolve_expr(key, s.substr(i + 2, close - i - 2), where);
      if (!v.IsScalar())
        fail("{} ({}): '{}' puts {} inside a string, expected a scalar\nhint: interpolate a scalar key", key, where, s,
             describe(v));
      out += v.Scalar();
      i = close + 1;
    }
    return YAML::Node(out);
  }

  static std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t");
    const size_t e = s.find_last_not_of(" \t");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
  }

  YAML::Node resolve_expr(const std::string& key, const std::string& expr_in, const std::string& where) {
    const std::string expr = trim(expr_in);
    // A resolver call `name:arg,...` has a ':' outside nested interpolations.
    size_t colon = std::string::npos;
    for (size_t i = 0, depth = 0; i < expr.size(); i++) {
      if (expr.compare(i, 2, "${") == 0) depth++, i++;
      else if (expr[i] == '}' && depth > 0) depth--;
      else if (expr[i] == ':' && depth == 0) {
        colon = i;
        break;
      }
    }
    if (colon != std::string::npos) return call_resolver(key, expr.substr(0, colon), expr.substr(colon + 1), where);
    return lookup(key, expr, where);
  }

  YAML::Node call_resolver(const std::string& key, const std::string& name, const std::string& args_text,
                           const std::string& where) {
    std::vector<std::string> args;
    std::string cur;
    int depth = 0;
    for (size_t i = 0; i < args_text.size(); i++) {
      if (args_text.compare(i, 2, "${") == 0) depth++;
      if (args_text[i] == '}') depth--;
      if (args_text[i] == ',' && depth == 0) {
        args.push_back(trim(cur));
        cur.clear();
      } else {
        cur += args_text[i];
      }
    }
    args.push_back(trim(cur));
    if (name != "multiply")
      fail("{} ({}): unknown resolver '{}', expected multiply\nhint: write the value itself", key, where, name);
    bool all_int = true;
    int64_t iprod = 1;
    double dprod = 1;
    for (const auto& a : args) {
      YAML::Node v = a.find("${") != std::string::npos ? resolve_string(key, a, where) : YAML::Node(a);
      int64_t i;
      double d;
      if (v.IsScalar() && parse_int64(v.Scalar(), &i)) {
        iprod *= i;
        dprod *= double(i);
      } else if (v.IsScalar() && parse_double(v.Scalar(), &d)) {
        all_int = false;
        dprod *= d;
      } else {
        fail("{} ({}): multiply got {}, expected numbers\nhint: multiply numeric keys only", key, where, describe(v));
      }
    }
    return YAML::Node(all_int ? fmt::format("{}", iprod) : format_double(dprod));
  }

  // `.x` is relative to the key's section (each further dot goes one section up), `a.b` absolute.
  YAML::Node lookup(const std::string& key, const std::string& ref, const std::string& where) {
    std::string target;
    if (!ref.empty() && ref[0] == '.') {
      size_t dots = 0;
      while (dots < ref.size() && ref[dots] == '.') dots++;
      std::string base = parent_of(key);
      for (size_t i = 1; i < dots; i++) base = parent_of(base);
      target = join_path(base, ref.substr(dots));
    } else {
      target = ref;
    }
    if (entries_.count(target)) return resolve_entry(target);
    // Inside a stored mapping (e.g. a part of an ignored subtree or of completion_map).
    for (std::string p = parent_of(target); !p.empty(); p = parent_of(p)) {
      if (!entries_.count(p)) continue;
      YAML::Node n = resolve_entry(p);
      const std::string rest = target.substr(p.size() + 1);
      size_t start = 0;
      while (n.IsDefined() && n.IsMap() && start <= rest.size()) {
        size_t dot = rest.find('.', start);
        if (dot == std::string::npos) dot = rest.size();
        const YAML::Node child = std::as_const(n)[rest.substr(start, dot - start)];
        n.reset(child);
        start = dot + 1;
      }
      if (n.IsDefined() && start > rest.size()) return n;
      break;
    }
    fail("{} ({}): interpolation '${{{}}}' refers to {}, which is not set, expected a key with a value\n"
         "hint: set {} or write the value itself",
         key, where, ref, target, target);
  }

  Entries& entries_;
  std::vector<std::string> stack_;
};

// ---------------------------------------------------------------------------------------------
// Restricted keys and cross-key checks.

bool same_value(const YAML::Node& n, const std::string& allowed) {
  if (allowed == "null") return n.IsNull();
  if (!n.IsScalar()) return false;
  const std::string& t = n.Scalar();
  double a, b;
  if (parse_double(t, &a) && parse_double(allowed, &b)) return a == b;
  bool x, y;
  if (parse_bool(t, &x) && parse_bool(allowed, &y)) return x == y;
  return t == allowed;
}

struct Context {
  const Entries& entries;
  const std::string& where(const std::string& key) const {
    static const std::string kDefault = "default";
    auto it = entries.find(key);
    return it == entries.end() ? kDefault : it->second.where;
  }
  bool given(const std::string& key) const {
    auto it = entries.find(key);
    return it != entries.end() && it->second.given;
  }
};

template <class... Args>
[[noreturn]] void fail_key(const Context& ctx, const std::string& key, fmt::format_string<Args...> f, Args&&... args) {
  fail("{} ({}): {}", key, ctx.where(key), fmt::format(f, std::forward<Args>(args)...));
}

// With model.init_from: shape keys come from config.json; given ones must agree.
void apply_init_from(TrainConfig& cfg, const Context& ctx) {
  ModelConfig& m = cfg.model;
  const std::string dir = *m.init_from;
  if (!fs::is_directory(dir))
    fail_key(ctx, "model.init_from", "got '{}', which is not a folder, expected a Hugging Face model folder\n"
             "hint: the folder holds config.json, *.safetensors and tokenizer.model", dir);
  const std::string json = (fs::path(dir) / "config.json").string();
  if (!fs::exists(json))
    fail_key(ctx, "model.init_from", "'{}' has no config.json, expected a Hugging Face model folder\n"
             "hint: point model.init_from at the folder that holds config.json", dir);
  const model::LlamaConfig hf = io::read_hf_config(json);
  // The shortest decimal of a float config value, so 1e-05f reads back as 1e-05.
  auto decimal = [](float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); };
  auto agree_int = [&](const std::string& key, auto* field, int64_t hf_value, const char* hf_key, bool given) {
    if (given && int64_t(*field) != hf_value)
      fail_key(ctx, key, "got {}, but {} has {} {}, expected them to agree\nhint: remove {} (with model.init_from the "
               "architecture comes from config.json) or fix it", int64_t(*field), json, hf_key, hf_value, key);
    *field = static_cast<std::remove_reference_t<decltype(*field)>>(hf_value);
  };
  auto agree_real = [&](const std::string& key, double* field, float hf_value, const char* hf_key) {
    if (ctx.given(key) && float(*field) != hf_value)
      fail_key(ctx, key, "got {}, but {} has {} {}, expected them to agree\nhint: remove {} (with model.init_from the "
               "architecture comes from config.json) or fix it", *field, json, hf_key, hf_value, key);
    *field = decimal(hf_value);
  };
  agree_int("model.num_layers", &m.num_layers, hf.n_layers, "num_hidden_layers", ctx.given("model.num_layers"));
  agree_int("model.hidden_size", &m.hidden_size, hf.dim, "hidden_size", ctx.given("model.hidden_size"));
  agree_int("model.ffn_hidden_size", &m.ffn_hidden_size, hf.ffn_dim, "intermediate_size", ctx.given("model.ffn_hidden_size"));
  agree_int("model.num_attention_heads", &m.num_attention_heads, hf.n_heads, "num_attention_heads",
            ctx.given("model.num_attention_heads"));
  if (ctx.given("model.num_query_groups") && m.num_query_groups && *m.num_query_groups != hf.n_kv_heads)
    fail_key(ctx, "model.num_query_groups", "got {}, but {} has num_key_value_heads {}, expected them to agree\n"
             "hint: remove model.num_query_groups / num_kv_heads or fix it", *m.num_query_groups, json, hf.n_kv_heads);
  m.num_query_groups = hf.n_kv_heads;
  if (m.kv_channels && *m.kv_channels != hf.head_dim())
    fail_key(ctx, "model.kv_channels", "got {}, but {} has head dim {}, expected them to agree\nhint: remove "
             "model.kv_channels", *m.kv_channels, json, hf.head_dim());
  agree_real("model.layernorm_epsilon", &m.layernorm_epsilon, hf.norm_eps, "rms_norm_eps");
  agree_real("model.rotary_base", &m.rotary_base, hf.rope_theta, "rope_theta");
  if (ctx.given("model.share_embeddings_and_output_weights") && m.share_embeddings_and_output_weights != hf.tie_embeddings)
    fail_key(ctx, "model.share_embeddings_and_output_weights", "got {}, but {} has tie_word_embeddings {}, expected "
             "them to agree\nhint: remove the key", m.share_embeddings_and_output_weights, json, hf.tie_embeddings);
  m.share_embeddings_and_output_weights = hf.tie_embeddings;
  if (!ctx.given("model.max_position_embeddings")) m.max_position_embeddings = hf.max_seq_len;
}

void check_sft_dataset(const Context& ctx, const SftDatasetConfig& ds, const std::string& name, const ModelConfig& m) {
  const std::string p = "model.data." + name + ".";
  if (!ds.concat_sampling_probabilities.empty()) {
    if (ds.concat_sampling_probabilities.size() != ds.file_names.size())
      fail_key(ctx, p + "concat_sampling_probabilities", "has {} weights for {} files, expected one per file\n"
               "hint: one weight per entry of {}file_names, or null for equal weights",
               ds.concat_sampling_probabilities.size(), ds.file_names.size(), p);
    double sum = 0;
    for (double w : ds.concat_sampling_probabilities) {
      if (w < 0) fail_key(ctx, p + "concat_sampling_probabilities", "has weight {}, expected weights >= 0", w);
      sum += w;
    }
    if (std::abs(sum - 1.0) > 1e-6)
      fail_key(ctx, p + "concat_sampling_probabilities", "sums to {}, expected 1\nhint: normalize the weights", sum);
  }
  const std::string tail = "{" + ds.label_key + "}";
  const std::string& t = ds.prompt_template;
  if (t.size() <= tail.size() || t.compare(t.size() - tail.size(), tail.size(), tail) != 0)
    fail_key(ctx, p + "prompt_template", "got '{}', expected a prompt followed by {} at the end (the completion)\n"
             "hint: e.g. \"Question: {{question}}\\nAnswer: {}\"", t, tail, tail);
  try {
    data::validate_prompt_template(t.substr(0, t.size() - tail.size()));
  } catch (const Error& e) {
    fail_key(ctx, p + "prompt_template", "{}", e.what());
  }
  if (ds.max_seq_length > m.max_position_embeddings)
    fail_key(ctx, p + "max_seq_length", "got {}, expected at most model.max_position_embeddings ({})",
             ds.max_seq_length, m.max_position_embeddings);
}

void check_data_prefix(const Context& ctx, const std::vector<std::string>& items, const char* part) {
  if (items.empty()) return;
  try {
    data::parse_data_prefix(items);
  } catch (const Error& e) {
    fail_key(ctx, "model.data.data_prefix", "{}{}", part, e.what());
  }
}

// Adds "(file:line)" after the first key a lower-level message names (e.g. make_schedule's).
std::string locate(std::string msg, const Context& ctx) {
  std::smatch m;
  if (std::regex_search(msg, m, std::regex(R"(model\.optim\.[a-z_.]*[a-z_])")) && ctx.entries.count(m.str()))
    msg.insert(size_t(m.position() + m.length()), " (" + ctx.where(m.str()) + ")");
  return msg;
}

void validate(TrainConfig& cfg, const Context& ctx, std::vector<std::string>* notes) {
  TrainerConfig& t = cfg.trainer;
  ModelConfig& m = cfg.model;
  if (t.max_epochs && *t.max_epochs == -1) t.max_epochs.reset();
  if (t.max_epochs && *t.max_epochs == 0)
    fail_key(ctx, "trainer.max_epochs", "got 0, expected -1, null or a count >= 1");
  if (cfg.exp_manager.checkpoint_callback_params.save_top_k == 0)
    fail_key(ctx, "exp_manager.checkpoint_callback_params.save_top_k",
             "got 0, expected -1 (keep all) or K >= 1 (keep the newest K)\nhint: to write no checkpoints set "
             "exp_manager.create_checkpoint_callback=false");

  // Layout.
  const int64_t mp = int64_t(m.tensor_model_parallel_size) * m.pipeline_model_parallel_size;
  if (cfg.world_size() % mp != 0)
    fail_key(ctx, "model.tensor_model_parallel_size",
             "TP {} x PP {} = {} does not divide the {} ranks (trainer.devices {} x trainer.num_nodes {}), expected a "
             "divisor\nhint: change TP, PP or the number of processes",
             m.tensor_model_parallel_size, m.pipeline_model_parallel_size, mp, cfg.world_size(), t.devices, t.num_nodes);
  const int64_t dp = cfg.data_parallel_size();
  if (m.global_batch_size % (m.micro_batch_size * dp) != 0)
    fail_key(ctx, "model.global_batch_size",
             "got {}, expected a multiple of micro_batch_size {} x data-parallel size {} = {}\nhint: data-parallel "
             "size = devices x num_nodes / (TP x PP) = {} x {} / ({} x {})",
             m.global_batch_size, m.micro_batch_size, dp, m.micro_batch_size * dp, t.devices, t.num_nodes,
             m.tensor_model_parallel_size, m.pipeline_model_parallel_size);
  if (m.sequence_parallel && m.tensor_model_parallel_size == 1 && ctx.given("model.sequence_parallel"))
    notes->push_back("model.sequence_parallel has no effect with tensor_model_parallel_size 1");

  // Architecture.
  if (m.init_from) apply_init_from(cfg, ctx);
  if (m.hidden_size % m.num_attention_heads != 0)
    fail_key(ctx, "model.num_attention_heads", "got {}, expected a divisor of hidden_size {}\nhint: head dim = "
             "hidden_size / num_attention_heads", m.num_attention_heads, m.hidden_size);
  const int head_dim = m.hidden_size / m.num_attention_heads;
  if (head_dim % 2 != 0)
    fail_key(ctx, "model.num_attention_heads", "gives head dim {} (hidden_size {} / {}), expected an even head dim "
             "(RoPE rotates pairs)", head_dim, m.hidden_size, m.num_attention_heads);
  if (m.kv_channels && *m.kv_channels != head_dim)
    fail_key(ctx, "model.kv_channels", "got {}, expected null or hidden_size / num_attention_heads = {}\nhint: a head "
             "dim other than hidden/heads is not supported", *m.kv_channels, head_dim);
  if (m.kv_heads() > m.num_attention_heads || m.num_attention_heads % m.kv_heads() != 0)
    fail_key(ctx, "model.num_query_groups", "got {}, expected a divisor of num_attention_heads {}\nhint: each key/value "
             "head serves the same number of query heads", m.kv_heads(), m.num_attention_heads);
  const int tp = m.tensor_model_parallel_size;
  if (m.num_attention_heads % tp != 0 || (m.kv_heads() % tp != 0 && tp % m.kv_heads() != 0))
    fail_key(ctx, "model.tensor_model_parallel_size", "got {}, expected a divisor of num_attention_heads {}, and a "
             "divisor or a multiple of the key/value heads {}\nhint: tensor parallelism splits heads (with fewer kv "
             "heads than ranks, each kv head is replicated)", tp, m.num_attention_heads, m.kv_heads());
  if (m.ffn_hidden_size % tp != 0)
    fail_key(ctx, "model.tensor_model_parallel_size", "got {}, expected a divisor of ffn_hidden_size {}", tp,
             m.ffn_hidden_size);
  {
    const int pp = m.pipeline_model_parallel_size;
    const int first = m.num_layers_in_first_pipeline_stage.value_or(0), last = m.num_layers_in_last_pipeline_stage.value_or(0);
    const int fixed = (first > 0) + (last > 0 && pp > 1);
    const int rest = m.num_layers - first - (pp > 1 ? last : 0), middle = pp - fixed;
    if (pp > m.num_layers)
      fail_key(ctx, "model.pipeline_model_parallel_size", "got {}, expected at most num_layers {} (a stage holds at "
               "least one layer)", pp, m.num_layers);
    if ((first || last) && pp == 1)
      notes->push_back("model.num_layers_in_*_pipeline_stage has no effect with pipeline_model_parallel_size 1");
    else if (rest < middle || (middle == 0 ? rest != 0 : rest % middle != 0))
      fail_key(ctx, "model.pipeline_model_parallel_size",
               "got {} stages for num_layers {} (first stage {}, last stage {}), expected the other stages to split "
               "the remaining {} layers evenly, at least one each\nhint: change the pipeline size or set "
               "model.num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage",
               pp, m.num_layers, first ? std::to_string(first) : "even", last ? std::to_string(last) : "even", rest);
  }
  if (m.encoder_seq_length > m.max_position_embeddings)
    fail_key(ctx, "model.encoder_seq_length", "got {}, expected at most model.max_position_embeddings ({})",
             m.encoder_seq_length, m.max_position_embeddings);
  if (m.data.seq_length > m.max_position_embeddings)
    fail_key(ctx, "model.data.seq_length", "got {}, expected at most model.max_position_embeddings ({})\nhint: raise "
             "max_position_embeddings or shorten the sequences", m.data.seq_length, m.max_position_embeddings);
  if (m.activations_checkpoint_granularity == "full" && !m.activations_checkpoint_method)
    fail_key(ctx, "model.activations_checkpoint_method", "is null with granularity full, expected uniform or block");
  if (m.activations_checkpoint_granularity == "full" && !m.activations_checkpoint_num_layers)
    fail_key(ctx, "model.activations_checkpoint_num_layers", "is null with granularity full, expected a count >= 1");

  // Optimizer and schedule.
  if (m.optim.betas.size() != 2 || !(m.optim.betas[0] >= 0 && m.optim.betas[0] < 1) ||
      !(m.optim.betas[1] >= 0 && m.optim.betas[1] < 1))
    fail_key(ctx, "model.optim.betas", "got {}, expected [beta1, beta2] with each in [0, 1)\nhint: Llama uses "
             "[0.9, 0.95]", Conv<std::vector<double>>::emit(m.optim.betas));
  try {
    cfg.lr_schedule();
  } catch (const Error& e) {
    fail("{}", locate(e.what(), ctx));
  }
  if (m.optim.sched.max_steps && *m.optim.sched.max_steps != t.max_steps)
    notes->push_back(fmt::format("model.optim.sched.max_steps {} differs from trainer.max_steps {}: the schedule runs "
                                 "over {} steps (NeMo would use trainer.max_steps)",
                                 *m.optim.sched.max_steps, t.max_steps, *m.optim.sched.max_steps));

  // Data.
  if (m.data.fine_tuning) {
    if (m.data.train_ds.file_names.empty())
      fail_key(ctx, "model.data.train_ds.file_names", "is not set, expected JSONL files with model.data.fine_tuning "
               "true\nhint: model.data.train_ds.file_names=[/data/train.jsonl]");
    check_sft_dataset(ctx, m.data.train_ds, "train_ds", m);
    if (!m.data.validation_ds.file_names.empty()) check_sft_dataset(ctx, m.data.validation_ds, "validation_ds", m);
    if (!m.data.test_ds.file_names.empty()) check_sft_dataset(ctx, m.data.test_ds, "test_ds", m);
  } else {
    if (m.data.data_prefix.train.empty())
      fail_key(ctx, "model.data.data_prefix", "is not set, expected [weight, prefix, ...] or [prefix, ...]\nhint: "
               "model.data.data_prefix=[1.0,/data/corpus_text_document] (the .bin/.idx path without extension), or "
               "model.data.fine_tuning=true for JSONL");
    check_data_prefix(ctx, m.data.data_prefix.train, m.data.data_prefix.per_split ? "train: " : "");
    check_data_prefix(ctx, m.data.data_prefix.validation, "validation: ");
    check_data_prefix(ctx, m.data.data_prefix.test, "test: ");
    if (!m.data.data_prefix.per_split) {
      try {
        data::parse_split_weights(m.data.splits_string);
      } catch (const Error& e) {
        fail_key(ctx, "model.data.splits_string", "{}", e.what());
      }
    }
  }

  // Tokenizer.
  const TokenizerConfig& tok = m.tokenizer;
  if (tok.library == "sentencepiece" && !tok.model && !m.init_from)
    fail_key(ctx, "model.tokenizer.model", "is not set, expected the tokenizer.model file (library sentencepiece)\n"
             "hint: model.tokenizer.model=/models/llama2/tokenizer.model, or model.init_from=<Hugging Face folder>");
  if (tok.library == "huggingface" && !tok.type && !m.init_from)
    fail_key(ctx, "model.tokenizer.type", "is not set, expected a folder holding tokenizer.model (library "
             "huggingface)\nhint: model.tokenizer.type=/models/Llama-2-7b-hf");
}

// ---------------------------------------------------------------------------------------------

LoadedConfig load(const YAML::Node& root, const std::string& source, const std::vector<std::string>& overrides) {
  const Schema& sch = schema();
  Loader loader(source);
  loader.add_document(root);
  loader.throw_unknown();
  for (const auto& o : overrides) loader.add_override(o);
  loader.throw_unknown();
  Entries& entries = loader.entries();

  // Defaults of every key the trainer reads or restricts.
  for (const auto& sp : sch.specs()) {
    if ((sp.bound() || sp.info.status == Status::restricted) && !entries.count(sp.info.path))
      set_entry(entries, sp.info.path, Entry{YAML::Load(sp.info.default_value), "default", "", false, false});
  }
  Resolver(entries).resolve_all([&](const std::string& path) {
    const Spec* sp = sch.find(path);
    return sp && sp->info.status == Status::ignored;
  });

  // Aliases: fold into their target; both given with different values is an error.
  for (const auto& sp : sch.specs()) {
    if (sp.info.status != Status::alias) continue;
    auto it = entries.find(sp.info.path);
    if (it == entries.end()) continue;
    const Entry& target = entries.at(sp.alias_of);
    if (target.given && YAML::Dump(target.node) != YAML::Dump(it->second.node))
      fail("{} ({}) and {} ({}) disagree: {} vs {}, expected one value\nhint: remove one of them", sp.info.path,
           it->second.where, sp.alias_of, target.where, describe(it->second.node), describe(target.node));
    const Entry moved = it->second;
    entries.erase(it);
    set_entry(entries, sp.alias_of, moved);
  }

  LoadedConfig out;
  std::vector<std::string> ignored = loader.ignored_overrides();
  for (const auto& sp : sch.specs()) {
    auto it = entries.find(sp.info.path);
    if (it == entries.end()) continue;
    const Entry& e = it->second;
    if (sp.info.status == Status::ignored) {
      ignored.push_back(sp.info.path);
    } else if (sp.info.status == Status::restricted) {
      const auto allowed = split_choices(sp.choices);
      if (std::none_of(allowed.begin(), allowed.end(), [&](const std::string& a) { return same_value(e.node, a); }))
        fail("{} ({}): got {}, expected {}: {}\nhint: remove the key or set it to {}", sp.info.path, e.where,
             describe(e.node), choices_text(sp.choices), sp.why, allowed[0]);
    } else if (sp.bound()) {
      if (is_missing(e.node) && !sp.can_be_unset)
        fail("{} ({}): is '?\?\?' (a value you must give), expected {}\nhint: set it in the file or as {}=<value>",
             sp.info.path, e.where, sp.info.type, sp.info.path);
      sp.set(out.config, Field{sp, e});
    }
  }
  validate(out.config, Context{entries}, &out.notes);
  if (!ignored.empty()) {
    std::sort(ignored.begin(), ignored.end());
    ignored.erase(std::unique(ignored.begin(), ignored.end()), ignored.end());
    std::string line = "ignored (no effect here): ";
    for (size_t i = 0; i < ignored.size(); i++) line += (i ? ", " : "") + ignored[i];
    out.notes.insert(out.notes.begin(), line);
  }
  return out;
}

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail("config {}: invalid YAML: {}, expected a YAML mapping\nhint: check the indentation and quoting there",
         where_of(source, e.mark), e.msg);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API.

LoadedConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    fail("config {}: is a folder, expected a YAML file\nhint: e.g. configs/llama2_7b.yaml", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("config {}: cannot open it ({}), expected a readable YAML file\nhint: check the path", path, std::strerror(errno));
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
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", last_component(k.path), cell(type), cell(def),
                       cell(k.allowed), cell(doc));
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

LrSchedule TrainConfig::lr_schedule() const { return make_schedule(model.optim.sched, model.optim.lr, trainer.max_steps); }

data::GptDataConfig TrainConfig::gpt_data_config() const {
  data::GptDataConfig g;
  g.data_prefix = model.data.data_prefix.train;
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
  c.max_seq_len = int(max_position_embeddings);
  c.norm_eps = float(layernorm_epsilon);
  c.rope_theta = float(rotary_base);
  c.tie_embeddings = share_embeddings_and_output_weights;
  return c;
}

std::vector<int> ModelConfig::pipeline_layers() const {
  const int pp = std::max(1, pipeline_model_parallel_size);
  if (pp == 1) return {num_layers};
  const int first = num_layers_in_first_pipeline_stage.value_or(0), last = num_layers_in_last_pipeline_stage.value_or(0);
  const int middle = pp - (first > 0) - (last > 0);
  const int each = middle > 0 ? (num_layers - first - last) / middle : 0;
  std::vector<int> split(size_t(pp), each);
  if (first) split.front() = first;
  if (last) split.back() = last;
  return split;
}

int64_t ModelConfig::padded_vocab_size(int64_t vocab_size) const {
  const int64_t multiple = int64_t(make_vocab_size_divisible_by) * tensor_model_parallel_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

std::string ModelConfig::tokenizer_model_path() const {
  if (tokenizer.library == "sentencepiece" && tokenizer.model) return *tokenizer.model;
  if (tokenizer.library == "huggingface" && tokenizer.type) return (fs::path(*tokenizer.type) / "tokenizer.model").string();
  return init_from ? (fs::path(*init_from) / "tokenizer.model").string() : "";
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
