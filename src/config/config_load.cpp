// YAML config -> TrainConfig (load). Pipeline: parse the file (yaml-cpp, keeping marks), flatten it
// against the schema into one entry per key (unknown and duplicate keys are errors, with the closest
// valid keys suggested), apply the Hydra-style overrides (each replaces the whole value at its path),
// add schema defaults, resolve interpolations (config_interpolate.cpp), fold aliases, check the
// restricted keys, convert each entry into its typed field (config_convert.h), then the cross-key
// checks (config_validate.cpp). The steps not named with a file are here, and so is load(), which
// runs them all.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "config/config_schema.h"

namespace llamatrain::train::config_detail {

namespace {

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
    for (auto it = entries_.lower_bound(key);
         it != entries_.end() && (it->first == key || it->first.rfind(key + ".", 0) == 0);)
      it = entries_.erase(it);
    place(key, node, where, YAML::Mark::null_mark(), where);
  }

  void throw_unknown() const {
    if (unknown_.empty()) return;
    std::string msg =
        unknown_.size() == 1 ? "config: " : "config: " + std::to_string(unknown_.size()) + " unknown keys\n";
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
      if (c == '\'' || c == '"')
        quote = c;
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

}  // namespace

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
  resolve_interpolations(entries, [&](const std::string& path) {
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

}  // namespace llamatrain::train::config_detail
