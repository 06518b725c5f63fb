// `llamatrain train --demo`: a short training run of a tiny Llama on built-in text with byte-level
// tokens (the demo tokenizer: <unk> <s> </s> + 256 bytes), printing loss, tokens/s and grad norm,
// then a greedy sample from the trained model (BOS + prompt, as `generate` does) and optionally a
// Hugging Face export with the tokenizer.model, which `llamatrain generate` loads. Every option is
// range-checked and the export folder is checked before training, so no run is lost at the end.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/file.h"
#include "core/memory.h"
#include "core/rng.h"
#include "data/demo_corpus.h"
#include "data/tokenizer.h"
#include "io/hf_checkpoint.h"
#include "kernels/cpu/ops.h"
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
  const auto tokenizer = data::Tokenizer::from_serialized(data::demo_tokenizer_model(), "demo tokenizer");
  model::LlamaConfig cfg = model::preset_config(o.model);
  cfg.vocab_size = data::kDemoVocabSize;
  cfg.bos_id = tokenizer.bos_id();
  cfg.eos_id = tokenizer.eos_id();
  if (o.seq >= int(text.size()) - 1) fail("--seq: got {}, expected < {} (the demo text length)", o.seq, text.size() - 1);
  if (int64_t(o.batch) * o.seq > std::numeric_limits<int32_t>::max())
    fail("--batch {} x --seq {}: {} tokens per step, expected at most {}", o.batch, o.seq, int64_t(o.batch) * o.seq,
         std::numeric_limits<int32_t>::max());
  cfg.max_seq_len = std::max(cfg.max_seq_len, o.seq);
  const auto precision = model::parse_precision(o.precision);
  const int B = o.batch, T = o.seq;
  {
    const auto ct = precision == model::Precision::fp32 ? cpu::ComputeType::f32 : cpu::ComputeType::bf16;
    const int64_t state = model::LlamaModel::state_bytes(cfg, precision);
    const int64_t activations = model::LlamaModel::activation_bytes(cfg, precision, B, T) +
                                cpu::lmhead_ce_scratch_bytes(B * T, cfg.dim, cfg.vocab_size, ct);
    check_memory_fits(state + activations, fmt::format("train --demo with {} in {} at batch {} x seq {}", o.model,
                                                       o.precision, B, T),
                      fmt::format("weights, gradients and optimizer state {:.1f} GB, activations {:.1f} GB",
                                  state / 1e9, activations / 1e9),
                      "lower --batch or --seq, or pick a smaller --model");
  }
  // The export folder is checked now: a mistake there must not cost the training run.
  if (!o.export_dir.empty()) check_output_dir(o.export_dir, io::hf_export_files(), "--export");
  model::LlamaModel model(cfg, precision, o.seed);
  model.init_random();
  std::printf("demo: %s model, %.2fM parameters, %s, batch %d x seq %d, %d steps, byte-level text of %zu bytes\n",
              o.model.c_str(), double(model.num_params()) / 1e6, o.precision.c_str(), o.batch, o.seq, o.steps,
              text.size());
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T);
  model::AdamWConfig opt;
  opt.lr = o.lr;
  auto t_start = std::chrono::steady_clock::now();
  auto t_log = t_start;
  double loss_sum = 0;
  int loss_count = 0;
  for (int step = 1; step <= o.steps; step++) {
    // Each sequence is a random window w of T bytes, read after BOS as generation reads a prompt:
    // tokens = [BOS, w[0], ..., w[T-2]], targets = [w[0], ..., w[T-1]] (byte b is id b + 3).
    for (int b = 0; b < B; b++) {
      const uint64_t start = random_u32(o.seed, uint32_t(step), 1, uint64_t(b)) % (text.size() - T);
      for (int t = 0; t < T; t++) {
        const int32_t id = uint8_t(text[start + t]) + data::kDemoByteOffset;
        if (t + 1 < T) tokens[size_t(b) * T + t + 1] = id;
        targets[size_t(b) * T + t] = id;
      }
      tokens[size_t(b) * T] = cfg.bos_id;
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

  // Greedy continuation of a prompt with the trained weights, read as `generate` reads it.
  const std::string prompt = "The miller";
  std::vector<int> ids = {cfg.bos_id};
  for (int id : tokenizer.encode(prompt)) ids.push_back(id);
  const int new_tokens = std::min(120, cfg.max_seq_len - int(ids.size()));
  model.reset_cache(int(ids.size()) + new_tokens);
  std::vector<float> logits(cfg.vocab_size);
  for (size_t i = 0; i < ids.size(); i++) model.decode_step(logits.data(), ids[i], int(i));
  std::vector<int> generated;
  for (int i = 0; i < new_tokens; i++) {
    const int next = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (next == cfg.eos_id) break;
    generated.push_back(next);
    if (i + 1 < new_tokens) model.decode_step(logits.data(), next, int(ids.size()) + i);
  }
  std::printf("sample (greedy): %s%s\n", prompt.c_str(), tokenizer.decode(generated).c_str());
  if (!o.export_dir.empty()) {
    io::save_hf_checkpoint(model, o.export_dir, "float32", 5'000'000'000,
                           {{"tokenizer.model", data::demo_tokenizer_model()}});
    std::printf("exported Hugging Face checkpoint with tokenizer.model to %s (try: llamatrain generate %s "
                "--prompt \"The miller\")\n",
                o.export_dir.c_str(), o.export_dir.c_str());
  }
}

}  // namespace

void register_train(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand("train", "Train a Llama model (--demo: a tiny model on built-in text)");
  cmd->footer(
      "Examples:\n"
      "  llamatrain train --demo\n"
      "  llamatrain train --demo --steps 500 --precision bf16-sr --export /tmp/demo-hf\n"
      "  llamatrain generate /tmp/demo-hf --prompt \"The miller\"      # sample from the export");
  cmd->add_option("config", o->config, "YAML config (NeMo megatron_llama_config.yaml key names)");
  cmd->add_option("overrides", o->overrides, "key=value overrides, e.g. trainer.max_steps=100");
  cmd->add_flag("--help-config", o->help_config, "List every config key with its type, default and meaning");
  cmd->add_flag("--demo", o->demo, "Train the tiny model on built-in text (byte-level tokens)");
  cmd->add_option("--model", o->model, "Preset: tiny, stories15m, stories42m, ...")->capture_default_str();
  cmd->add_option("--precision", o->precision, "fp32 | bf16-mixed | bf16-sr")->capture_default_str();
  cmd->add_option("--steps", o->steps, "Optimizer steps")->capture_default_str()->check(integer_in(1));
  cmd->add_option("--batch", o->batch, "Sequences per step")->capture_default_str()->check(integer_in(1));
  cmd->add_option("--seq", o->seq, "Tokens per sequence")->capture_default_str()->check(integer_in(1));
  cmd->add_option("--lr", o->lr, "Peak learning rate (warmup, then cosine to 10%)")->capture_default_str()
      ->check(number_in(0, std::numeric_limits<double>::infinity(), true));
  cmd->add_option("--warmup", o->warmup, "Warmup steps")->capture_default_str()->check(integer_in(0));
  cmd->add_option("--log-interval", o->log_interval, "Steps between log lines")->capture_default_str()
      ->check(integer_in(1));
  cmd->add_option("--seed", o->seed, "Init and data seed")->capture_default_str();
  cmd->add_option("--export", o->export_dir,
                  "Write a Hugging Face checkpoint and tokenizer.model to this folder at the end (checked before "
                  "training; an existing folder is replaced only if it holds a previous export)");
  cmd->callback([o] {
    if (o->help_config) {
      std::fputs(train::config_help().c_str(), stdout);
      return;
    }
    if (o->demo) {
      model::parse_precision(o->precision);
      run_demo(*o);
      return;
    }
    if (o->config.empty())
      fail("train: no config given, expected a YAML file (or --demo)\nhint: llamatrain train configs/tiny.yaml "
           "model.data.data_prefix=[1.0,data/corpus_text_document]; `llamatrain train --help` has examples");
    const auto loaded = train::load_config(o->config, o->overrides);
    train::run_training(loaded.config, loaded.notes);
  });
}

}  // namespace llamatrain::cli
