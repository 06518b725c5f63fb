// The two line formats of a run's log, written and read here only: the event lines (`@event ` and one
// single-line JSON object with at least "event", its kind), which the trainer prints beside its human
// lines so that tools (`llamatrain diagnose`, `llamatrain report`) read a log without parsing prose,
// and the time stamp train_log.txt puts before every line ("[2026-12-01 16:30:00] "). docs/training.md
// lists the event kinds and their fields; readers ignore kinds and fields they do not know and
// tolerate missing ones.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace llamatrain::obs {

inline constexpr std::string_view kEventMarker = "@event ";

// Now in UTC with milliseconds, "2026-12-01T16:59:12.345Z" (sorts as text in time order).
std::string utc_time_ms();

// `@event {"event": kind, "time": utc_time_ms(), ...fields}` on one line (non-finite numbers become null).
std::string event_line(const char* kind, nlohmann::ordered_json fields = nlohmann::ordered_json::object());
// The event of a line that holds one after any prefix (a time stamp, "[rank N] "), or the last
// complete one of a line that several ranks' output was interleaved into; nullopt for any other
// line, a JSON object without "event" included.
std::optional<nlohmann::json> parse_event_line(std::string_view line);

// train_log.txt's line for `text` written now: "[YYYY-MM-DD HH:MM:SS] text" (UTC).
std::string stamped_line(const std::string& text);
// The time of a stamped line, "YYYY-MM-DD HH:MM:SS" (sorts as text in time order); "" when the line
// has no stamp.
std::string line_time(std::string_view line);

}  // namespace llamatrain::obs
