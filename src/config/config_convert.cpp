// Scalar parsing shared by the converters, the interpolation resolver and the restricted-key check
// (integers, finite numbers, YAML's booleans; each answers false rather than throwing), the YAML
// text a string is written back as, and the non-template helpers of the Conv<T> list converters.
// The converters themselves are templates in config_convert.h.
#include "config/config_convert.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace llamatrain::train::config_detail {

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
// Converters: list helpers.

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

}  // namespace llamatrain::train::config_detail
