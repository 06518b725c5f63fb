// Run folders read into RunData (obs/run_reader.h): metrics.jsonl line by line (a training record
// whose step is not past the previous one starts the history again from there: the records of the
// abandoned steps are dropped, so a resumed or rolled-back run plots one value per step), the event
// lines of train_log.txt (parsed by obs/log_lines.h), train_config.yaml as text, and the checkpoint
// folders on disk. Errors name the file and the fix.
#include "obs/run_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/file.h"
#include "obs/log_lines.h"

namespace llamatrain::obs {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char* const kRunHint = "hint: pass the folder a training run writes: exp_manager.explicit_log_dir, or "
                             "exp_manager.exp_dir/name/version (nemo_experiments/NAME/VERSION by default)";

std::vector<std::string> read_lines(const std::string& path, bool* ends_in_newline) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("report: cannot read {}\nhint: check the file's permissions", path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  *ends_in_newline = text.empty() || text.back() == '\n';
  std::vector<std::string> lines;
  std::istringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
  }
  return lines;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r") == std::string::npos; }

std::optional<int64_t> integer_field(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    const auto it = j.find(k);
    if (it != j.end() && it->is_number_integer()) return it->get<int64_t>();
    if (it != j.end() && it->is_number_float() && std::isfinite(it->get<double>())) return int64_t(it->get<double>());
  }
  return std::nullopt;
}

// Adds records to a run's series in the order written. A training record (one with "loss") whose
// step is not past the previous one restarts the history there: the later steps' values are dropped
// and a "restart" event is added.
class SeriesBuilder {
 public:
  explicit SeriesBuilder(RunData& run) : run_(run) {}
  void add(const nlohmann::json& r, int64_t step, const std::string& source) {
    if (r.contains("loss")) {
      if (step <= previous_) {
        for (auto& [key, curve] : run_.series) curve.erase(curve.lower_bound(step), curve.end());
        run_.events.push_back({"", "restart", step,
                               nlohmann::json{{"event", "restart"}, {"step", step}, {"after_step", previous_}},
                               source});
      }
      if (!train_steps_.insert(step).second) run_.repeated_steps++;
      previous_ = step;
    }
    for (const auto& [key, value] : r.items()) {
      if (key == "step" || key == "event") continue;
      if (value.is_number())
        run_.series[key][step] = value.get<double>();
      else if (value.is_null())
        run_.series[key][step] = kNaN;
    }
  }

 private:
  RunData& run_;
  int64_t previous_ = std::numeric_limits<int64_t>::min();
  std::set<int64_t> train_steps_;  // every step a training record has named
};

void read_metrics_file(RunData& run, const std::string& path) {
  bool ends_in_newline = true;
  const std::vector<std::string> lines = read_lines(path, &ends_in_newline);
  SeriesBuilder series(run);
  int64_t no_step = 0;
  for (size_t i = 0; i < lines.size(); i++) {
    const std::string& line = lines[i];
    if (blank(line)) continue;
    const size_t line_no = i + 1;
    nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!r.is_object()) {
      if (i + 1 == lines.size() && !ends_in_newline) {
        run.notes.push_back(
            fmt::format("{}:{}: an unfinished last line was left out (the run may be writing it)", path, line_no));
        continue;
      }
      fail("report: {}:{}: not a JSON object, got \"{}\"\nhint: each line of metrics.jsonl is one JSON object "
           "as the trainer writes it; remove or repair that line",
           path, line_no, line.substr(0, 80));
    }
    run.records++;
    const std::optional<int64_t> step = integer_field(r, {"step"});
    if (!step) {
      no_step++;
      continue;
    }
    if (const auto ev = r.find("event"); ev != r.end() && ev->is_string())
      run.events.push_back({"", ev->get<std::string>(), step, r, fmt::format("metrics.jsonl:{}", line_no)});
    else
      series.add(r, *step, fmt::format("metrics.jsonl:{}", line_no));
  }
  if (no_step > 0)
    run.notes.push_back(
        fmt::format("{}: {} record{} without an integer \"step\" left out", path, no_step, no_step == 1 ? "" : "s"));
}

void read_train_log(RunData& run, const std::string& path) {
  bool ends_in_newline = true;
  const std::vector<std::string> lines = read_lines(path, &ends_in_newline);
  int64_t bad = 0;
  std::vector<std::tuple<nlohmann::json, int64_t, std::string>> steps;  // the step and validation events
  for (size_t i = 0; i < lines.size(); i++) {
    const std::string time = line_time(lines[i]);
    if (!time.empty()) {  // the stamps sort as text
      if (run.first_time.empty() || time < run.first_time) run.first_time = time;
      if (time > run.last_time) run.last_time = time;
    }
    if (lines[i].find(kEventMarker) == std::string::npos) continue;
    const std::optional<nlohmann::json> parsed = parse_event_line(lines[i]);
    if (!parsed) {
      bad++;
      continue;
    }
    const nlohmann::json& e = *parsed;
    const auto kind = e.find("event");
    const std::string source = fmt::format("train_log.txt:{}", i + 1);
    // metrics.jsonl's records again: "step" is a curve, not a table row; "validation" is both (its
    // loss only: its batch count and time are no curves)
    const auto step = integer_field(e, {"step"});
    if (step && kind->get<std::string>() == "step") steps.emplace_back(e, *step, source);
    if (step && kind->get<std::string>() == "validation" && e.contains("val_loss")) {
      nlohmann::json curves;  // the loss and each source's figures ("val_loss/NAME", ...)
      for (const auto& [key, v] : e.items())
        if (key == "val_loss" || (key.starts_with("val_") && key.find('/') != std::string::npos)) curves[key] = v;
      steps.emplace_back(curves, *step, source);
    }
    if (kind->get<std::string>() == "step") continue;
    run.events.push_back(
        {time, kind->get<std::string>(), integer_field(e, {"step", "from_step", "at_step"}), e, source});
  }
  if (bad > 0)
    run.notes.push_back(fmt::format("{}: {} @event line{} that {} not one JSON object with an \"event\" left out", path,
                                    bad, bad == 1 ? "" : "s", bad == 1 ? "is" : "are"));
  // No training record in metrics.jsonl (missing, or a copy of the log alone): the step events draw the curves.
  if (!run.has_steps() && !steps.empty()) {
    SeriesBuilder series(run);
    for (const auto& [e, step, source] : steps) series.add(e, step, source);
    run.notes.push_back(fmt::format("the curves come from the step events of {} (metrics.jsonl has no training "
                                    "record)",
                                    path));
  }
}

// The first "seq_length: N" of the resolved config (model.data.seq_length), else encoder_seq_length.
int64_t config_seq_length(const std::string& config) {
  for (const char* key : {"seq_length:", "encoder_seq_length:"}) {
    std::istringstream ss(config);
    for (std::string line; std::getline(ss, line);) {
      const size_t start = line.find_first_not_of(' ');
      if (start == std::string::npos || line.compare(start, std::strlen(key), key) != 0) continue;
      try {
        return std::stoll(line.substr(start + std::strlen(key)));
      } catch (const std::exception&) {
        break;
      }
    }
  }
  return 0;
}

bool has_event(const RunData& run, std::initializer_list<const char*> kinds, std::optional<int64_t> step) {
  for (const auto& e : run.events)
    for (const char* k : kinds)
      if (e.kind == k && (!step || e.step == step)) return true;
  return false;
}

// Checkpoint folders of <dir>/checkpoints with their trainer_state.json, when the log names none.
void find_checkpoints(RunData& run) {
  if (has_event(run, {"checkpoint_saved"}, std::nullopt)) return;
  const fs::path dir = fs::path(run.dir) / "checkpoints";
  std::error_code ec;
  std::vector<int64_t> steps;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("step_") || !fs::exists(it->path() / "trainer_state.json")) continue;
    try {
      size_t pos = 0;
      const int64_t s = std::stoll(name.substr(5), &pos);
      if (pos == name.size() - 5) steps.push_back(s);
    } catch (const std::exception&) {
    }
  }
  std::sort(steps.begin(), steps.end());
  for (int64_t s : steps)
    run.events.push_back({"", "checkpoint", s, nlohmann::json{{"event", "checkpoint"}, {"step", s}},
                          fmt::format("checkpoints/step_{}", s)});
}

// Drops metrics.jsonl rollback records that the log also has as events, then orders the events by
// step (an event without one goes with the event before it from the same file).
void dedupe_and_sort_events(RunData& run) {
  std::vector<RunEvent> kept;
  for (const auto& e : run.events) {
    const bool from_metrics = e.source.starts_with("metrics.jsonl");
    bool twin = false;
    if (from_metrics)
      for (const auto& o : run.events)
        twin |= !o.source.starts_with("metrics.jsonl") && o.kind == e.kind && o.step == e.step;
    if (!twin) kept.push_back(e);
  }
  std::vector<std::pair<int64_t, size_t>> order;  // (step, position)
  int64_t last = 0;
  std::string last_file;
  for (size_t i = 0; i < kept.size(); i++) {
    const std::string file = kept[i].source.substr(0, kept[i].source.find(':'));
    if (file != last_file) last = 0, last_file = file;
    last = kept[i].step.value_or(last);
    order.emplace_back(last, i);
  }
  std::stable_sort(order.begin(), order.end());
  run.events.clear();
  for (const auto& [step, i] : order) run.events.push_back(std::move(kept[i]));
}

}  // namespace

// ---- RunData ----

bool RunData::has_steps() const {
  const auto it = series.find("loss");
  return it != series.end() && !it->second.empty();
}

int64_t RunData::last_step() const { return has_steps() ? series.at("loss").rbegin()->first : 0; }

double RunData::last(const std::string& key) const {
  const auto it = series.find(key);
  return it == series.end() || it->second.empty() ? kNaN : it->second.rbegin()->second;
}

double RunData::mean(const std::string& key) const {
  const auto it = series.find(key);
  if (it == series.end()) return kNaN;
  double sum = 0;
  int64_t n = 0;
  for (const auto& [step, v] : it->second)
    if (std::isfinite(v)) sum += v, n++;
  return n ? sum / double(n) : kNaN;
}

double RunData::max(const std::string& key) const {
  const auto it = series.find(key);
  double m = kNaN;
  if (it != series.end())
    for (const auto& [step, v] : it->second)
      if (std::isfinite(v) && !(v <= m)) m = v;
  return m;
}

double RunData::tokens() const {
  const double samples = last("consumed_samples");
  return seq_length > 0 && std::isfinite(samples) ? samples * double(seq_length) : kNaN;
}

double RunData::train_seconds() const {
  const auto it = series.find("step_time_s");
  if (it == series.end() || it->second.empty()) return kNaN;
  double total = 0;
  int64_t previous = 0;
  for (const auto& [step, v] : it->second) {
    if (std::isfinite(v)) total += v * double(std::max<int64_t>(1, step - previous));
    previous = step;
  }
  return total;
}

RunData read_run(const std::string& dir, const std::string& label) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("report: run folder {} does not exist\n{}", dir, kRunHint);
  if (!fs::is_directory(dir, ec))
    fail("report: {} is not a folder\n{} (the folder that holds metrics.jsonl, not the file)", dir, kRunHint);
  RunData run;
  run.dir = dir;
  run.label = label;
  if (run.label.empty()) {  // "runs/cpt/", "." and "../cpt" are named by the folder itself
    fs::path p = fs::absolute(dir, ec).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    run.label = p.filename().empty() ? dir : p.filename().string();
  }
  const std::string metrics = (fs::path(dir) / "metrics.jsonl").string();
  const std::string log = (fs::path(dir) / "train_log.txt").string();
  const std::string config = (fs::path(dir) / "train_config.yaml").string();
  const bool has_metrics = fs::is_regular_file(metrics, ec), has_log = fs::is_regular_file(log, ec);
  if (!has_metrics && !has_log)
    fail("report: {} not found, nor train_log.txt beside it: {} holds no training run\n{}", metrics, dir, kRunHint);
  if (has_metrics) read_metrics_file(run, metrics);
  if (has_log) read_train_log(run, log);
  if (run.records == 0 && !has_log)
    fail("report: {} is empty and {} has no train_log.txt: no run has logged anything there\n{}; a run logs its "
         "first step at step 1",
         metrics, dir, kRunHint);
  if (fs::is_regular_file(config, ec)) {
    run.config_text = read_small_file(config, size_t(64) << 20, "train_config.yaml");
    run.seq_length = config_seq_length(run.config_text);
  }
  for (const auto& e : run.events)
    if (e.kind == "start")
      if (const auto t = integer_field(e.fields, {"seq_length"})) run.seq_length = *t;
  find_checkpoints(run);
  dedupe_and_sort_events(run);
  if (!run.has_steps())
    run.notes.insert(run.notes.begin(),
                     fmt::format("no step logged yet: {}",
                                 has_metrics ? metrics + " has no training record" : metrics + " does not exist yet"));
  if (run.repeated_steps > 0)
    run.notes.push_back(fmt::format("{} training record{} repeated an earlier step (a resume or a rollback); each "
                                    "step shows its last value",
                                    run.repeated_steps, run.repeated_steps == 1 ? "" : "s"));
  return run;
}

void disambiguate_labels(std::vector<RunData>& runs) {
  auto duplicated = [&](const std::string& label) {
    return std::count_if(runs.begin(), runs.end(), [&](const RunData& r) { return r.label == label; }) > 1;
  };
  for (int depth = 2; depth <= 4; depth++) {
    std::vector<bool> dup;
    for (const auto& r : runs) dup.push_back(duplicated(r.label));
    for (size_t i = 0; i < runs.size(); i++) {
      if (!dup[i]) continue;
      std::error_code ec;
      const fs::path p = fs::absolute(fs::path(runs[i].dir), ec).lexically_normal();
      std::vector<std::string> parts;
      for (const auto& part : p)
        if (!part.empty() && part != "/") parts.push_back(part.string());
      std::string label;
      for (size_t k = parts.size() > size_t(depth) ? parts.size() - size_t(depth) : 0; k < parts.size(); k++)
        label += (label.empty() ? "" : "/") + parts[k];
      runs[i].label = label;
    }
  }
  std::vector<bool> dup;
  for (const auto& r : runs) dup.push_back(duplicated(r.label));
  for (size_t i = 0; i < runs.size(); i++)
    if (dup[i]) runs[i].label += fmt::format(" #{}", i + 1);
}

}  // namespace llamatrain::obs
