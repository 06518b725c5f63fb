// `llamatrain report` on real runs of the tiny config: two runs (one in a folder whose name and
// config value are hostile HTML) drawn on the same charts with one SVG path per run and metric and
// one point per logged step; a run resumed from an earlier checkpoint (metrics.jsonl repeats steps)
// drawn with each step's last value; a run that failed before its first step shown as such; and the
// mistakes a user can make (missing, empty or corrupt metrics, a file for a folder, --label count,
// an unwritable output), each a plain error naming the file and the fix.
#include "obs/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "train/train_runs.h"

namespace llamatrain {
namespace {

using namespace testing;
namespace fs = std::filesystem;

constexpr int64_t kSteps = 6;
const char* const kHostileDir = "run<script>alert(1)";  // no '/': one folder
const char* const kHostileName = "<script>alert(2)</script>";

// Each <path class="curve"> of a page: its run, metric, declared point count and the points of d.
struct Curve {
  int64_t declared = 0;
  std::vector<std::pair<double, double>> points;
};
std::map<std::pair<std::string, std::string>, Curve> curves_of(const std::string& html) {
  std::map<std::pair<std::string, std::string>, Curve> out;
  const std::regex path_re(
      R"re(<path class="curve" data-run="([^"]*)" data-metric="([^"]*)" data-points="(\d+)" d="([^"]*)")re");
  const std::regex point_re(R"re([ML](-?[0-9.]+),(-?[0-9.]+))re");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), path_re); it != std::sregex_iterator(); ++it) {
    Curve c;
    c.declared = std::stoll((*it)[3]);
    const std::string d = (*it)[4];
    for (auto p = std::sregex_iterator(d.begin(), d.end(), point_re); p != std::sregex_iterator(); ++p)
      c.points.emplace_back(std::stod((*p)[1]), std::stod((*p)[2]));
    EXPECT_FALSE(out.contains({(*it)[1], (*it)[2]})) << "two paths for " << (*it)[1] << " " << (*it)[2];
    out[{(*it)[1], (*it)[2]}] = c;
  }
  return out;
}

// The text of every chart's legend group, one string per chart.
std::vector<std::string> legends_of(const std::string& html) {
  std::vector<std::string> out;
  const std::regex re(R"re(<g class="legend">(.*?)</g>)re");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

// A training log's lines other than its event lines (the trainer's own, when it writes them), so
// that a test's event lines are the only ones.
std::string without_events(const std::string& log) {
  std::string out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find("@event ") == std::string::npos) out += line + "\n";
  return out;
}

bool strictly_increasing_x(const Curve& c) {
  for (size_t i = 1; i < c.points.size(); i++)
    if (!(c.points[i].first > c.points[i - 1].first)) return false;
  return true;
}

// Two runs of kSteps with validation and a checkpoint every 3 steps; the second in a folder with a
// hostile name, a hostile exp_manager.name and another learning rate. Made once for the binary.
class Report : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    a_ = *dir_ / "base";
    b_ = *dir_ / kHostileDir;
    const std::vector<std::string> common = {"trainer.max_steps=" + std::to_string(kSteps),
                                             "trainer.val_check_interval=3", "trainer.limit_val_batches=1",
                                             "exp_manager.checkpoint_callback_params.every_n_train_steps=3",
                                             "exp_manager.checkpoint_callback_params.save_top_k=-1"};
    auto extra = common;
    auto r = run_in(a_, train_args(a_, extra));
    ASSERT_EQ(r.status, 0) << r.log;
    extra.push_back("model.optim.lr=1e-3");
    extra.push_back(std::string("exp_manager.name=") + kHostileName);
    r = run_in(b_, train_args(b_, extra));
    ASSERT_EQ(r.status, 0) << r.log;
  }
  static void TearDownTestSuite() { delete dir_; }

  static TempDir* dir_;
  static std::string a_, b_;
};
TempDir* Report::dir_ = nullptr;
std::string Report::a_, Report::b_;

TEST_F(Report, TwoRunsEveryCurveHasOnePointPerStepAndTheLegendNamesBoth) {
  TempDir out;
  const std::string html_path = out / "report.html";
  const auto r = run_cli({"report", a_, b_, "-o", html_path});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(r.out.find("wrote " + html_path + ": 2 runs, " + std::to_string(2 * kSteps) + " logged steps"),
            std::string::npos)
      << r.out;
  const std::string html = read_file(html_path);
  const auto curves = curves_of(html);
  const std::string hostile_label = obs::html_escape(kHostileDir);
  for (const std::string& label : {std::string("base"), hostile_label}) {
    for (const char* metric : {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_time_s", "peak_rss_bytes"}) {
      const auto it = curves.find({label, metric});
      ASSERT_NE(it, curves.end()) << "no " << metric << " curve for " << label;
      EXPECT_EQ(it->second.declared, kSteps) << label << " " << metric;
      EXPECT_EQ(int64_t(it->second.points.size()), kSteps) << label << " " << metric;
      EXPECT_TRUE(strictly_increasing_x(it->second)) << label << " " << metric;
    }
    // validation at steps 3 and 6, on the loss chart
    const auto val = curves.find({label, "val_loss"});
    ASSERT_NE(val, curves.end()) << label;
    EXPECT_EQ(val->second.points.size(), 2u) << label;
  }
  // The loss curve is drawn from the run's values: its heights follow metrics.jsonl's losses.
  const auto loss = losses(a_);
  const auto& drawn = curves.at({"base", "loss"}).points;
  for (size_t i = 1; i < drawn.size(); i++) {
    const double dl = loss.at(int64_t(i + 1)) - loss.at(int64_t(i));
    if (std::fabs(dl) > 1e-3) {
      EXPECT_EQ(drawn[i].second<drawn[i - 1].second, dl> 0) << "step " << i + 1;
    }
  }
  // Every chart's legend names both runs; no chart for communication on one process.
  const auto legends = legends_of(html);
  ASSERT_GE(legends.size(), 7u);
  for (const auto& l : legends) {
    EXPECT_NE(l.find(">base<"), std::string::npos) << l;
    EXPECT_NE(l.find("run&lt;script&gt;alert(1)"), std::string::npos) << l;
  }
  EXPECT_EQ(html.find("data-metric=\"comm_time_s\""), std::string::npos);
  // Checkpoints at 3 and 6 are marked on the loss chart; the summary has both runs.
  const std::regex marker(R"re(class="marker" data-kind="checkpoint[a-z_]*")re");
  EXPECT_GE(std::distance(std::sregex_iterator(html.begin(), html.end(), marker), std::sregex_iterator()), 4);
  EXPECT_NE(html.find("<table class=\"summary\">"), std::string::npos);
  // Self-contained: nothing to fetch, nothing to run.
  for (const char* external : {"<script", "src=", "href=", "url(", "@import", "<link"})
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  // The library reads what the trainer wrote.
  EXPECT_EQ(obs::read_run(a_ + "/").label, "base");
  EXPECT_EQ(obs::read_run(a_ + "/checkpoints/..").label, "base");
  const obs::RunData run = obs::read_run(a_);
  EXPECT_EQ(run.series.at("loss"), loss);
  EXPECT_EQ(run.last_step(), kSteps);
  EXPECT_EQ(run.repeated_steps, 0);
  EXPECT_FALSE(run.config_text.empty());
  EXPECT_EQ(run.seq_length, 64);
  EXPECT_GT(run.tokens(), 0);
}

TEST_F(Report, HostileNamesAndConfigValuesAreEscaped) {
  TempDir out;
  const std::string html_path = out / "r.html";
  const std::string label = "<img src=x onerror=alert(3)>";
  const auto r = run_cli({"report", b_, a_, "-o", html_path, "--label", "x", "--label", label, "--title", "<b>t"});
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::string html = read_file(html_path);
  ASSERT_NE(read_file(b_ + "/train_config.yaml").find(kHostileName), std::string::npos)
      << "the hostile value should reach train_config.yaml";
  for (const char* raw : {"<script", "<img", "<b>t"}) EXPECT_EQ(html.find(raw), std::string::npos) << raw;
  EXPECT_NE(html.find("&lt;script&gt;alert(2)&lt;/script&gt;"), std::string::npos) << "the config's value";
  EXPECT_NE(html.find("run&lt;script&gt;alert(1)"), std::string::npos) << "the folder";
  EXPECT_NE(html.find("&lt;img src=x onerror=alert(3)&gt;"), std::string::npos) << "the label";
  EXPECT_NE(html.find("&lt;b&gt;t"), std::string::npos) << "the title";
  EXPECT_EQ(obs::html_escape("a&b\"c'<>"), "a&amp;b&quot;c&#39;&lt;&gt;");
}

// A run of 6 steps with checkpoints at 3 and 6; the one at 6 removed; resumed to 8 steps: metrics.jsonl
// holds steps 1-6, then 4-8 again, with other learning rates (the cosine schedule now spans 8 steps).
TEST_F(Report, ResumedRunShowsTheLastValueOfEachStep) {
  TempDir dir;
  const std::string run = dir / "resumed";
  const std::vector<std::string> ckpt = {"exp_manager.checkpoint_callback_params.every_n_train_steps=3",
                                         "exp_manager.checkpoint_callback_params.save_top_k=-1"};
  auto extra = ckpt;
  extra.push_back("trainer.max_steps=6");
  auto r = run_in(run, train_args(run, extra));
  ASSERT_EQ(r.status, 0) << r.log;
  ASSERT_TRUE(fs::exists(run + "/checkpoints/step_3")) << r.log;
  fs::remove_all(run + "/checkpoints/step_6");
  extra = ckpt;
  extra.insert(extra.end(), {"trainer.max_steps=8", "exp_manager.resume_if_exists=true"});
  r = run_in(run, train_args(run, extra));
  ASSERT_EQ(r.status, 0) << r.log;
  // What the trainer wrote: 11 training records, the second of steps 4-6 with another lr.
  std::map<int64_t, std::vector<double>> lr_records;
  for (const auto& rec : obs::read_metrics(run + "/metrics.jsonl"))
    if (rec.contains("loss")) lr_records[rec["step"].get<int64_t>()].push_back(obs::metric_value(rec, "lr"));
  ASSERT_EQ(lr_records.size(), 8u);
  ASSERT_EQ(lr_records.at(5).size(), 2u) << "step 5 should be logged twice";
  ASSERT_NE(lr_records.at(5)[0], lr_records.at(5)[1]) << "the resumed run should have another lr at step 5";

  const obs::RunData data = obs::read_run(run);
  EXPECT_EQ(data.repeated_steps, 3);
  ASSERT_EQ(data.series.at("lr").size(), 8u);
  for (const auto& [step, values] : lr_records) EXPECT_EQ(data.series.at("lr").at(step), values.back()) << step;

  TempDir out;
  const auto cli = run_cli({"report", run, "-o", out / "r.html"});
  ASSERT_EQ(cli.code, 0) << describe(cli);
  EXPECT_NE(cli.out.find("1 run, 8 logged steps (resumed: steps 1-8)"), std::string::npos) << cli.out;
  const std::string html = read_file(out / "r.html");
  const auto curves = curves_of(html);
  for (const char* metric : {"loss", "lr", "grad_norm"}) {
    const Curve& c = curves.at({"resumed", metric});
    EXPECT_EQ(c.points.size(), 8u) << metric;
    EXPECT_TRUE(strictly_increasing_x(c)) << metric << ": the curve goes back on itself";
  }
  EXPECT_NE(html.find("3 training records repeated an earlier step"), std::string::npos);
  // the restart is an event at step 4, marked on the loss chart
  const auto restart =
      std::find_if(data.events.begin(), data.events.end(), [](const obs::RunEvent& e) { return e.kind == "restart"; });
  ASSERT_NE(restart, data.events.end());
  EXPECT_EQ(restart->step, 4);
  EXPECT_NE(html.find("data-kind=\"restart\""), std::string::npos);
}

// A run that stops before its first step (resume_if_exists with no checkpoint) leaves its folder
// with a config and a log but no step: the page says so, next to a run that has steps.
TEST_F(Report, RunWithoutStepsIsShownAsSuch) {
  TempDir dir;
  const std::string run = dir / "early";
  auto r = run_in(
      run, train_args(run, {"exp_manager.resume_if_exists=true", "exp_manager.resume_ignore_no_checkpoint=false"}));
  ASSERT_NE(r.status, 0) << r.log;
  ASSERT_TRUE(fs::exists(run + "/train_log.txt"));
  ASSERT_FALSE(fs::exists(run + "/metrics.jsonl"));
  TempDir out;
  auto cli = run_cli({"report", run, "-o", out / "one.html"});
  ASSERT_EQ(cli.code, 0) << describe(cli);
  EXPECT_NE(cli.out.find("early: no steps yet"), std::string::npos) << cli.out;
  std::string html = read_file(out / "one.html");
  EXPECT_NE(html.find("no step logged yet"), std::string::npos);
  EXPECT_NE(html.find("No run has logged a step yet"), std::string::npos);
  EXPECT_NE(html.find("resume_if_exists: true"), std::string::npos) << "its config is shown";
  cli = run_cli({"report", run, a_, "-o", out / "two.html"});
  ASSERT_EQ(cli.code, 0) << describe(cli);
  html = read_file(out / "two.html");
  EXPECT_NE(html.find("no step logged yet"), std::string::npos);
  EXPECT_EQ(curves_of(html).at({"base", "loss"}).points.size(), size_t(kSteps));
  EXPECT_FALSE(curves_of(html).contains({"early", "loss"}));
}

// Event lines in the format of the training log's contract (docs/training.md), appended to a copy of a
// real run's train_log.txt: known kinds become table rows and loss-chart markers, unknown kinds and
// fields are kept, a line that is not one JSON object is left out with a note.
TEST_F(Report, EventLinesBecomeATableAndMarkers) {
  TempDir dir;
  const std::string run = dir / "events";
  fs::create_directories(run);
  for (const char* f : {"metrics.jsonl", "train_config.yaml", "train_log.txt"})
    fs::copy_file(a_ + "/" + f, run + "/" + f);
  std::string log = without_events(read_file(run + "/train_log.txt"));
  log += "[2026-12-01 10:00:01] @event {\"event\":\"checkpoint_saved\",\"step\":3,\"path\":\"ck/step_3\"}\n";
  log += "[2026-12-01 10:00:02] @event {\"event\":\"rollback\",\"step\":5,\"to_step\":3,\"why\":\"<nan>\"}\n";
  log += "[rank 1] @event {\"event\":\"error\",\"code\":\"oom\",\"rank\":1,\"step\":4}\n";
  log += "[2026-12-01 10:00:03] @event {\"event\":\"future_kind\",\"extra\":[1,2]}\n";
  log += "[2026-12-01 10:00:04] @event {\"event\": broken\n";
  // Two ranks printing at once: rank 0's event cut by rank 1's whole line; rank 1's is read (as
  // diagnose reads it: obs/log_lines.h), and the cut one is not counted as a broken line.
  log += "[2026-12-01 10:00:05] @event {\"event\":\"checkpoint_saved\",\"step\":6,\"pa[rank 1] @event "
         "{\"event\":\"rollback\",\"step\":6,\"to_step\":3}\n";
  write_file(run + "/train_log.txt", log);
  const obs::RunData data = obs::read_run(run);
  std::vector<std::string> kinds;
  for (const auto& e : data.events) kinds.push_back(e.kind);
  // by step; one without a step goes with the one before it in the log
  EXPECT_EQ(kinds, (std::vector<std::string>{"checkpoint_saved", "error", "future_kind", "rollback", "rollback"}));
  EXPECT_EQ(data.events[4].time, "2026-12-01 10:00:05");
  EXPECT_EQ(data.events[4].step, 6);
  EXPECT_EQ(data.events[3].time, "2026-12-01 10:00:02");
  EXPECT_EQ(data.events[3].step, 5);
  EXPECT_FALSE(data.events[2].step.has_value());
  TempDir out;
  const auto r = run_cli({"report", run, "-o", out / "r.html"});
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::string html = read_file(out / "r.html");
  for (const char* marker : {"data-kind=\"checkpoint_saved\"", "data-kind=\"rollback\"", "data-kind=\"error\""})
    EXPECT_NE(html.find(marker), std::string::npos) << marker;
  EXPECT_NE(html.find("<td>future_kind</td>"), std::string::npos);
  EXPECT_NE(html.find("why=&lt;nan&gt;"), std::string::npos);
  EXPECT_NE(html.find("code=oom"), std::string::npos);
  EXPECT_NE(html.find("1 @event line that is not one JSON object"), std::string::npos);

  // A folder with the log alone, whose step events carry metrics.jsonl's records: the curves come from
  // them, and they are not table rows.
  const std::string log_only = dir / "log_only";
  fs::create_directories(log_only);
  std::string steps_log = without_events(read_file(a_ + "/train_log.txt"));
  for (const auto& rec : obs::read_metrics(a_ + "/metrics.jsonl")) {
    nlohmann::json e = rec;  // the trainer's step and validation events: the record and a few more fields
    e["event"] = rec.contains("loss") ? "step" : "validation";
    e[rec.contains("loss") ? "max_steps" : "batches"] = 1;
    steps_log += "[2026-12-01 10:00:05] @event " + e.dump() + "\n";
  }
  write_file(log_only + "/train_log.txt", steps_log);
  const obs::RunData from_log = obs::read_run(log_only);
  EXPECT_EQ(from_log.series.at("loss"), losses(a_));
  EXPECT_EQ(from_log.series.at("val_loss"), obs::read_run(a_).series.at("val_loss"));
  for (const auto& e : from_log.events) EXPECT_NE(e.kind, "step");
  EXPECT_FALSE(from_log.series.contains("batches"));
  EXPECT_NE(from_log.notes.back().find("the curves come from the step events"), std::string::npos);
}

TEST_F(Report, MistakesArePlainErrorsNamingTheFileAndTheFix) {
  TempDir dir;
  const std::string out = dir / "r.html";
  // a folder that does not exist, a file for a folder, a folder with no run
  expect_plain_error(run_cli({"report", dir / "nope", "-o", out}), {dir / "nope", "does not exist", "hint:"});
  expect_plain_error(run_cli({"report", a_ + "/metrics.jsonl", "-o", out}), {"metrics.jsonl is not a folder", "hint:"});
  fs::create_directories(dir / "empty");
  expect_plain_error(run_cli({"report", dir / "empty", "-o", out}),
                     {dir / "empty/metrics.jsonl not found", "explicit_log_dir"});
  // an empty metrics.jsonl with nothing else
  fs::create_directories(dir / "blank");
  write_file(dir / "blank/metrics.jsonl", "");
  expect_plain_error(run_cli({"report", dir / "blank", "-o", out}), {dir / "blank/metrics.jsonl is empty", "hint:"});
  // a line of metrics.jsonl that is not JSON, in the middle of a real run's file
  const std::string bad = dir / "bad";
  fs::create_directories(bad);
  std::string lines = read_file(a_ + "/metrics.jsonl");
  const size_t second = lines.find('\n') + 1;
  const size_t third = lines.find('\n', second) + 1;
  write_file(bad + "/metrics.jsonl", lines.substr(0, third) + "{\"step\": 3, \"loss\": oops}\n" + lines.substr(third));
  expect_plain_error(run_cli({"report", bad, "-o", out}), {bad + "/metrics.jsonl:3", "not a JSON object", "hint:"});
  // an unfinished last line (a live run writing it) is left out with a note, not an error
  write_file(bad + "/metrics.jsonl", lines + "{\"step\": 7, \"lo");
  auto r = run_cli({"report", bad, "-o", out});
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_NE(read_file(out).find("an unfinished last line was left out"), std::string::npos);
  // --label count, an output in a folder that does not exist
  expect_plain_error(run_cli({"report", a_, b_, "--label", "one", "-o", out}), {"1 --label for 2 run folders"});
  expect_plain_error(run_cli({"report", a_, "-o", dir / "no/such/dir/r.html"}), {"-o", "no/such/dir"});
  EXPECT_FALSE(exists(dir / "no/such/dir/r.html"));
}

// ---- the page from RunData built in memory: long curves, gaps, names ----

obs::RunData synthetic_run(const std::string& dir, int64_t steps) {
  obs::RunData run;
  run.dir = dir;
  run.label = fs::path(dir).filename().string();
  for (int64_t s = 1; s <= steps; s++) run.series["loss"][s] = 3 + std::sin(0.01 * double(s));
  return run;
}

TEST(ReportPage, LongCurveIsDrawnAsItsEnvelope) {
  obs::RunData run = synthetic_run("/runs/long", 50000);
  run.series["loss"][25000] = 100;  // one spike must survive the thinning
  const std::string html = obs::render_report({run});
  EXPECT_LT(html.size(), size_t(1) << 20);
  const auto curves = curves_of(html);
  const Curve& c = curves.at({"long", "loss"});
  EXPECT_EQ(c.declared, 50000);
  EXPECT_GT(c.points.size(), 500u);
  EXPECT_LE(c.points.size(), 4u * 640);
  EXPECT_NE(html.find("data-drawn=\"" + std::to_string(c.points.size()) + "\""), std::string::npos);
  std::vector<double> ys;
  for (const auto& p : c.points) ys.push_back(p.second);
  std::sort(ys.begin(), ys.end());
  EXPECT_LT(ys.front(), ys[ys.size() / 2] - 100) << "the spike at step 25000 is not drawn";
}

TEST(ReportPage, NonFiniteValuesLeaveAGapAndOnePointIsADot) {
  obs::RunData run = synthetic_run("/runs/gap", 10);
  run.series["loss"][5] = std::numeric_limits<double>::quiet_NaN();  // a skipped step: null in metrics.jsonl
  obs::RunData one = synthetic_run("/runs/one", 1);
  const std::string html = obs::render_report({run, one});
  const auto curves = curves_of(html);
  EXPECT_EQ(curves.at({"gap", "loss"}).points.size(), 9u);
  const std::regex gap_re(R"re(data-run="gap" data-metric="loss" data-points="9" d="M[^M"]*M[^M"]*")re");
  EXPECT_TRUE(std::regex_search(html, gap_re)) << "the curve should be two pieces";
  EXPECT_EQ(curves.at({"one", "loss"}).points.size(), 1u);
  EXPECT_NE(html.find("<title>one step 1: loss"), std::string::npos) << "a one-point curve is drawn as a dot";
}

// The tick labels of the chart of `metric` (y first, then x).
std::vector<std::string> ticks_of(const std::string& html, const std::string& metric) {
  const size_t start = html.find("<figure class=\"chart\" data-metric=\"" + metric + "\"");
  if (start == std::string::npos) return {};
  const std::string chart = html.substr(start, html.find("</figure>", start) - start);
  std::vector<std::string> out;
  const std::regex re(R"re(class="tick">([^<]*)<)re");
  for (auto it = std::sregex_iterator(chart.begin(), chart.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

TEST(ReportPage, AxesHaveNumberedTicksAndLogScaleWhereAsked) {
  obs::RunData run = synthetic_run("/runs/axes", 200);
  for (int64_t s = 1; s <= 200; s++) run.series["grad_norm"][s] = 50.0 / double(s);  // 0.25 .. 50: 200x
  for (int64_t s = 1; s <= 200; s++) run.series["lr"][s] = 3e-4;                     // flat
  std::string html = obs::render_report({run});
  std::vector<std::string> loss_ticks = ticks_of(html, "loss");
  EXPECT_NE(std::find(loss_ticks.begin(), loss_ticks.end(), "3.0"), loss_ticks.end())
      << ::testing::PrintToString(loss_ticks);
  for (const char* step : {"50", "100", "150", "200"})
    EXPECT_NE(std::find(loss_ticks.begin(), loss_ticks.end(), step), loss_ticks.end()) << step;
  const std::vector<std::string> grad_ticks = ticks_of(html, "grad_norm");
  for (const char* decade : {"1", "10"})
    EXPECT_NE(std::find(grad_ticks.begin(), grad_ticks.end(), decade), grad_ticks.end())
        << ::testing::PrintToString(grad_ticks);
  EXPECT_NE(html.find("gradient norm (before clipping) (log scale)"), std::string::npos);
  EXPECT_EQ(html.find("loss (log scale)"), std::string::npos);
  // a flat curve still gets distinct tick labels
  const std::vector<std::string> lr_ticks = ticks_of(html, "lr");
  ASSERT_GE(lr_ticks.size(), 3u);
  EXPECT_NE(lr_ticks[0], lr_ticks[1]) << ::testing::PrintToString(lr_ticks);
  obs::ReportOptions o;
  o.log_loss = true;
  html = obs::render_report({run}, o);
  EXPECT_NE(html.find("loss (log scale)"), std::string::npos);
}

// The summary of runs with long names and folders stays inside a 1400-pixel window: the table sits in
// a box that scrolls sideways (rather than the page), and the name and folder cells wrap.
TEST(ReportPage, SummaryTableScrollsInsideItsOwnBox) {
  const std::string long_dir =
      std::string("/scratch/") + std::string(120, 'p') + "/nemo_experiments/" + std::string(60, 'n');
  const std::string html = obs::render_report({synthetic_run(long_dir, 3), synthetic_run("/runs/short", 3)});
  const size_t box = html.find("<div class=\"summary-box\"><table class=\"summary\">");
  ASSERT_NE(box, std::string::npos) << "the summary table is not in its own box";
  const size_t table_end = html.find("</table>", box);
  ASSERT_NE(table_end, std::string::npos);
  EXPECT_EQ(html.compare(table_end, 14, "</table></div>"), 0) << "the box holds the table alone";
  EXPECT_NE(html.find(long_dir, box), std::string::npos);
  const std::string style = html.substr(0, html.find("</style>"));
  const std::regex scrolls(R"re(\.summary-box\{[^}]*max-width:100%[^}]*overflow-x:auto)re");
  EXPECT_TRUE(std::regex_search(style, scrolls)) << style;
  const std::regex wraps(R"re(\.summary td\.name,\.summary td\.path\{[^}]*white-space:normal)re");
  EXPECT_TRUE(std::regex_search(style, wraps)) << style;
}

TEST(ReportPage, RunsNamedAlikeGetDistinctNames) {
  std::vector<obs::RunData> runs = {synthetic_run("/x/a/version_0", 3), synthetic_run("/x/b/version_0", 3),
                                    synthetic_run("/x/c", 3), synthetic_run("/x/c", 3)};
  obs::disambiguate_labels(runs);
  std::vector<std::string> labels;
  for (const auto& r : runs) labels.push_back(r.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"a/version_0", "b/version_0", "x/c #3", "x/c #4"}));
}

}  // namespace
}  // namespace llamatrain
