// The verdict of a check, as `doctor` and `plan` both give it: PASS, WARN or FAIL (ordered: the worse
// verdict compares greater).
#pragma once

namespace llamatrain::train {

enum class CheckStatus { pass = 0, warn = 1, fail = 2 };

inline const char* check_status_name(CheckStatus s) {
  return s == CheckStatus::pass ? "PASS" : s == CheckStatus::warn ? "WARN" : "FAIL";
}

}  // namespace llamatrain::train
