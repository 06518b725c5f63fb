// `llamatrain train --demo`: a short training run of a tiny Llama on built-in text with byte-level
// tokens (vocab 256), printing loss, tokens/s and grad norm, then a greedy sample from the trained
// model and optionally a Hugging Face export. The full YAML-driven trainer (datasets, schedules,
// checkpoints, parallelism) grows from this file.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/demo_corpus.h"
#include "io/hf_checkpoint.h"
#include "model/llama.h"
#include "train/config.h"
#include "train/trainer.h"

namespace llamatrain::cli {

namespace {

struct TrainOptions {
  std::string config;                  // YAML
  std::vector<std::string> overrides;  // key=value
  bool help_config = false;
  bool demo = false;
  std::string model = "tiny";
  std::string precision = "bf16-mixed";
  int steps = 300;
  int batch = 8;
  int seq = 128;
  float lr = 3e-3f;
  int warmup = 20;
  int log_interval = 25;
  uint64_t seed = 1234;
  std::string export_dir;
};

// Cosine decay to 10% with linear warmup (NeMo's CosineAnnealing shape).
float lr_at(const TrainOptions& o, int step) {
  if (step <= o.warmup) return o.lr * float(step) / float(std::max(1, o.warmup));
  const float progress = float(step - o.warmup) / float(std::max(1, o.steps - o.warmup));
  const float min_lr = 0.1f * o.lr;
  return min_lr + 0.5f * (o.lr - min_lr) * (1.0f + std::cos(3.14159265f * progress));
}

void run_demo(const TrainOptions& o) {
  const std::string_view text = data::demo_corpus();
  model::LlamaConfig cfg = model::preset_config(o.model);
  cfg.vocab_size = 256;  // byte-level tokens: the demo needs no tokenizer file
  if (o.seq >= int(text.size()) - 1) fail("--seq: got {}, expected < {} (the demo text length)", o.seq, text.size() - 1);
  cfg.max_seq_len = std::max(cfg.max_seq_len, o.seq);
  model::LlamaModel model(cfg, model::parse_precision(o.precision), o.seed);
  model.init_random();
  std::printf("demo: %s model, %.2fM parameters, %s, batch %d x seq %d, %d steps, byte-level text of %zu bytes\n",
              o.model.c_str(), double(model.num_params()) / 1e6, o.precision.c_str(), o.batch, o.seq, o.steps,
              text.size());
  const int B = o.batch, T = o.seq;
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T);
  model::AdamWConfig opt;
  opt.lr = o.lr;
  auto t_start = std::chrono::steady_clock::now();
  auto t_log = t_start;
  double loss_sum = 0;
  int loss_count = 0;
  for (int step = 1; step <= o.steps; step++) {
    // Each sequence is a random window of T+1 bytes: tokens = window[:-1], targets = window[1:].
    for (int b = 0; b < B; b++) {
      const uint64_t start = random_u32(o.seed, uint32_t(step), 1, uint64_t(b)) % (text.size() - T - 1);
      for (int t = 0; t < T; t++) {
        tokens[size_t(b) * T + t] = uint8_t(text[start + t]);
        targets[size_t(b) * T + t] = uint8_t(text[start + t + 1]);
      }
    }
    model.zero_grad();
    const auto stats = model.forward_backward(tokens.data(), targets.data(), B, T);
    const float norm = model.optimizer_step(opt, lr_at(o, step), step);
    loss_sum += stats.loss;
    loss_count++;
    if (step % o.log_interval == 0 || step == o.steps || step == 1) {
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - t_log).count();
      std::printf("step %4d/%d | loss %.4f | lr %.2e | grad norm %.3f | %.0f tokens/s\n", step, o.steps,
                  loss_sum / loss_count, lr_at(o, step), norm, double(loss_count) * B * T / dt);
      std::fflush(stdout);
      t_log = now;
      loss_sum = 0;
      loss_count = 0;
    }
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::printf("trained %d steps in %.1f s\n", o.steps, total);

  // Greedy continuation of a prompt with the trained weights.
  const std::string prompt = "The miller";
  const int new_tokens = 120;
  model.reset_cache(int(prompt.size()) + new_tokens);
  std::vector<float> logits(cfg.vocab_size);
  std::string out = prompt;
  for (size_t i = 0; i < prompt.size(); i++) model.decode_step(logits.data(), uint8_t(prompt[i]), int(i));
  for (int i = 0; i < new_tokens; i++) {
    const int next = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(char(next));
    if (i + 1 < new_tokens) model.decode_step(logits.data(), next, int(prompt.size()) + i);
  }
  std::printf("sample (greedy): %s\n", out.c_str());
  if (!o.export_dir.empty()) {
    io::save_hf_checkpoint(model, o.export_dir, "float32");
    std::printf("exported Hugging Face checkpoint to %s\n", o.export_dir.c_str());
  }
}

}  // namespace

void register_train(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand("train", "Train a Llama model (for now: --demo on built-in text)");
  cmd->footer(
      "Examples:\n"
      "  llamatrain train --demo\n"
      "  llamatrain train --demo --steps 500 --precision bf16-sr --export /tmp/demo-hf");
  cmd->add_option("config", o->config, "YAML config (NeMo megatron_llama_config.yaml key names)");
  cmd->add_option("overrides", o->overrides, "key=value overrides, e.g. trainer.max_steps=100");
  cmd->add_flag("--help-config", o->help_config, "List every config key with its type, default and meaning");
  cmd->add_flag("--demo", o->demo, "Train the tiny model on built-in text (byte-level tokens)");
  cmd->add_option("--model", o->model, "Preset: tiny, stories15m, stories42m, ...")->capture_default_str();
  cmd->add_option("--precision", o->precision, "fp32 | bf16-mixed | bf16-sr")->capture_default_str();
  cmd->add_option("--steps", o->steps, "Optimizer steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--batch", o->batch, "Sequences per step")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--seq", o->seq, "Tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--lr", o->lr, "Peak learning rate (warmup, then cosine to 10%)")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Warmup steps")->capture_default_str();
  cmd->add_option("--log-interval", o->log_interval, "Steps between log lines")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", o->seed, "Init and data seed")->capture_default_str();
  cmd->add_option("--export", o->export_dir, "Write a Hugging Face checkpoint here at the end");
  cmd->callback([o] {
    if (o->help_config) {
      std::fputs(train::config_help().c_str(), stdout);
      return;
    }
    if (o->demo) {
      run_demo(*o);
      return;
    }
    if (o->config.empty())
      fail("train: no config given, expected a YAML file\nhint: llamatrain train configs/tiny.yaml "
           "model.data.data_prefix=[1.0,data/corpus_text_document] (or --demo for the built-in demo)");
    const auto loaded = train::load_config(o->config, o->overrides);
    train::run_training(loaded.config, loaded.notes);
  });
}

}  // namespace llamatrain::cli
