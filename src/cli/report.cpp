// `llamatrain report RUN_DIR... [-o report.html]`: one self-contained HTML page of the curves of one
// or more training runs overlaid (loss, validation loss, learning rate, gradient norm, tokens/s, MFU,
// step time, memory), a summary table, each run's events and resolved configuration (obs/report.h).
#include "obs/report.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/file.h"

namespace llamatrain::cli {

namespace {

struct ReportArgs {
  std::vector<std::string> runs;
  std::vector<std::string> labels;
  std::string out = "report.html";
  std::string title = "llamatrain runs";
  bool log_loss = false;
};

void run_report(const ReportArgs& a) {
  if (!a.labels.empty() && a.labels.size() != a.runs.size())
    fail("report: got {} --label for {} run folders, expected one per folder, in the same order\nhint: give "
         "--label once for each RUN_DIR, or leave it out to name each run by its folder",
         a.labels.size(), a.runs.size());
  check_output_file(a.out, "-o");
  std::vector<obs::RunData> runs;
  int64_t steps = 0;
  for (size_t i = 0; i < a.runs.size(); i++) {
    runs.push_back(obs::read_run(a.runs[i], a.labels.empty() ? "" : a.labels[i]));
    const obs::RunData& r = runs.back();
    if (!r.has_steps()) std::fprintf(stderr, "note: %s: no step logged yet\n", r.dir.c_str());
    steps += r.has_steps() ? int64_t(r.series.at("loss").size()) : 0;
  }
  if (a.labels.empty()) obs::disambiguate_labels(runs);
  obs::ReportOptions o;
  o.title = a.title;
  o.log_loss = a.log_loss;
  write_file_atomic(a.out, obs::render_report(runs, o));
  std::string per_run;
  for (const auto& r : runs)
    per_run += fmt::format("{}{}: {}", per_run.empty() ? "" : ", ", r.label,
                           r.has_steps() ? fmt::format("steps {}-{}", r.series.at("loss").begin()->first, r.last_step())
                                         : std::string("no steps yet"));
  std::printf("wrote %s: %zu run%s, %lld logged steps (%s)\n", a.out.c_str(), runs.size(), runs.size() == 1 ? "" : "s",
              static_cast<long long>(steps), per_run.c_str());
}

}  // namespace

void register_report(CLI::App& app) {
  auto [cmd, a] = add_command<ReportArgs>(
      app, "report", "Write one HTML page with the curves of one or more training runs",
      "RUN_DIR is a run folder (exp_manager.explicit_log_dir, or nemo_experiments/NAME/VERSION): the page draws\n"
      "its metrics.jsonl (train and validation loss, learning rate, gradient norm, tokens/s, MFU, step time,\n"
      "peak memory; several runs overlaid, one colour each, named by their folder or --label), marks the\n"
      "checkpoints, rollbacks and resumes of train_log.txt's event lines on the loss chart, and lists each\n"
      "run's events and its train_config.yaml. The page is one file with no script and nothing to fetch:\n"
      "open it in any browser, copy it anywhere. A step logged twice (a resumed run) shows its last value.\n\n"
      "Examples:\n"
      "  llamatrain report runs/cpt                                  # writes ./report.html\n"
      "  llamatrain report runs/base runs/cpt -o cpt.html --label before --label after\n"
      "  llamatrain report nemo_experiments/llama2_7b/* --log-loss -o all.html --title \"7B layouts\"\n",
      run_report);
  cmd->add_option("RUN_DIR", a->runs, "run folders, one or more")->required();
  cmd->add_option("-o,--output", a->out, "HTML file to write")->capture_default_str();
  cmd->add_option("--label", a->labels,
                  "name of a run in the legend: once per RUN_DIR, in their order (default: the folder's name)")
      ->allow_extra_args(false);
  cmd->add_option("--title", a->title, "page title")->capture_default_str();
  cmd->add_flag("--log-loss", a->log_loss, "draw the loss on a log axis");
}

}  // namespace llamatrain::cli
