// `llamatrain generate HF_DIR --prompt TEXT`: loads a Hugging Face Llama, Qwen2 or Mistral folder,
// tokenizes with its tokenizer (tokenizer.json or tokenizer.model, or --tokenizer-model; BOS first when
// the tokenizer has one: Qwen2's has none), and samples with a KV cache until max_new_tokens or any of the
// config's eos ids (Llama 3 lists several).
// Temperature 0 is greedy; otherwise softmax(logits / temperature) restricted to the top-p nucleus,
// drawn from the counter-based RNG keyed by --seed, so a seed reproduces a sample exactly. Ids past
// the tokenizer's pieces (a padded vocab) are never sampled. The text printed is exactly the decoded
// ids (data::DecodeStream holds back only unfinished characters).
// --chat renders the prompt as a user turn (after --system's, if given) with the model's chat template
// (the tokenizer_config.json beside its tokenizer, or --template NAME), as training renders
// conversations, adds the assistant header and stops at the template's end of turn too; it prints the
// reply only. --print-prompt-ids prints the prompt's ids and stops (the template checked by eye).
// The sampling loop is model/sampling.h's; this file reads the options, builds the prompt and prints.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/file.h"
#include "core/memory.h"
#include "data/chat.h"
#include "data/tokenizer.h"
#include "io/hf_checkpoint.h"
#include "model/machine.h"
#include "model/sampling.h"
#include "io/hf_config.h"

namespace llamatrain::cli {

namespace {

struct GenerateOptions {
  std::string model_dir;
  std::string tokenizer_model;  // default: MODEL_DIR (its tokenizer.json, else its tokenizer.model)
  std::string prompt;
  int max_new_tokens = 64;
  float temperature = 0.8f;
  float top_p = 0.9f;
  uint64_t seed = 42;
  std::string precision = "fp32";
  std::string device = "cpu";
  bool print_ids = false;
  bool chat = false;
  std::string chat_template;  // "" (auto with --chat) or a built-in name; implies chat
  std::string system;         // with chat: a system turn first
  bool no_thinking = false;   // qwen3: the empty reasoning block of enable_thinking=False
  bool print_prompt_ids = false;
};

// The prompt's ids: the text after BOS, or (chat) the rendered user turn with its assistant header.
// *stop gets the template's end-of-turn id with chat.
std::vector<int> prompt_ids(const GenerateOptions& o, const data::Tokenizer& tokenizer, const std::string& tok_path,
                            std::vector<int>* stop) {
  std::vector<int> ids;
  if (!o.chat && o.chat_template.empty()) {
    if (!o.system.empty()) fail("generate: --system needs --chat (or --template NAME)\nhint: add --chat");
    if (o.no_thinking) fail("generate: --no-thinking needs --chat (or --template qwen3)\nhint: add --chat");
    // BOS as the tokenizer adds it: Llama's <s> or <|begin_of_text|>; none for Qwen2, whose config.json
    // still names a bos_token_id.
    if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
    for (int id : tokenizer.encode(o.prompt)) ids.push_back(id);
    return ids;
  }
  const std::string config = data::find_tokenizer_config(tok_path, o.model_dir);
  if ((o.chat_template.empty() || o.chat_template == "auto") && config.empty())
    fail("generate --chat: {} has no tokenizer_config.json to take the chat template from\nhint: name one with "
         "--template llama2, llama3, chatml, chatml_plain or qwen3",
         o.model_dir);
  data::ChatTemplate t = data::load_chat_template(o.chat_template.empty() ? "auto" : o.chat_template, config);
  data::check_chat_tokens(t, tokenizer);
  std::vector<data::ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  messages.push_back({"user", o.prompt});
  std::vector<data::ChatSegment> segments;
  std::string why;
  if (o.no_thinking && t.format != data::ChatFormat::qwen3)
    fail("generate --no-thinking: the chat template ({}) has no reasoning blocks to leave out\nhint: drop "
         "--no-thinking, or use a Qwen3 model (--template qwen3)",
         t.source);
  t.enable_thinking = !o.no_thinking;
  if (!data::render_chat(t, messages, true, &segments, &why)) fail("generate --chat: {}", why);
  std::vector<uint8_t> in_loss;
  data::encode_chat(segments, tokenizer, &ids, &in_loss);
  stop->push_back(tokenizer.piece_to_id(data::chat_end_of_turn(t)));
  return ids;
}

// The tokenizer: --tokenizer-model, else the folder's own tokenizer.json (with the
// tokenizer_config.json beside it), else its SentencePiece tokenizer.model.
std::string tokenizer_path(const GenerateOptions& o) {
  if (!is_directory(o.model_dir))
    fail("generate: model folder {} {}, expected a Hugging Face folder with config.json, *.safetensors (or "
         "pytorch_model*.bin) and tokenizer.model\nhint: check the path (`llamatrain export CHECKPOINT --hf DIR`, "
         "or training with convert_to_hf=true, writes such a folder)",
         o.model_dir, path_exists(o.model_dir) ? "is not a folder" : "does not exist");
  if (!o.tokenizer_model.empty()) return o.tokenizer_model;
  const std::filesystem::path dir(o.model_dir);
  const std::string path =
      (dir / (path_exists((dir / "tokenizer.json").string()) ? "tokenizer.json" : "tokenizer.model")).string();
  if (!path_exists(path))
    fail("generate: {} has no tokenizer.json or tokenizer.model, expected the tokenizer next to the weights\n"
         "hint: copy the model's tokenizer files there, or name one with --tokenizer-model PATH",
         o.model_dir);
  return path;
}

// The prompt and the tokens to come must fit the model's context, and its weights the device.
void check_fits(const GenerateOptions& o, const model::LlamaConfig& cfg, size_t prompt_tokens, const char* prompt_extra,
                model::Precision precision, model::Device device) {
  const int64_t total = int64_t(prompt_tokens) + o.max_new_tokens;
  if (total > cfg.max_seq_len)
    fail("generate: prompt ({} tokens{}) + --max-new-tokens {} = {}, expected at most "
         "max_position_embeddings {}\nhint: lower --max-new-tokens to {} or shorten the prompt",
         prompt_tokens, prompt_extra, o.max_new_tokens, total, cfg.max_seq_len,
         std::max<int64_t>(0, cfg.max_seq_len - int64_t(prompt_tokens)));
  const int64_t weights = model::LlamaModel::weight_bytes(cfg, precision);
  model::check_device_memory_fits(
      device, weights, fmt::format("{} in {}", o.model_dir, o.precision),
      fmt::format("{:.2f}B parameters at {} bytes each", cfg.num_params() / 1e9, weights / cfg.num_params()),
      "use a machine with more memory (generate keeps an fp32 copy of the weights, plus a bf16 one in the bf16 "
      "modes)");
}

void print_ids(const std::vector<int>& ids) {
  for (size_t i = 0; i < ids.size(); i++) std::printf("%s%d", i ? " " : "", ids[i]);
  std::printf("\n");
}

void run_generate(const GenerateOptions& o) {
  const std::string tok_path = tokenizer_path(o);
  data::Tokenizer tokenizer(tok_path);
  const auto precision = model::parse_precision(o.precision);
  const model::Device device = model::choose_device(o.device, "--device");
  const model::LlamaConfig cfg = io::read_hf_config(o.model_dir);
  if (tokenizer.vocab_size() > cfg.vocab_size)
    fail("{}: tokenizer has {} pieces, expected at most vocab_size {} from config.json\nhint: use the "
         "tokenizer that came with the model",
         tok_path, tokenizer.vocab_size(), cfg.vocab_size);
  model::GenerationOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.temperature = o.temperature;
  g.top_p = o.top_p;
  g.seed = o.seed;
  // Ids past the tokenizer's pieces (a vocab padded for speed, e.g. 32000 pieces in a 32064 embedding)
  // have no text: they are never sampled.
  g.pieces = tokenizer.vocab_size();
  g.stop = {cfg.eos_id};
  g.stop.insert(g.stop.end(), cfg.extra_eos_ids.begin(), cfg.extra_eos_ids.end());
  const std::vector<int> ids = prompt_ids(o, tokenizer, tok_path, &g.stop);
  const bool chat = o.chat || !o.chat_template.empty();
  if (o.print_prompt_ids) return print_ids(ids);
  const char* prompt_extra = chat ? " with its chat template" : tokenizer.bos_id() >= 0 ? " with BOS" : "";
  check_fits(o, cfg, ids.size(), prompt_extra, precision, device);
  auto model = io::load_hf_model(o.model_dir, precision, device);
  data::DecodeStream text(tokenizer);
  auto print = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  if (!o.print_ids && !chat) print(o.prompt);
  const std::vector<int> generated = model::generate_tokens(*model, ids, g, [&](int id) {
    if (!o.print_ids) print(text.push(id));
  });
  if (o.print_ids) return print_ids(generated);
  print(text.finish());
  std::printf("\n");
}

}  // namespace

void register_generate(CLI::App& app) {
  auto [cmd, o] = add_command<GenerateOptions>(
      app, "generate", "Sample text from a Hugging Face Llama folder (KV cache)",
      "Examples:\n"
      "  llamatrain generate /models/Llama-2-7b-hf --prompt \"The capital of France is\"\n"
      "  llamatrain generate out/hf --prompt \"Once upon a time\" --temperature 0 --max-new-tokens 32\n"
      "  llamatrain generate out/hf --prompt \"Hi\" --temperature 0.8 --top-p 0.95 --seed 7\n"
      "  llamatrain generate /models/Qwen2.5-0.5B --prompt \"The capital of France is\" --temperature 0\n"
      "  llamatrain generate out/hf --prompt \"Hi\" --tokenizer-model /models/Llama-2-7b-hf/tokenizer.model\n"
      "  llamatrain generate /models/Qwen2.5-7B-Instruct --chat --prompt \"用一句话介绍北京\" --temperature 0\n"
      "  llamatrain generate out/hf --template llama2 --system \"Be brief.\" --prompt \"Hi\"\n"
      "  llamatrain generate out/hf --chat --prompt \"Hi\" --print-prompt-ids   # the template's ids, no model run\n"
      "  llamatrain generate /models/Qwen3-8B --chat --no-thinking --prompt \"Hi\"",
      run_generate);
  cmd->add_option("model", o->model_dir,
                  "HF folder with config.json, *.safetensors or pytorch_model*.bin, and tokenizer.json or "
                  "tokenizer.model")
      ->required();
  cmd->add_option("--prompt", o->prompt, "Prompt text (BOS is prepended when the tokenizer has one)")->required();
  cmd->add_option("--tokenizer-model", o->tokenizer_model,
                  "tokenizer.model, or a folder with tokenizer.json, to use instead of MODEL's");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(integer_in(1));
  cmd->add_option("--temperature", o->temperature, "0 = greedy")
      ->capture_default_str()
      ->check(number_in(0, std::numeric_limits<double>::infinity()));
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling mass")->capture_default_str()->check(number_in(0, 1, true));
  cmd->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--precision", o->precision, "fp32 | bf16-mixed | bf16-sr")->capture_default_str();
  add_device_option(cmd, &o->device);
  cmd->add_flag("--print-ids", o->print_ids, "Print generated token ids instead of text");
  cmd->add_flag("--chat", o->chat,
                "The prompt is a user turn rendered with the model's chat template (its tokenizer_config.json); "
                "prints the reply, which stops at the template's end of turn");
  cmd->add_option(
      "--template", o->chat_template,
      "With --chat (implied): llama2 | llama3 | chatml | chatml_plain | qwen3 | auto instead of the model's");
  cmd->add_option("--system", o->system, "With --chat: a system turn before the prompt");
  cmd->add_flag("--no-thinking", o->no_thinking,
                "With a Qwen3 template: answer without reasoning (an empty <think> block after the assistant header, "
                "as its template renders enable_thinking=False)");
  cmd->add_flag("--print-prompt-ids", o->print_prompt_ids, "Print the prompt's token ids and stop (no model run)");
}

}  // namespace llamatrain::cli
