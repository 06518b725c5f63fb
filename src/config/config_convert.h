// Internal to src/train/ (only the config_*.cpp files include it): the converters, one Conv<T> per
// C++ type of a schema field, each with type() (the help text's name), parse(Field) (an Error naming
// the key on a bad value) and emit(value) (YAML text that parses back to the same value). Also which
// types ??? leaves unset and the limit/choice check of a parsed value. Templates, so Schema::key can
// instantiate them for each field; their non-template helpers are in config_convert.cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "config/config_schema.h"

namespace llamatrain::train::config_detail {

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
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      f.bad("an integer that fits in 32 bits");
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

// A scalar or a sequence of scalars as strings; null and ??? give an empty list.
std::vector<std::string> scalar_list(const Field& f, const std::string& expected);
// "[a, b]" from items already written as YAML.
std::string emit_list(const std::vector<std::string>& items);

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
      p.train = scalar_list(
          f, "a list [weight, prefix, ...] or [prefix, ...], or {train: [...], validation: [...], test: [...]}");
      return p;
    }
    p.per_split = true;
    for (const auto& kv : n) {
      const std::string k = kv.first.IsScalar() ? kv.first.Scalar() : "";
      Entry sub{kv.second, f.entry.where, f.entry.interp, true, true};
      Field sf{f.spec, sub};
      std::vector<std::string>* dst = k == "train"        ? &p.train
                                      : k == "validation" ? &p.validation
                                      : k == "test"       ? &p.test
                                                          : nullptr;
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

}  // namespace llamatrain::train::config_detail
