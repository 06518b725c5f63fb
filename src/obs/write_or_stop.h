// The failure policy of a run's log files (metrics.jsonl, the TensorBoard event file) in one place: a
// write that fails (a full disk) is reported once on stderr, the file is closed and nothing more is
// written to it, and training goes on, so that a long run is never killed by its logging.
#pragma once

#include <string>
#include <string_view>

namespace llamatrain::obs {

// Writes all of `bytes` to fd with write(2), again where a signal interrupted it. On a failure: error
// = "writing PATH failed: REASON", "warning: WHO: ERROR; WHAT stops here, training goes on" on
// stderr, fd closed and set to -1. Does nothing when fd is already -1.
void write_or_stop(int& fd, std::string& error, std::string_view bytes, const std::string& path, std::string_view who,
                   std::string_view what);

}  // namespace llamatrain::obs
