// The run report: what one or more run folders recorded (metrics.jsonl, train_config.yaml, the event
// lines of train_log.txt, the checkpoints on disk) read into RunData, and one self-contained HTML page
// drawn from them: inline SVG charts with the runs overlaid (one colour each), a summary table, each
// run's events and its resolved configuration. No script, no external font, style sheet or image: the
// page opens anywhere, offline. A step logged twice (a resumed or rolled-back run appends to
// metrics.jsonl) counts once, with its last record. Every text that comes from a run is escaped.
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

struct ReportOptions {
  std::string title = "llamatrain runs";
  bool log_loss = false;  // the loss chart on a log axis (the gradient norm takes one when it spans 10x)
};

// The HTML page. Each curve is an SVG <path class="curve" data-run="LABEL" data-metric="KEY"
// data-points="N"> with one point per logged step (N of them; a curve of more than 2400 is drawn as
// its envelope, one column of points per pixel, and says how many it draws in data-drawn); a chart's
// legend names every run drawn on it.
std::string render_report(const std::vector<RunData>& runs, const ReportOptions& options = {});

// &, <, >, " and ' as HTML entities: safe in text and in quoted attributes.
std::string html_escape(const std::string& text);

// The run's colour in the charts and the summary ("#1f77b4"); index mod the palette's size.
std::string run_colour(size_t index);

}  // namespace llamatrain::obs
