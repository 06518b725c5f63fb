#include "obs/log_lines.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>

namespace llamatrain::obs {

std::string utc_time_ms() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", stamp, int(ms));
}

std::string event_line(const char* kind, nlohmann::ordered_json fields) {
  nlohmann::ordered_json e{{"event", kind}, {"time", utc_time_ms()}};
  for (auto& [k, v] : fields.items()) e[k] = std::move(v);
  // dump() writes NaN and infinities as null; invalid UTF-8 in a message is replaced, never thrown
  return std::string(kEventMarker) + e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<nlohmann::json> parse_event_line(std::string_view line) {
  // Every marker from the last: a launcher forwards each rank's output in chunks, so where ranks
  // print at once one rank's event can be cut by another's whole line ("@event {...cut[rank 1]
  // @event {...}"); the complete one is found.
  for (size_t at = line.rfind(kEventMarker); at != std::string_view::npos;
       at = at == 0 ? std::string_view::npos : line.rfind(kEventMarker, at - 1)) {
    const std::string_view body = line.substr(at + kEventMarker.size());
    if (body.empty() || body.front() != '{') continue;
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("event") || !j["event"].is_string()) continue;
    return j;
  }
  return std::nullopt;
}

std::string stamped_line(const std::string& text) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("[{}] {}", stamp, text);
}

std::string line_time(std::string_view line) {
  if (line.size() < 21 || line[0] != '[' || line[20] != ']') return "";
  return std::string(line.substr(1, 19));
}

}  // namespace llamatrain::obs
