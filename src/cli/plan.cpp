// `llamatrain plan CONFIG [key=value ...] [--nodes N --ranks-per-node R --hardware NAME] [--json]`:
// argument wiring and printing. train::plan_job does the checks and the figures; the exit status is 1
// when any check fails, so a batch script can stop before the expensive job.
#include <algorithm>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "model/modes.h"
#include "obs/progress.h"
#include "jobs/step_model.h"
#include "config/config.h"
#include "jobs/job_plan.h"

namespace llamatrain::cli {

namespace {

struct PlanOptions {
  std::string config;
  std::vector<std::string> overrides;
  int nodes = 0, ranks_per_node = 0;
  std::string hardware = "cpu";
  bool json = false;
  bool fit_nodes = false;
};

// --fit-nodes: the largest node count up to `nodes` whose rank layout the config accepts (TP x PP
// dividing the ranks, the global batch dividing into micro-batches over the data-parallel ranks),
// printed alone. A node range's allocation (sbatch --nodes 2-4) may give a count the layout does not
// divide: launch/slurm/run.slurm then runs on this many. Only the config is checked. With none, the
// error for `nodes` itself.
void print_fitting_nodes(const PlanOptions& o, const std::vector<std::string>& overrides) {
  if (o.nodes <= 0) fail("plan --fit-nodes: needs --nodes N (the nodes the job has)");
  std::optional<Error> first;
  for (int n = o.nodes; n >= 1; n--) {
    std::vector<std::string> with = overrides;
    with.push_back(fmt::format("trainer.num_nodes={}", n));
    try {
      train::load_config(o.config, with);
      std::printf("%d\n", n);
      return;
    } catch (const Error& e) {
      if (!first) first = e;
    }
  }
  throw *first;
}

std::string gb(int64_t bytes) { return obs::format_bytes(double(bytes)); }

// "hint: ..." continuation lines of a check's detail, indented under it.
std::string indented(const std::string& text, const std::string& indent) {
  std::string out;
  for (char ch : text) {
    out += ch;
    if (ch == '\n') out += indent;
  }
  return out;
}

std::string text_of(const train::JobPlan& jp, const std::string& config) {
  std::string s =
      fmt::format("llamatrain plan: {} on {} node{} x {} rank{}, {}\n", config, jp.nodes, jp.nodes == 1 ? "" : "s",
                  jp.ranks_per_node, jp.ranks_per_node == 1 ? "" : "s", jp.hardware.empty() ? "this CPU" : jp.hardware);
  if (jp.planned) {
    const train::RunPlan& p = jp.plan;
    s +=
        fmt::format("  batch: global {} = micro {} x {} micro-batch{} x data parallel {}; seq {}; {} tokens per step\n",
                    p.global_batch, p.B, p.micro_batches, p.micro_batches == 1 ? "" : "es", p.layout.dp_size, p.T,
                    obs::format_count(double(p.global_batch) * p.T));
    s += fmt::format("  precision {}, recompute {}{}\n", model::precision_name(p.precision), p.recompute_text(),
                     p.zero1 ? ", ZeRO-1 optimizer shards" : "");
    s += "\nmemory per rank";
    s += jp.stages.size() > 1 ? " (first rank of each pipeline stage):\n" : ":\n";
    auto row = [&](const char* what, auto field) {
      s += fmt::format("  {:<15}", what);
      for (const train::RankMemory& m : jp.stages) s += fmt::format(" {:>10}", gb(field(m)));
      s += "\n";
    };
    if (jp.stages.size() > 1) {
      s += fmt::format("  {:<15}", "stage");
      for (const train::RankMemory& m : jp.stages) s += fmt::format(" {:>10}", m.stage);
      s += "\n";
    }
    row("weights", [](const train::RankMemory& m) { return m.weights; });
    row("gradients", [](const train::RankMemory& m) { return m.gradients; });
    row("optimizer", [](const train::RankMemory& m) { return m.optimizer; });
    row("activations", [](const train::RankMemory& m) { return m.activations; });
    row("communication", [](const train::RankMemory& m) { return m.communication; });
    if (std::any_of(jp.stages.begin(), jp.stages.end(), [](const train::RankMemory& m) { return m.save_gather > 0; }))
      row("save gather", [](const train::RankMemory& m) { return m.save_gather; });
    if (std::any_of(jp.stages.begin(), jp.stages.end(), [](const train::RankMemory& m) { return m.save_copy > 0; }))
      row("save copy", [](const train::RankMemory& m) { return m.save_copy; });
    row("runtime", [](const train::RankMemory& m) { return m.runtime; });
    row("total", [](const train::RankMemory& m) { return m.total(); });
    if (std::any_of(jp.stages.begin(), jp.stages.end(), [](const train::RankMemory& m) { return m.export_hf > 0; })) {
      row("export (end)", [](const train::RankMemory& m) { return m.export_hf; });
      row("peak", [](const train::RankMemory& m) { return m.peak(); });
    }
    if (jp.memory_per_rank >= 0) s += fmt::format("  {:<15} {:>10}\n", "available", gb(jp.memory_per_rank));
    std::string modes;
    for (const auto& [mode, bytes] : jp.activations_by_recompute)
      modes += fmt::format("{}{} {}", modes.empty() ? "" : ", ", mode, gb(bytes));
    if (!modes.empty()) s += "  activations by recompute mode: " + modes + "\n";

    const train::StepPrediction& q = jp.prediction;
    s += fmt::format("\npredicted step on {}:\n", jp.hardware);
    s += fmt::format("  {:.3g} FLOPs per step; step {}: {} tokens/s{}, {:.3g} seq/s, {} steps in {}\n", q.flops,
                     obs::format_duration(q.step_s), obs::format_count(q.tokens_per_s),
                     q.text_fraction < 1
                         ? fmt::format(" of text ({:.1f}% of the inputs are padding)", 100 * (1 - q.text_fraction))
                         : "",
                     q.seq_per_s, jp.max_steps, obs::format_duration(q.step_s * double(jp.max_steps)));
    std::string parts;
    auto part = [&](const char* what, double sec) {
      if (sec > 0) parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", what, obs::format_duration(sec));
    };
    part("matmuls", q.matmul_s);
    part("attention", q.attention_s);
    part("elementwise", q.elementwise_s);
    part("tensor parallel", q.tensor_parallel_s);
    part("pipeline", q.pipeline_s);
    part("data parallel", q.data_parallel_s);
    part("optimizer", q.optimizer_s);
    s += "  " + parts + "\n";
  }
  s += "\nchecks:\n";
  for (const train::PlanCheck& c : jp.checks)
    s += fmt::format("  {} {:<8} {}\n", train::check_status_name(c.status), c.what,
                     indented(c.detail, "                "));
  for (size_t i = 1; i < jp.suggestions.size(); i++) s += "  also fits: " + jp.suggestions[i] + "\n";
  s += jp.ok() ? "plan: the job can run\n" : "plan: the job would fail (FAIL above)\n";
  return s;
}

std::string json_of(const train::JobPlan& jp) {
  nlohmann::ordered_json j;
  j["ok"] = jp.ok();
  j["nodes"] = jp.nodes;
  j["ranks_per_node"] = jp.ranks_per_node;
  j["hardware"] = jp.hardware;
  if (jp.planned) {
    const train::RunPlan& p = jp.plan;
    j["layout"] = {{"dp", p.layout.dp_size}, {"tp", p.layout.tp_size}, {"pp", p.layout.pp_size}};
    j["global_batch"] = p.global_batch;
    j["micro_batch"] = p.B;
    j["seq_length"] = p.T;
    j["micro_batches"] = p.micro_batches;
    j["precision"] = model::precision_name(p.precision);
    for (const train::RankMemory& m : jp.stages)
      j["memory_per_rank"].push_back({{"stage", m.stage},
                                      {"weights", m.weights},
                                      {"gradients", m.gradients},
                                      {"optimizer", m.optimizer},
                                      {"activations", m.activations},
                                      {"communication", m.communication},
                                      {"save_gather", m.save_gather},
                                      {"save_copy", m.save_copy},
                                      {"runtime", m.runtime},
                                      {"total", m.total()},
                                      {"export_hf", m.export_hf},
                                      {"peak", m.peak()},
                                      {"operand_form", p.precision == model::Precision::fp32 ? "fp32"
                                                       : m.float_operands                    ? "bf16_in_f32"
                                                                                             : "bf16"}});
    j["memory_available_per_rank"] = jp.memory_per_rank;
    for (const auto& [mode, bytes] : jp.activations_by_recompute) j["activations_by_recompute"][mode] = bytes;
    const train::StepPrediction& q = jp.prediction;
    j["prediction"] = {{"flops_per_step", q.flops},
                       {"step_s", q.step_s},
                       {"tokens_per_s", q.tokens_per_s},
                       {"seq_per_s", q.seq_per_s},
                       {"text_fraction", q.text_fraction},
                       {"matmul_s", q.matmul_s},
                       {"attention_s", q.attention_s},
                       {"elementwise_s", q.elementwise_s},
                       {"tensor_parallel_s", q.tensor_parallel_s},
                       {"pipeline_s", q.pipeline_s},
                       {"data_parallel_s", q.data_parallel_s},
                       {"optimizer_s", q.optimizer_s},
                       {"max_steps", jp.max_steps},
                       {"total_s", q.step_s * double(jp.max_steps)}};
  }
  for (const train::PlanCheck& c : jp.checks)
    j["checks"].push_back({{"status", train::check_status_name(c.status)}, {"what", c.what}, {"detail", c.detail}});
  j["suggestions"] = jp.suggestions;
  return j.dump(2) + "\n";
}

// Plans the job the config describes, on --nodes nodes of --hardware, and prints the plan; exits 1
// when the job would fail.
void run_plan(const PlanOptions& o) {
  std::vector<std::string> overrides = o.overrides;
  const train::Accelerator* acc = o.hardware == "cpu" ? nullptr : train::find_accelerator(o.hardware);
  if (o.hardware != "cpu" && !acc)
    fail("--hardware {}: not a machine this knows, expected cpu or one of {}", o.hardware, train::accelerator_names());
  if (o.ranks_per_node > 0)
    overrides.push_back(fmt::format("trainer.devices={}", o.ranks_per_node));
  else if (acc)
    overrides.push_back(fmt::format("trainer.devices={}", acc->ranks_per_node));
  if (o.fit_nodes) return print_fitting_nodes(o, overrides);
  if (o.nodes > 0) overrides.push_back(fmt::format("trainer.num_nodes={}", o.nodes));
  const auto loaded = train::load_config(o.config, overrides);
  const train::JobPlan jp = train::plan_job(loaded.config, {acc ? acc->name : "", 0.02});
  const std::string out = o.json ? json_of(jp) : text_of(jp, o.config);
  std::fputs(out.c_str(), stdout);
  if (!jp.ok()) {
    std::fflush(stdout);
    std::exit(1);
  }
}

}  // namespace

void register_plan(CLI::App& app) {
  auto [cmd, o] = add_command<PlanOptions>(
      app, "plan", "Check a training job and predict its memory and speed before running it",
      "Runs every check `llamatrain train` would make before its first step, for the whole job at once (each\n"
      "pipeline stage, the data files' token ids, the checkpoint a resume would load, the output folders, the\n"
      "disk for the checkpoints kept, memory per rank), prints memory per rank in its parts and a predicted\n"
      "step time, and exits 1 when the job would fail. On this CPU the prediction comes from short probes of\n"
      "its matmul and memory rates; --hardware names an accelerator whose published rates it uses instead.\n"
      "Nothing is written.\n\n"
      "Examples:\n"
      "  llamatrain plan configs/tiny.yaml model.data.data_prefix=[1.0,/tmp/fixture_text_document]\n"
      "  llamatrain plan configs/llama2_7b.yaml model.data.data_prefix=[1.0,data/book_text_document] \\\n"
      "      --nodes 4 --hardware trn1.32xlarge        # 32 ranks per instance, as the seeds run it\n"
      "  llamatrain plan configs/llama2_70b.yaml --nodes 8 --ranks-per-node 8 --hardware H100 --json\n"
      "  # in a batch script: fail the job early, with the reasons in its log\n"
      "  llamatrain plan \"$CONFIG\" \"${OVERRIDES[@]}\" --nodes \"$SLURM_JOB_NUM_NODES\" --ranks-per-node "
      "\"$SLURM_NTASKS_PER_NODE\"\n"
      "  # how many of 3 nodes a TP 2 job can use (prints 2)\n"
      "  llamatrain plan configs/tiny.yaml model.tensor_model_parallel_size=2 --nodes 3 --ranks-per-node 1 --fit-nodes",
      run_plan);
  cmd->add_option("config", o->config, "YAML config (as for llamatrain train)")->required();
  cmd->add_option("overrides", o->overrides, "key=value overrides, as for llamatrain train");
  cmd->add_option("--nodes", o->nodes, "Nodes of the job (sets trainer.num_nodes)")->check(CLI::PositiveNumber);
  cmd->add_option("--ranks-per-node", o->ranks_per_node,
                  "Processes per node (sets trainer.devices; default: the config's, or the accelerator's devices)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--hardware", o->hardware, "cpu (this machine), or one of: " + train::accelerator_names())
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the plan as one JSON object");
  cmd->add_flag("--fit-nodes", o->fit_nodes,
                "Print only the largest node count up to --nodes whose rank layout the config accepts (the same "
                "TP and PP, fewer data-parallel ranks); checks the config only");
}

}  // namespace llamatrain::cli
