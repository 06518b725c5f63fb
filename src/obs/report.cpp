// Run folders read into RunData, and the HTML page drawn from them (obs/report.h). Reading: metrics.jsonl
// line by line (a training record whose step is not past the previous one starts the history again
// from there: the records of the abandoned steps are dropped, so a resumed or rolled-back run plots one
// value per step), the event lines of train_log.txt, train_config.yaml as text. Drawing: one SVG per
// metric in a fixed coordinate space (viewBox), linear or log axis with ticks at 1/2/5 x 10^k.
#include "obs/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/file.h"
#include "obs/log_lines.h"
#include "obs/progress.h"

namespace llamatrain::obs {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char* const kRunHint =
    "hint: pass the folder a training run writes: exp_manager.explicit_log_dir, or "
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
      fail(
          "report: {}:{}: not a JSON object, got \"{}\"\nhint: each line of metrics.jsonl is one JSON object "
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
    run.notes.push_back(
        fmt::format("the curves come from the step events of {} (metrics.jsonl has no training "
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
    fail(
        "report: {} is empty and {} has no train_log.txt: no run has logged anything there\n{}; a run logs its "
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
    run.notes.push_back(
        fmt::format("{} training record{} repeated an earlier step (a resume or a rollback); each "
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

// ---- HTML ----

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string run_colour(size_t index) {
  static const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                         "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  return kPalette[index % (sizeof kPalette / sizeof kPalette[0])];
}

namespace {

enum class Unit { kPlain, kRate, kPercent, kBytes, kSeconds };

struct ChartSpec {
  std::string key, title;
  Unit unit = Unit::kPlain;
  bool log = false;  // log axis if every value is positive and they span 10x or more
};

std::string format_value(double v, Unit unit) {
  if (!std::isfinite(v)) return "&#8212;";
  switch (unit) {
    case Unit::kRate:
      return format_rate(std::fabs(v));
    case Unit::kPercent:
      return fmt::format("{:.1f}%", 100 * v);
    case Unit::kBytes:
      return format_bytes(v);
    case Unit::kSeconds:
      return v < 1 ? fmt::format("{:.3g}s", v) : format_duration(v);
    case Unit::kPlain:
      break;
  }
  if (v != 0 && (std::fabs(v) < 1e-2 || std::fabs(v) >= 1e6)) return fmt::format("{:.2e}", v);
  return fmt::format("{:.4g}", v);
}

// A tick label: as few digits as the tick spacing needs.
std::string tick_label(double v, double spacing, Unit unit, bool log) {
  if (v == 0) return "0";
  if (unit == Unit::kBytes) return format_bytes(v);
  if (unit == Unit::kRate) return format_rate(v);
  if (unit == Unit::kPercent) v *= 100, spacing *= 100;
  std::string s;
  if (v == 0)
    s = "0";
  else if (log || std::fabs(v) < 1e-3 || std::fabs(v) >= 1e6)
    s = fmt::format("{:g}", v);
  else
    s = fmt::format("{:.{}f}", v, std::max(0, int(-std::floor(std::log10(spacing) + 1e-9))));
  return unit == Unit::kPercent ? s + "%" : unit == Unit::kSeconds ? s + "s" : s;
}

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double unit(double v) const {
    return log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
  }
};

double nice_spacing(double span, int target) {
  const double raw = span / target, mag = std::pow(10.0, std::floor(std::log10(raw))), norm = raw / mag;
  return mag * (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10);
}

std::vector<double> linear_ticks(double lo, double hi, int target, double* spacing) {
  *spacing = nice_spacing(hi - lo, target);
  std::vector<double> ticks;
  const double first = std::ceil(lo / *spacing - 1e-9);
  for (int i = 0; first + i <= std::floor(hi / *spacing + 1e-9); i++) {
    const double v = (first + i) * *spacing;
    ticks.push_back(std::fabs(v) < *spacing * 1e-9 ? 0.0 : v);
  }
  return ticks;
}

std::vector<double> log_ticks(double lo, double hi) {
  for (const std::vector<double>& mantissas : {std::vector<double>{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    std::vector<double> ticks;
    for (int e = int(std::floor(std::log10(lo))); e <= int(std::ceil(std::log10(hi))); e++)
      for (double m : mantissas) {
        const double v = m * std::pow(10.0, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push_back(v);
      }
    if (ticks.size() >= 3 || mantissas.size() == 9) return ticks;
  }
  return {};
}

// Layout of one chart in SVG units.
constexpr double kWidth = 640, kHeight = 330, kLeft = 72, kRight = 18, kBottom = 46;
constexpr int64_t kMaxDrawn = 2400;  // points of a curve drawn as they are; more are thinned by envelope()

// Per column (column(step), non-decreasing along pts): the first, lowest, highest and last finite point
// in step order; gaps (NaN) are kept.
template <typename Column>
std::vector<std::pair<double, double>> envelope(const std::vector<std::pair<double, double>>& pts, Column column) {
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0; i < pts.size();) {
    if (!std::isfinite(pts[i].second)) {
      out.push_back(pts[i++]);
      continue;
    }
    size_t j = i, lo = i, hi = i;
    const int64_t col = column(pts[i].first);
    for (; j < pts.size() && std::isfinite(pts[j].second) && column(pts[j].first) == col; j++) {
      if (pts[j].second < pts[lo].second) lo = j;
      if (pts[j].second > pts[hi].second) hi = j;
    }
    std::set<size_t> keep = {i, lo, hi, j - 1};
    for (size_t k : keep) out.push_back(pts[k]);
    i = j;
  }
  return out;
}

struct Curve {
  size_t run;
  std::string key;
  const std::map<int64_t, double>* points;
  bool dashed;
};

void svg_text(std::string& out, double x, double y, const std::string& anchor, const std::string& cls,
              const std::string& escaped) {
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" class=\"{}\">{}</text>", x, y, anchor, cls,
                     escaped);
}

std::string truncate_label(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 1) + "~"; }

// One chart: every run's curve(s) of spec.key (and of val_loss on the loss chart), ticks, a legend
// that names each run drawn, and on the loss chart each run's event markers.
std::string render_chart(const ChartSpec& spec, const std::vector<RunData>& runs, const ReportOptions& o) {
  const bool loss_chart = spec.key == "loss";
  std::vector<Curve> curves;
  std::vector<size_t> drawn;
  for (size_t r = 0; r < runs.size(); r++) {
    bool any = false;
    for (const std::string& key : loss_chart ? std::vector<std::string>{"loss", "val_loss"} : std::vector{spec.key}) {
      const auto it = runs[r].series.find(key);
      if (it == runs[r].series.end()) continue;
      curves.push_back({r, key, &it->second, key == "val_loss"});
      any = true;
    }
    if (any) drawn.push_back(r);
  }
  // Ranges over every finite value (positive ones on a log axis).
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY, ypos = INFINITY;
  for (const auto& c : curves)
    for (const auto& [step, v] : *c.points) {
      if (!std::isfinite(v)) continue;
      xmin = std::min(xmin, double(step)), xmax = std::max(xmax, double(step));
      ymin = std::min(ymin, v), ymax = std::max(ymax, v);
      if (v > 0) ypos = std::min(ypos, v);
    }
  if (!std::isfinite(xmin)) return "";
  Axis x{xmin, xmax, false}, y{ymin, ymax, false};
  if (x.hi == x.lo) x.lo -= 1, x.hi += 1;
  y.log = (spec.log || (loss_chart && o.log_loss)) && ymin > 0 && (ymax / ymin >= 10 || (loss_chart && o.log_loss));
  if (y.log) {
    y.lo = ypos / 1.15, y.hi = ymax * 1.15;
  } else {
    // A flat curve (memory, a constant lr) gets a span of 4% of its value, so the ticks read apart.
    const double floor_span = 0.04 * std::max(std::fabs(ymin), std::fabs(ymax));
    const double pad = ymax - ymin >= floor_span && ymax > ymin ? 0.06 * (ymax - ymin)
                       : floor_span > 0                         ? (floor_span - (ymax - ymin)) / 2
                                                                : 1.0;
    y.lo = ymin - pad, y.hi = ymax + pad;
    if (ymin >= 0 && y.lo < 0) y.lo = 0;
  }

  // Legend rows above the plot.
  struct Entry {
    size_t run;
    double x, y;
  };
  std::vector<Entry> entries;
  double lx = kLeft, ly = 44;
  for (size_t r : drawn) {
    const double w = 30 + 6.6 * double(truncate_label(runs[r].label, 30).size());
    if (lx + w > kWidth - kRight && lx > kLeft) lx = kLeft, ly += 17;
    entries.push_back({r, lx, ly});
    lx += w + 12;
  }
  const double top = ly + 14, plot_w = kWidth - kLeft - kRight, plot_h = kHeight - top - kBottom;
  auto px = [&](double step) { return kLeft + x.unit(step) * plot_w; };
  auto py = [&](double v) { return top + (1 - y.unit(v)) * plot_h; };

  std::string out = fmt::format(
      "<figure class=\"chart\" data-metric=\"{0}\"><svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {1} {2}\" "
      "role=\"img\" aria-label=\"{3}\">",
      html_escape(spec.key), kWidth, kHeight, html_escape(spec.title));
  svg_text(out, kLeft, 22, "start", "title", html_escape(spec.title) + (y.log ? " (log scale)" : ""));
  out += "<g class=\"legend\">";
  for (const auto& e : entries)
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"3\"/><text x=\"{4:.1f}\" y=\"{5:.1f}\" class=\"legend-label\">{6}</text>",
        e.x, e.y - 4, e.x + 22, run_colour(e.run), e.x + 27, e.y, html_escape(truncate_label(runs[e.run].label, 30)));
  out += "</g>";
  // Grid, ticks and labels.
  out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" class=\"plot\"/>", kLeft, top,
                     plot_w, plot_h);
  double yspacing = 0, xspacing = 0;
  const std::vector<double> yt = y.log ? log_ticks(y.lo, y.hi) : linear_ticks(y.lo, y.hi, 5, &yspacing);
  for (double v : yt) {
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>", kLeft, py(v),
                       kLeft + plot_w, py(v));
    svg_text(out, kLeft - 6, py(v) + 4, "end", "tick", html_escape(tick_label(v, yspacing, spec.unit, y.log)));
  }
  for (double v : linear_ticks(x.lo, x.hi, 6, &xspacing)) {
    if (xspacing < 1 && v != std::floor(v)) continue;
    out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/>", px(v), top,
                       top + plot_h);
    svg_text(out, px(v), top + plot_h + 16, "middle", "tick", format_count(v));
  }
  svg_text(out, kLeft + plot_w / 2, kHeight - 8, "middle", "axis-label", "step");

  // Curves: one point per logged step, a gap where a value is not finite (or not positive on a log
  // axis). A curve of more points than the plot has room for keeps, per pixel column, the first, lowest,
  // highest and last point: the same envelope, a page of bounded size.
  for (const auto& c : curves) {
    std::vector<std::pair<double, double>> pts;  // (step, value); NaN value: a gap
    for (const auto& [step, v] : *c.points)
      pts.emplace_back(double(step), std::isfinite(v) && !(y.log && v <= 0) ? v : kNaN);
    const int64_t n = std::count_if(pts.begin(), pts.end(), [](const auto& p) { return std::isfinite(p.second); });
    if (n == 0) continue;
    if (n > kMaxDrawn) pts = envelope(pts, [&](double step) { return int64_t(px(step) - kLeft); });
    std::string d;
    int64_t drawn = 0;
    bool pen_down = false;
    for (const auto& [step, v] : pts) {
      if (!std::isfinite(v)) {
        pen_down = false;
        continue;
      }
      d += fmt::format("{}{:.1f},{:.1f} ", pen_down ? 'L' : 'M', px(step), py(v));
      pen_down = true;
      drawn++;
    }
    d.pop_back();
    out += fmt::format(
        "<path class=\"curve\" data-run=\"{}\" data-metric=\"{}\" data-points=\"{}\" d=\"{}\"{} "
        "stroke=\"{}\"{}/>",
        html_escape(runs[c.run].label), html_escape(c.key), n, d,
        drawn == n ? "" : fmt::format(" data-drawn=\"{}\"", drawn), run_colour(c.run),
        c.dashed ? " stroke-dasharray=\"6 4\"" : "");
    if (n == 1 || c.dashed)
      for (const auto& [step, v] : *c.points)
        if (std::isfinite(v) && !(y.log && v <= 0))
          out += fmt::format(
              "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\" class=\"point\"><title>{} "
              "step {}: {} {}</title></circle>",
              px(double(step)), py(v), run_colour(c.run), html_escape(runs[c.run].label), step, html_escape(c.key),
              format_value(v, spec.unit));
  }

  // Event markers on the loss chart: triangles for checkpoints, dashed lines for what changes the
  // course of a run (rollback, resume, signal, error), crosses for skipped steps.
  if (loss_chart) {
    for (size_t r : drawn)
      for (const auto& e : runs[r].events) {
        if (!e.step || double(*e.step) < x.lo || double(*e.step) > x.hi) continue;
        const double ex = px(double(*e.step)), base = top + plot_h;
        const std::string tip =
            fmt::format("<title>{}: {} at step {}</title>", html_escape(runs[r].label), html_escape(e.kind), *e.step);
        const std::string colour = run_colour(r);
        if (e.kind.starts_with("checkpoint"))
          out += fmt::format(
              "<path class=\"marker\" data-kind=\"{}\" d=\"M{:.1f},{:.1f} l-5,-9 h10 z\" fill=\"{}\">{}"
              "</path>",
              html_escape(e.kind), ex, base - 2, colour, tip);
        else if (e.kind == "skip")
          out += fmt::format(
              "<path class=\"marker\" data-kind=\"skip\" d=\"M{0:.1f},{1:.1f} l8,8 m0,-8 l-8,8\" "
              "stroke=\"{2}\" stroke-width=\"2\">{3}</path>",
              ex - 4, base - 12, colour, tip);
        else if (e.kind == "rollback" || e.kind == "restart" || e.kind == "signal" || e.kind == "error" ||
                 (e.kind == "start" && e.fields.contains("resumed_from") && !e.fields["resumed_from"].is_null() &&
                  e.fields["resumed_from"] != ""))
          out += fmt::format(
              "<line class=\"marker\" data-kind=\"{}\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" "
              "y2=\"{:.1f}\" stroke=\"{}\" stroke-dasharray=\"3 3\" stroke-width=\"1.5\">{}</line>",
              html_escape(e.kind), ex, top, ex, base, colour, tip);
        else if (e.kind == "validation" && !runs[r].series.contains("val_loss"))
          out += fmt::format(
              "<circle class=\"marker\" data-kind=\"validation\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" "
              "fill=\"none\" stroke=\"{}\">{}</circle>",
              ex, base - 6, colour, tip);
      }
  }
  out += "</svg>";
  if (loss_chart)
    out +=
        "<figcaption>solid: train loss; dashed with dots: validation loss; &#9660; checkpoint saved or loaded; "
        "&#215; skipped step; dotted line: rollback, restart (a resume: the steps after it were logged again), "
        "signal or error (hover for details)</figcaption>";
  out += "</figure>\n";
  return out;
}

// A chart's title from its key: validation figures in words, per source "..., source NAME".
std::string chart_title(const std::string& key) {
  static const std::map<std::string, std::string> words = {{"val_loss", "validation loss"},
                                                           {"val_bits_per_byte", "validation bits per byte"},
                                                           {"val_bits_per_char", "validation bits per character"}};
  const size_t slash = key.find('/');
  const auto it = words.find(key.substr(0, slash));
  if (it == words.end()) return key;
  return slash == std::string::npos ? it->second : fmt::format("{}, source {}", it->second, key.substr(slash + 1));
}

std::vector<ChartSpec> chart_specs(const std::vector<RunData>& runs) {
  std::vector<ChartSpec> specs = {
      {"loss", "loss", Unit::kPlain, false},
      {"lr", "learning rate", Unit::kPlain, false},
      {"grad_norm", "gradient norm (before clipping)", Unit::kPlain, true},
      {"tokens_per_s", "tokens/s", Unit::kRate, false},
      {"mfu", "MFU (model FLOPs / measured matmul rate)", Unit::kPercent, false},
      {"step_time_s", "step time", Unit::kSeconds, false},
      {"peak_rss_bytes", "peak memory (RSS, rank 0)", Unit::kBytes, false},
      {"comm_time_s", "time blocked in communication per step", Unit::kSeconds, false},
  };
  // Keys nobody draws: the validation loss is on the loss chart; the rest are counters or derived
  // (each source's too: "val_tokens/NAME").
  std::set<std::string> known = {"step",       "max_steps", "val_loss",  "val_ppl", "consumed_samples",
                                 "val_tokens", "val_bytes", "val_chars"};
  const std::set<std::string> counters = {"val_ppl", "val_tokens", "val_bytes", "val_chars"};
  for (const auto& s : specs) known.insert(s.key);
  std::set<std::string> extra;
  for (const auto& run : runs)
    for (const auto& [key, curve] : run.series)
      if (!known.contains(key) && !counters.contains(key.substr(0, key.find('/')))) extra.insert(key);
  for (const auto& key : extra) specs.push_back({key, chart_title(key), Unit::kPlain, false});
  // comm_time_s is 0 on one process: no chart unless some run spent time there.
  std::erase_if(specs, [&](const ChartSpec& s) {
    if (s.key != "comm_time_s") return false;
    for (const auto& run : runs)
      if (run.max("comm_time_s") > 0) return false;
    return true;
  });
  return specs;
}

std::string swatch(size_t r) {
  return fmt::format("<span class=\"swatch\" style=\"background:{}\"></span>", run_colour(r));
}

std::string summary_table(const std::vector<RunData>& runs) {
  std::string out =
      "<table class=\"summary\"><thead><tr><th>run</th><th>folder</th>"
      "<th title=\"last step logged (and how many steps were logged)\">steps</th><th>last loss</th>"
      "<th title=\"lowest validation loss and its step\">best val loss</th>"
      "<th title=\"consumed samples at the last step x seq_length\">tokens</th>"
      "<th title=\"mean over the logged steps\">mean tokens/s</th><th title=\"mean over the logged steps\">mean MFU"
      "</th><th title=\"largest peak RSS of rank 0\">peak memory</th>"
      "<th title=\"sum of the step times\">train time</th>"
      "<th title=\"first to last line of train_log.txt (stops and restarts included)\">wall time</th>"
      "<th>events</th></tr></thead><tbody>\n";
  for (size_t r = 0; r < runs.size(); r++) {
    const RunData& run = runs[r];
    out += fmt::format("<tr><td class=\"name\">{}{}</td><td class=\"path\">{}</td>", swatch(r), html_escape(run.label),
                       html_escape(run.dir));
    if (!run.has_steps()) {
      out += "<td colspan=\"9\" class=\"none\">no step logged yet</td>";
    } else {
      const auto& loss = run.series.at("loss");
      std::string best = "&#8212;";
      if (const auto it = run.series.find("val_loss"); it != run.series.end()) {
        double b = INFINITY;
        int64_t at = 0;
        for (const auto& [step, v] : it->second)
          if (std::isfinite(v) && v < b) b = v, at = step;
        if (std::isfinite(b)) best = fmt::format("{:.4f} (step {})", b, at);
      }
      std::string wall = "&#8212;";
      std::tm a{}, b{};
      if (!run.first_time.empty() && strptime(run.first_time.c_str(), "%Y-%m-%d %H:%M:%S", &a) &&
          strptime(run.last_time.c_str(), "%Y-%m-%d %H:%M:%S", &b))
        wall = format_duration(std::difftime(timegm(&b), timegm(&a)));
      out += fmt::format(
          "<td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
          run.last_step(), int64_t(loss.size()) == run.last_step() ? "" : fmt::format(" ({} logged)", loss.size()),
          format_value(run.last("loss"), Unit::kPlain), best,
          std::isfinite(run.tokens()) ? format_count(run.tokens()) : "&#8212;",
          format_value(run.mean("tokens_per_s"), Unit::kRate), format_value(run.mean("mfu"), Unit::kPercent),
          format_value(run.max("peak_rss_bytes"), Unit::kBytes), format_value(run.train_seconds(), Unit::kSeconds),
          wall);
    }
    out += fmt::format("<td>{}</td></tr>\n", run.events.size());
  }
  return out + "</tbody></table>\n";
}

// The fields of an event other than its kind, step and time, as "key=value" pairs.
std::string event_details(const RunEvent& e) {
  std::string out;
  for (const auto& [key, value] : e.fields.items()) {
    if (key == "event" || key == "step" || key == "time") continue;
    if (!out.empty()) out += "  ";
    out += key + "=" +
           (value.is_string() ? value.get<std::string>()
                              : value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return out;
}

std::string run_section(const RunData& run, size_t r) {
  std::string out = fmt::format("<section class=\"run\"><h2>{}{}</h2><p class=\"path\">{}</p>\n", swatch(r),
                                html_escape(run.label), html_escape(fs::absolute(run.dir).string()));
  if (!run.notes.empty()) {
    out += "<ul class=\"notes\">";
    for (const auto& n : run.notes) out += "<li>" + html_escape(n) + "</li>";
    out += "</ul>\n";
  }
  if (run.events.empty()) {
    out +=
        "<p class=\"none\">No events recorded (no <code>@event</code> lines in train_log.txt, no rollback, no "
        "checkpoint folder).</p>\n";
  } else {
    out += fmt::format(
        "<details{}><summary>events ({})</summary><table class=\"events\"><thead><tr><th>time (UTC)"
        "</th><th>step</th><th>event</th><th>details</th><th>from</th></tr></thead><tbody>\n",
        run.events.size() <= 40 ? " open" : "", run.events.size());
    for (const auto& e : run.events)
      out += fmt::format(
          "<tr class=\"event-{}\"><td>{}</td><td>{}</td><td>{}</td><td class=\"details\">{}</td>"
          "<td class=\"path\">{}</td></tr>\n",
          html_escape(e.kind), html_escape(e.time), e.step ? std::to_string(*e.step) : "", html_escape(e.kind),
          html_escape(event_details(e)), html_escape(e.source));
    out += "</tbody></table></details>\n";
  }
  if (run.config_text.empty())
    out += "<p class=\"none\">No train_config.yaml in this folder.</p>\n";
  else
    out += "<details class=\"config\"><summary>configuration (train_config.yaml)</summary><pre>" +
           html_escape(run.config_text) + "</pre></details>\n";
  return out + "</section>\n";
}

const char* const kStyle = R"(
body{font-family:"DejaVu Sans",system-ui,sans-serif;margin:24px auto;max-width:1340px;padding:0 16px;
color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:22px 0 4px} .sub{color:#666;margin:0 0 16px;font-size:13px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4} .summary td,.summary th{white-space:nowrap}
.path{color:#555;font-family:"DejaVu Sans Mono",monospace;font-size:12px;word-break:break-all;white-space:normal}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.none{color:#888;font-style:italic}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));gap:14px;margin-top:16px}
.chart{margin:0;border:1px solid #e2e2e2;border-radius:4px;padding:4px}
.chart svg{width:100%;height:auto;display:block}
figcaption{font-size:12px;color:#666;padding:0 8px 4px}
svg .title{font-size:15px;font-weight:bold;fill:#222} svg .tick{font-size:11px;fill:#555}
svg .axis-label{font-size:12px;fill:#444} svg .legend-label{font-size:12px;fill:#222}
svg .plot{fill:none;stroke:#bbb} svg .grid{stroke:#ececec}
svg .curve{fill:none;stroke-width:2;stroke-linejoin:round}
pre{background:#f7f7f7;border:1px solid #e2e2e2;padding:8px;font-size:12px;overflow:auto;max-height:480px}
.details{font-family:"DejaVu Sans Mono",monospace;font-size:12px;word-break:break-all}
.events td:first-child,.events td:last-child{white-space:nowrap;word-break:normal}
.event-error td,.event-rollback td{background:#fff1f0} summary{cursor:pointer;font-size:14px;margin:6px 0}
)";

}  // namespace

std::string render_report(const std::vector<RunData>& runs, const ReportOptions& o) {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  int64_t steps = 0;
  for (const auto& run : runs) steps += run.has_steps() ? int64_t(run.series.at("loss").size()) : 0;
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" +
                    html_escape(o.title) + "</title>\n<style>" + kStyle + "</style></head>\n<body>\n<h1>" +
                    html_escape(o.title) + "</h1>\n";
  out += fmt::format("<p class=\"sub\">{} run{}, {} logged steps; written by llamatrain report at {}</p>\n",
                     runs.size(), runs.size() == 1 ? "" : "s", steps, stamp);
  out += summary_table(runs);
  std::string charts;
  for (const auto& spec : chart_specs(runs)) charts += render_chart(spec, runs, o);
  if (charts.empty())
    out += "<p class=\"none\">No run has logged a step yet: there is nothing to draw.</p>\n";
  else
    out += "<div class=\"charts\">\n" + charts + "</div>\n";
  for (size_t r = 0; r < runs.size(); r++) out += run_section(runs[r], r);
  return out + "</body></html>\n";
}

}  // namespace llamatrain::obs
