// Internal to src/train/: what the pieces of the config loader share; only the config_*.cpp files
// include it (everything else sees config/config.h). Entries are the keys' YAML values after
// flattening; a Spec is one schema row; Schema is the table build_schema() fills, the only list of
// keys. The converters (YAML node <-> typed field) are in config_convert.h. Where each piece lives:
// config_schema.cpp (entries, rows, the table), config_convert.cpp (scalar parsing),
// config_load.cpp (load: flatten, overrides, defaults, unknown keys), config_interpolate.cpp,
// config_validate.cpp (restricted keys, cross-key checks), config.cpp (public API, derived values).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/names.h"
#include "config/config.h"

namespace llamatrain::train::config_detail {

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

void set_entry(Entries& entries, const std::string& path, Entry e);
bool is_missing(const YAML::Node& n);
// 'text', a list, a mapping or null, for error messages.
std::string describe(const YAML::Node& n);
std::string last_component(const std::string& path);
std::string parent_of(const std::string& path);
std::string join_path(const std::string& a, const std::string& b);
// "file.yaml:12:5" (1-based), or `source` alone when the mark is null.
std::string where_of(const std::string& source, const YAML::Mark& m);

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
  std::string choices;  // '|'-separated strings allowed (string fields, restricted keys)
  Limits lim;
  std::string why;                                      // restricted keys: why other values are refused
  std::string alias_of;                                 // alias keys
  std::function<void(TrainConfig&, const Field&)> set;  // bound keys
  std::function<std::string(const TrainConfig&)> emit;  // bound keys: YAML text of the value
  bool can_be_unset = false;                            // bound keys: ??? ("must be given") leaves it unset
  bool bound() const { return static_cast<bool>(set); }
};

std::string format_double(double v);
// "(0, 1]", ">= 1", "" (no limits); integer limits print without a fraction.
std::string limits_text(const Limits& l, bool integer);
std::vector<std::string> split_choices(const std::string& s);
std::string choices_text(const std::string& choices);

// ---------------------------------------------------------------------------------------------
// Scalar parsing shared by the converters (config_convert.cpp).

bool parse_int64(const std::string& s, int64_t* v);
bool parse_double(const std::string& s, double* v);
bool parse_bool(const std::string& s, bool* v);
// A string written back as YAML: plain when it reloads as the same text, double-quoted otherwise;
// "${" is escaped so a literal is not re-read as an interpolation.
std::string yaml_string(const std::string& text);

// ---------------------------------------------------------------------------------------------
// The schema table (config_schema.cpp).

class Schema {
 public:
  // A key the trainer reads, bound to a TrainConfig field through `field` (TrainConfig& -> T*).
  // Defined in config_schema.cpp (it instantiates the converters), the one file that adds keys.
  template <class F>
  void key(const std::string& path, F field, const std::string& def, const std::string& doc, Limits lim = {},
           const std::string& choices = "", Status status = Status::used);
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

// The table build_schema() fills, built once.
const Schema& schema();

// ---------------------------------------------------------------------------------------------
// The stages of load() that live in their own files.

// Resolves the interpolations of every entry except those `lazy` selects (config_interpolate.cpp).
void resolve_interpolations(Entries& entries, const std::function<bool(const std::string&)>& lazy);

// Whether a restricted key's value `n` is the YAML value `allowed` (config_validate.cpp).
bool same_value(const YAML::Node& n, const std::string& allowed);

// Where each key's value came from and whether it was given, for the cross-key checks' messages.
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

// "key (where it was set)": what opens an error about a key.
std::string key_head(const Context& ctx, const std::string& key);
// The config's keys for the fields of the model's and the layout's rules (model/config.h,
// model/shard.h), so those rules speak in keys; seq_len_key names the sequence length a check is about.
FieldNames model_key_names(const Context& ctx, const std::string& seq_len_key = "");

// The cross-key checks; fills what follows from other keys (model.init_from) and adds notes.
void validate(TrainConfig& cfg, const Context& ctx, std::vector<std::string>* notes);

// The whole pipeline from a parsed document to a TrainConfig (config_load.cpp).
LoadedConfig load(const YAML::Node& root, const std::string& source, const std::vector<std::string>& overrides);
YAML::Node parse_yaml(const std::string& text, const std::string& source);

}  // namespace llamatrain::train::config_detail
