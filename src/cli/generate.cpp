// `llamatrain generate HF_DIR --prompt TEXT`: loads a Hugging Face Llama folder, tokenizes with its
// tokenizer.model (BOS first, as Llama 2 does), and samples with a KV cache. Temperature 0 is greedy;
// otherwise softmax(logits / temperature) restricted to the top-p nucleus, drawn from the
// counter-based RNG keyed by --seed, so a seed reproduces a sample exactly.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "cli/commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "io/hf_checkpoint.h"
#include "io/hf_config.h"

namespace llamatrain::cli {

namespace {

struct GenerateOptions {
  std::string model_dir;
  std::string prompt;
  int max_new_tokens = 64;
  float temperature = 0.8f;
  float top_p = 0.9f;
  uint64_t seed = 42;
  std::string precision = "fp32";
  bool print_ids = false;
};

// Picks the next token: argmax at temperature 0, else nucleus sampling with uniform u in [0, 1).
int sample_token(const std::vector<float>& logits, float temperature, float top_p, float u) {
  const int V = int(logits.size());
  if (temperature <= 0.0f) return int(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const float mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> prob(V);
  double sum = 0;
  for (int i = 0; i < V; i++) sum += prob[i] = std::exp(double(logits[i] - mx) / temperature);
  std::vector<int> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
  // Smallest prefix of the sorted distribution whose mass reaches top_p.
  double kept = 0;
  int n_kept = 0;
  while (n_kept < V && (n_kept == 0 || kept < top_p * sum)) kept += prob[order[n_kept++]];
  double r = u * kept;
  for (int i = 0; i < n_kept; i++) {
    r -= prob[order[i]];
    if (r < 0) return order[i];
  }
  return order[n_kept - 1];
}

void run_generate(const GenerateOptions& o) {
  const auto tok_path = (std::filesystem::path(o.model_dir) / "tokenizer.model").string();
  data::Tokenizer tokenizer(tok_path);
  const auto precision = model::parse_precision(o.precision);
  {
    const model::LlamaConfig cfg = io::read_hf_config(o.model_dir);
    const int64_t weights = model::LlamaModel::weight_bytes(cfg, precision);
    check_memory_fits(weights, fmt::format("{} in {}", o.model_dir, o.precision),
                      fmt::format("{:.2f}B parameters at {} bytes each", cfg.num_params() / 1e9,
                                  weights / cfg.num_params()),
                      "use a machine with more memory (generate keeps an fp32 copy of the weights, plus a bf16 "
                      "one in the bf16 modes)");
  }
  auto model = io::load_hf_model(o.model_dir, precision);
  const auto& c = model->config();
  if (tokenizer.vocab_size() > c.vocab_size)
    fail("{}: tokenizer has {} pieces, expected at most vocab_size {} from config.json", tok_path,
         tokenizer.vocab_size(), c.vocab_size);
  std::vector<int> ids = {c.bos_id};
  for (int id : tokenizer.encode(o.prompt)) ids.push_back(id);
  const int total = int(ids.size()) + o.max_new_tokens;
  if (total > c.max_seq_len)
    fail("generate: prompt ({} tokens) + --max-new-tokens {} = {}, expected at most max_position_embeddings {}",
         ids.size(), o.max_new_tokens, total, c.max_seq_len);
  model->reset_cache(total);
  std::vector<float> logits(c.vocab_size);
  for (size_t i = 0; i < ids.size(); i++) model->decode_step(logits.data(), ids[i], int(i));
  std::vector<int> generated;
  std::string printed;
  if (!o.print_ids) std::printf("%s", o.prompt.c_str());
  for (int step = 0; step < o.max_new_tokens; step++) {
    const int next = sample_token(logits, o.temperature, o.top_p, random_uniform(o.seed, uint32_t(step), 0, 0));
    generated.push_back(next);
    if (next == c.eos_id) break;
    if (!o.print_ids) {
      // Decode the whole continuation and print what is new, so multi-byte pieces come out whole.
      std::string text = tokenizer.decode(generated);
      if (text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
        std::printf("%s", text.c_str() + printed.size());
        std::fflush(stdout);
        printed = text;
      }
    }
    if (step + 1 < o.max_new_tokens) model->decode_step(logits.data(), next, int(ids.size() + step));
  }
  if (o.print_ids) {
    for (size_t i = 0; i < generated.size(); i++) std::printf("%s%d", i ? " " : "", generated[i]);
  }
  std::printf("\n");
}

}  // namespace

void register_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Sample text from a Hugging Face Llama folder (KV cache)");
  cmd->footer(
      "Examples:\n"
      "  llamatrain generate /models/Llama-2-7b-hf --prompt \"The capital of France is\"\n"
      "  llamatrain generate out/hf --prompt \"Once upon a time\" --temperature 0 --max-new-tokens 32\n"
      "  llamatrain generate out/hf --prompt \"Hi\" --temperature 0.8 --top-p 0.95 --seed 7");
  cmd->add_option("model", o->model_dir, "HF folder with config.json, *.safetensors and tokenizer.model")
      ->required();
  cmd->add_option("--prompt", o->prompt, "Prompt text (BOS is prepended)")->required();
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling mass")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--precision", o->precision, "fp32 | bf16-mixed | bf16-sr")->capture_default_str();
  cmd->add_flag("--print-ids", o->print_ids, "Print generated token ids instead of text");
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace llamatrain::cli
