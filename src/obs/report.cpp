// The run report's page (obs/report.h): a summary table of the runs, one chart per metric drawn by
// obs/svg_chart.h (the loss chart also has the validation loss and each run's events as markers), and
// each run's events and configuration. Which metrics get a chart, which events a marker and how the
// page looks are decided here; reading a run is obs/run_reader.h's, drawing a chart obs/svg_chart.h's.
#include "obs/report.h"

#include <fmt/format.h>

#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "obs/progress.h"
#include "obs/svg_chart.h"

namespace llamatrain::obs {

namespace fs = std::filesystem;

std::string run_colour(size_t index) {
  static const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                         "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  return kPalette[index % (sizeof kPalette / sizeof kPalette[0])];
}

namespace {

struct ChartSpec {
  std::string key, title;
  Unit unit = Unit::kPlain;
  bool log = false;  // log axis if every value is positive and they span 10x or more
};

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
  std::set<std::string> known = {"step",       "max_steps", "val_loss", "val_ppl", "consumed_samples",
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

// The marker of an event on the loss chart: triangles for checkpoints, dashed lines for what changes
// the course of a run (rollback, resume, signal, error), crosses for skipped steps, rings for
// validations when the run has no validation curve; none for the other kinds.
std::optional<MarkerShape> marker_shape(const RunEvent& e, const RunData& run) {
  if (e.kind.starts_with("checkpoint")) return MarkerShape::kTriangle;
  if (e.kind == "skip") return MarkerShape::kCross;
  const bool resumed = e.kind == "start" && e.fields.contains("resumed_from") && !e.fields["resumed_from"].is_null() &&
                       e.fields["resumed_from"] != "";
  if (e.kind == "rollback" || e.kind == "restart" || e.kind == "signal" || e.kind == "error" || resumed)
    return MarkerShape::kDashedLine;
  if (e.kind == "validation" && !run.series.contains("val_loss")) return MarkerShape::kRing;
  return std::nullopt;
}

// The marks of run r's events that have a step and a marker shape, hover text "RUN: KIND at step N".
void add_event_markers(std::vector<ChartMarker>& markers, const RunData& run, size_t r) {
  for (const auto& e : run.events)
    if (const auto shape = marker_shape(e, run); e.step && shape)
      markers.push_back(
          {e.kind, *e.step, *shape, run_colour(r), fmt::format("{}: {} at step {}", run.label, e.kind, *e.step)});
}

const char* const kLossCaption =
    "solid: train loss; dashed with dots: validation loss; &#9660; checkpoint saved or loaded; "
    "&#215; skipped step; dotted line: rollback, restart (a resume: the steps after it were logged again), "
    "signal or error (hover for details)";

// The chart of spec.key: every run's curve of it (and of val_loss, dashed, on the loss chart), a legend
// entry for each run drawn, and on the loss chart each drawn run's event markers.
Chart chart_of(const ChartSpec& spec, const std::vector<RunData>& runs, const ReportOptions& o) {
  const bool loss_chart = spec.key == "loss";
  Chart chart;
  chart.metric = spec.key, chart.title = spec.title, chart.unit = spec.unit;
  chart.log = loss_chart && o.log_loss ? LogAxis::kAlways : spec.log ? LogAxis::kWhenSpans10x : LogAxis::kNever;
  const std::vector<std::string> keys =
      loss_chart ? std::vector<std::string>{"loss", "val_loss"} : std::vector{spec.key};
  for (size_t r = 0; r < runs.size(); r++) {
    const size_t before = chart.curves.size();
    for (const std::string& key : keys)
      if (const auto it = runs[r].series.find(key); it != runs[r].series.end())
        chart.curves.push_back({runs[r].label, key, run_colour(r), &it->second, key == "val_loss"});
    if (chart.curves.size() == before) continue;
    chart.legend.push_back({runs[r].label, run_colour(r)});
    if (loss_chart) add_event_markers(chart.markers, runs[r], r);
  }
  if (loss_chart) chart.caption_html = kLossCaption;
  return chart;
}

std::string swatch(size_t r) {
  return fmt::format("<span class=\"swatch\" style=\"background:{}\"></span>", run_colour(r));
}

// The lowest finite validation loss and its step ("2.3100 (step 40)"); a dash without one.
std::string best_val_loss(const RunData& run) {
  const auto it = run.series.find("val_loss");
  if (it == run.series.end()) return "&#8212;";
  double best = INFINITY;
  int64_t at = 0;
  for (const auto& [step, v] : it->second)
    if (std::isfinite(v) && v < best) best = v, at = step;
  return std::isfinite(best) ? fmt::format("{:.4f} (step {})", best, at) : "&#8212;";
}

// First to last time stamp of train_log.txt; a dash without them.
std::string wall_time(const RunData& run) {
  std::tm a{}, b{};
  if (!run.first_time.empty() && strptime(run.first_time.c_str(), "%Y-%m-%d %H:%M:%S", &a) &&
      strptime(run.last_time.c_str(), "%Y-%m-%d %H:%M:%S", &b))
    return format_duration(std::difftime(timegm(&b), timegm(&a)));
  return "&#8212;";
}

// The summary's cells from "steps" to "wall time" of a run that has logged a step.
std::string summary_figures(const RunData& run) {
  const auto& loss = run.series.at("loss");
  return fmt::format(
      "<td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
      run.last_step(), int64_t(loss.size()) == run.last_step() ? "" : fmt::format(" ({} logged)", loss.size()),
      format_value(run.last("loss"), Unit::kPlain), best_val_loss(run),
      std::isfinite(run.tokens()) ? format_count(run.tokens()) : "&#8212;",
      format_value(run.mean("tokens_per_s"), Unit::kRate), format_value(run.mean("mfu"), Unit::kPercent),
      format_value(run.max("peak_rss_bytes"), Unit::kBytes), format_value(run.train_seconds(), Unit::kSeconds),
      wall_time(run));
}

// One row per run, in a box that scrolls sideways when the table is wider than the page (its cells do
// not wrap, so that each run reads on one line; the folder's path wraps).
std::string summary_table(const std::vector<RunData>& runs) {
  std::string out =
      "<div class=\"summary-box\"><table class=\"summary\"><thead><tr><th>run</th><th>folder</th>"
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
    out += run.has_steps() ? summary_figures(run) : "<td colspan=\"9\" class=\"none\">no step logged yet</td>";
    out += fmt::format("<td>{}</td></tr>\n", run.events.size());
  }
  return out + "</tbody></table></div>\n";
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

std::string events_table(const RunData& run) {
  if (run.events.empty())
    return "<p class=\"none\">No events recorded (no <code>@event</code> lines in train_log.txt, no rollback, no "
           "checkpoint folder).</p>\n";
  std::string out =
      fmt::format("<details{}><summary>events ({})</summary><table class=\"events\"><thead><tr><th>time (UTC)"
                  "</th><th>step</th><th>event</th><th>details</th><th>from</th></tr></thead><tbody>\n",
                  run.events.size() <= 40 ? " open" : "", run.events.size());
  for (const auto& e : run.events)
    out += fmt::format("<tr class=\"event-{}\"><td>{}</td><td>{}</td><td>{}</td><td class=\"details\">{}</td>"
                       "<td class=\"path\">{}</td></tr>\n",
                       html_escape(e.kind), html_escape(e.time), e.step ? std::to_string(*e.step) : "",
                       html_escape(e.kind), html_escape(event_details(e)), html_escape(e.source));
  return out + "</tbody></table></details>\n";
}

// A run's section: its name and folder, the reader's notes, its events and its configuration.
std::string run_section(const RunData& run, size_t r) {
  std::string out = fmt::format("<section class=\"run\"><h2>{}{}</h2><p class=\"path\">{}</p>\n", swatch(r),
                                html_escape(run.label), html_escape(fs::absolute(run.dir).string()));
  if (!run.notes.empty()) {
    out += "<ul class=\"notes\">";
    for (const auto& n : run.notes) out += "<li>" + html_escape(n) + "</li>";
    out += "</ul>\n";
  }
  out += events_table(run);
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
.summary-box{max-width:100%;overflow-x:auto}
.summary td.name,.summary td.path{white-space:normal;overflow-wrap:anywhere;min-width:10em}
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
  for (const auto& spec : chart_specs(runs)) charts += render_svg_chart(chart_of(spec, runs, o));
  if (charts.empty())
    out += "<p class=\"none\">No run has logged a step yet: there is nothing to draw.</p>\n";
  else
    out += "<div class=\"charts\">\n" + charts + "</div>\n";
  for (size_t r = 0; r < runs.size(); r++) out += run_section(runs[r], r);
  return out + "</body></html>\n";
}

}  // namespace llamatrain::obs
