// `llamatrain export CKPT --hf OUT`: a training checkpoint (or any Hugging Face Llama folder) to a
// complete Hugging Face folder (config.json, generation_config.json, sharded safetensors + index,
// the tokenizer files), reloaded and checked before success is reported (io/hf_export.h).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "io/hf_export.h"
#include "obs/progress.h"

namespace llamatrain::cli {

namespace {

struct ExportArgs {
  std::string checkpoint;
  std::string out;
  std::string dtype = "bf16";
  std::string tokenizer_model;
  std::string max_shard_size = "5GB";
};

// "5GB", "500MB", "2GiB", "1000000" -> bytes (transformers' max_shard_size spelling).
int64_t parse_size(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  const std::string unit = s.substr(pos);
  const std::pair<const char*, double> units[] = {{"", 1},     {"B", 1},       {"KB", 1e3},      {"MB", 1e6},
                                                  {"GB", 1e9}, {"KiB", 1024.}, {"MiB", 1 << 20}, {"GiB", 1 << 30}};
  for (const auto& [name, mult] : units)
    if (pos > 0 && unit == name && v > 0) return int64_t(v * mult);
  fail("--max-shard-size: got '{}', expected a positive size such as 5GB, 500MB or 2GiB", s);
}

void run_export(const ExportArgs& a) {
  const std::string dtype = io::parse_export_dtype(a.dtype);
  io::ExportOptions o;
  o.torch_dtype = dtype;
  o.max_shard_bytes = parse_size(a.max_shard_size);
  o.tokenizer_model = a.tokenizer_model;
  if (o.tokenizer_model.empty()) {  // the checkpoint's own tokenizer files
    const std::filesystem::path dir(a.checkpoint);
    if (std::filesystem::exists(dir / "tokenizer.json") || std::filesystem::exists(dir / "tokenizer.model"))
      o.tokenizer_model = a.checkpoint;
  }
  o.source_dir = a.checkpoint;  // its generation_config.json, when it has one that fits
  io::check_export_target(a.out);
  const auto t0 = std::chrono::steady_clock::now();
  std::fprintf(stderr, "export: loading %s ...\n", a.checkpoint.c_str());
  auto model = io::load_hf_model(a.checkpoint, model::Precision::fp32);
  std::fprintf(stderr, "export: writing %s (%s) ...\n", a.out.c_str(), dtype.c_str());
  obs::ProgressOptions po;
  po.label = "exporting";
  po.total = model->num_params() * (dtype == "float32" ? 4 : 2);
  po.unit = obs::ProgressUnit::kBytes;
  obs::Progress bar(po);
  o.progress = [&bar](int64_t n) { bar.advance(n); };
  const auto rep = io::export_hf(*model, a.out, o);
  bar.finish();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("exported %s: %s in %d shard%s%s, in %s; reloaded and checked (max logit difference %.2g, bound %.2g)\n",
              rep.dir.c_str(), obs::format_bytes(double(rep.bytes)).c_str(), rep.num_shards,
              rep.num_shards == 1 ? "" : "s", o.tokenizer_model.empty() ? ", no tokenizer" : ", with tokenizer",
              obs::format_duration(dt).c_str(), rep.max_abs_logit_diff, rep.tolerance);
  std::printf("generation_config.json %s\n", rep.generation_config.c_str());
  if (o.tokenizer_model.empty())
    std::fprintf(stderr,
                 "note: no tokenizer.json or tokenizer.model in %s and no --tokenizer-model: the export has no "
                 "tokenizer files\n",
                 a.checkpoint.c_str());
}

}  // namespace

void register_export(CLI::App& app) {
  auto [cmd, a] = add_command<ExportArgs>(
      app, "export", "Write a Hugging Face folder from a checkpoint (checked by reloading it)",
      "CHECKPOINT is a training checkpoint folder (.../checkpoints/step_N) or any Hugging Face Llama folder.\n"
      "The output gets config.json, generation_config.json, model safetensors (sharded by size, with\n"
      "model.safetensors.index.json when there are several), and the tokenizer files when a tokenizer is\n"
      "known (the checkpoint's own, or --tokenizer-model): tokenizer.json and tokenizer_config.json copied\n"
      "as they are, or tokenizer.model + tokenizer_config.json + special_tokens_map.json.\n\n"
      "Examples:\n"
      "  llamatrain export runs/zh/checkpoints/step_500 --hf out/llama-zh\n"
      "  llamatrain export runs/zh/checkpoints/step_500 --hf out/llama-zh-fp32 --dtype fp32 --max-shard-size 2GB\n",
      run_export);
  cmd->add_option("checkpoint", a->checkpoint, "checkpoint folder (step_N) or Hugging Face folder")->required();
  cmd->add_option("--hf", a->out,
                  "output folder: new, empty, or a previous export (replaced whole once the new one checks out)")
      ->required();
  cmd->add_option("--dtype", a->dtype, "bf16 | fp32")->capture_default_str();
  cmd->add_option("--tokenizer-model", a->tokenizer_model,
                  "tokenizer.model, tokenizer.json or a folder holding them to include (default: the checkpoint's)");
  cmd->add_option("--max-shard-size", a->max_shard_size, "largest safetensors shard")->capture_default_str();
}

}  // namespace llamatrain::cli
