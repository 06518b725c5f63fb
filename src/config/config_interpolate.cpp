// OmegaConf interpolation over the flattened entries, run after the overrides and defaults:
// `${a.b}` absolute, `${.x}` relative to the key's section (each further dot one section up),
// `${multiply:a,b}` the one resolver, `\${` a literal. A value that is one `${...}` takes the node it
// refers to (a list stays a list); inside a string only scalars fit. Each entry resolves once and
// remembers its original text for error messages; cycles are errors naming the chain. Ignored keys
// resolve only when referenced, as OmegaConf resolves on access.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "config/config_schema.h"

namespace llamatrain::train::config_detail {

namespace {

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
      if (expr.compare(i, 2, "${") == 0)
        depth++, i++;
      else if (expr[i] == '}' && depth > 0)
        depth--;
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
        if (__builtin_mul_overflow(iprod, i, &iprod))
          fail("{} ({}): multiply overflows a 64-bit integer at the factor {}\nhint: check the factors", key, where,
               describe(YAML::Node(a)));
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

}  // namespace

void resolve_interpolations(Entries& entries, const std::function<bool(const std::string&)>& lazy) {
  Resolver(entries).resolve_all(lazy);
}

}  // namespace llamatrain::train::config_detail
