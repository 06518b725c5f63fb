// `llamatrain diagnose LOG_OR_RUN_DIR...`: why a training job ended, from its logs (jobs/diagnose.h):
// the cause, the lines that show it, the fix and the command that resumes; --json for scripts.
// Exit 0 when it named a cause (a finished run included); unreadable input is an error (exit 1).
#include "jobs/diagnose.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"

namespace llamatrain::cli {

namespace {

struct DiagnoseArgs {
  std::vector<std::string> logs;  // job logs and run folders of one job
  bool json = false;
  std::vector<std::string> fields;  // --field: only these fields of the JSON object, on one line
};

// The named fields of the diagnosis on one line, for scripts without a JSON parser.
std::string field_line(const nlohmann::ordered_json& j, const std::vector<std::string>& fields) {
  std::string line;
  for (const std::string& f : fields) {
    if (!j.contains(f)) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : j.items()) keys.push_back(k);
      fail("diagnose --field {}: no such field, expected one of {}", f, fmt::join(keys, ", "));
    }
    const auto& v = j[f];
    const std::string text = v.is_string()    ? v.get<std::string>()
                             : v.is_boolean() ? (v.get<bool>() ? "1" : "0")
                             : v.is_null()    ? "-"
                                              : v.dump();
    line += (line.empty() ? "" : " ") + text;
  }
  return line;
}

void run_diagnose(const DiagnoseArgs& a) {
  const auto d = train::diagnose(train::read_job_logs(a.logs));
  if (!a.fields.empty())
    std::printf("%s\n", field_line(d.to_json(), a.fields).c_str());
  else if (a.json)
    std::printf("%s\n", d.to_json().dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  else
    std::fputs(d.to_text().c_str(), stdout);
}

}  // namespace

void register_diagnose(CLI::App& app) {
  auto [cmd, a] = add_command<DiagnoseArgs>(
      app, "diagnose", "Name why a training job ended, from its logs, and how to resume it",
      "The logs given together are one job's: SLURM's job log (slurm-<id>.out), the run folder (its\n"
      "train_log.txt and the *.out, *.err and *.log files beside it), `dmesg` text of its nodes.\n\n"
      "Examples:\n"
      "  llamatrain diagnose slurm-1234.out\n"
      "  llamatrain diagnose nemo_experiments/llama2_7b/1234 slurm-1234.out\n"
      "  ssh node07 dmesg > node07.dmesg.log; llamatrain diagnose slurm-1234.out node07.dmesg.log\n"
      "  llamatrain diagnose --json runs/cpt | jq -r .resume\n"
      "  read -r cause retry < <(llamatrain diagnose --field cause --field retry runs/cpt)   # in a batch script",
      run_diagnose);
  cmd->add_option("logs", a->logs, "Job logs and run folders of one job")->required();
  cmd->add_flag("--json", a->json, "One JSON object: cause, retry, summary, rank, signal, evidence, fix, resume, ...");
  cmd->add_option("--field", a->fields,
                  "Print only these fields of the JSON object, space-separated on one line (strings bare, "
                  "booleans 1/0, null as -): for scripts without a JSON parser (repeatable)");
}

}  // namespace llamatrain::cli
