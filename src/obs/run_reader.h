// What a run's folder holds, as data: metrics.jsonl's curves (a step logged twice, by a resumed or
// rolled-back run, counts once with its last record), the event lines of train_log.txt, rollback
// records, checkpoint folders on disk, and train_config.yaml as text. Nothing here draws or formats:
// obs/report.h makes the page. Unknown event kinds and fields are kept as they are; a run that has
// started but logged no step reads fine.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace llamatrain::obs {

// One event of a run: an `@event {...}` line of train_log.txt (docs/training.md lists the kinds; the
// per-step "step" events are curves, not events: they draw the run when metrics.jsonl has no
// training record), a rollback record of metrics.jsonl, a "restart" where metrics.jsonl's steps go
// back (a resume), or a checkpoint folder found on disk when the log has no checkpoint events.
// Unknown kinds and fields are kept as they are.
struct RunEvent {
  std::string time;             // the log line's UTC time ("2026-12-01 16:30:00"); "" when unknown
  std::string kind;             // "checkpoint_saved", "rollback", "validation", ...
  std::optional<int64_t> step;  // the step it happened at, when it names one
  nlohmann::json fields;        // the whole JSON object
  std::string source;           // "train_log.txt:12", "metrics.jsonl:40", "checkpoints/step_100"
};

struct RunData {
  std::string dir;    // as given
  std::string label;  // the legend's name: the folder's name unless given
  // metrics.jsonl key -> step -> value of the step's last record holding that key (NaN for null).
  std::map<std::string, std::map<int64_t, double>> series;
  int64_t records = 0;         // metrics.jsonl lines read
  int64_t repeated_steps = 0;  // training records of a step already logged (resumed or rolled back)
  std::string config_text;     // train_config.yaml; "" when the folder has none
  int64_t seq_length = 0;      // from the config (tokens per sample); 0 when unknown
  std::vector<RunEvent> events;
  std::string first_time, last_time;  // earliest and latest time stamp of train_log.txt ("" when none)
  std::vector<std::string> notes;     // what the page says about the run (no steps yet, a line skipped)

  bool has_steps() const;
  // The step's value of `key`, the last logged step, and derived figures; NaN / 0 when not recorded.
  int64_t last_step() const;
  double last(const std::string& key) const;
  double mean(const std::string& key) const;  // over the logged steps, finite values only
  double max(const std::string& key) const;
  double tokens() const;         // consumed samples at the last step x seq_length
  double train_seconds() const;  // sum of step_time_s over the steps each record stands for
};

// Reads a run folder. Throws Error naming the file and the fix for a folder that is missing or holds
// no run (neither metrics.jsonl nor train_log.txt), an empty metrics.jsonl of a folder that has no
// train_log.txt, and a metrics.jsonl line that is not a JSON object (except an unfinished last line,
// which a live run may be writing: skipped, with a note). A run that has started but logged no step
// yet reads fine: has_steps() is false and a note says so. label "" takes the folder's name.
RunData read_run(const std::string& dir, const std::string& label = "");

// Runs named alike (two runs/*/version_0) are named by more of their path ("a/version_0"), then by
// their position ("x #2"), so that each legend entry is one run.
void disambiguate_labels(std::vector<RunData>& runs);

}  // namespace llamatrain::obs
