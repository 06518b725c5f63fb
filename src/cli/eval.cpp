// `llamatrain eval MODEL --data PREFIX ... --chat FILE ...`: loss, perplexity, bits per byte and bits
// per character of a checkpoint or Hugging Face folder.
// - On Megatron indexed datasets (--data): the mean next-token loss over each dataset read as one
//   token stream; on fine-tuning conversations (--chat), over the assistant turns' tokens, as training's
//   validation scores them (eval/text_loss.h). Without a tokenizer (the folder's tokenizer.model or
//   tokenizer.json, or --tokenizer) the per-byte figures are left out.
// - On a multiple-choice benchmark (--task mmlu|ceval|cmmlu --data DIR): k-shot accuracy per subject,
//   category and overall (src/eval/: the files, the prompts, the scoring); under mpirun the ranks share
//   the questions.
// The work is src/eval/'s (text_loss.h, choice_scorer.h); this file reads the options and prints.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/file.h"
#include "data/chat.h"
#include "data/indexed_dataset.h"
#include "data/piece_lengths.h"
#include "data/sft.h"
#include "data/tokenizer.h"
#include "eval/benchmark.h"
#include "eval/choice_scorer.h"
#include "eval/prompts.h"
#include "eval/summary.h"
#include "eval/text_loss.h"
#include "parallel/mpi_communicator.h"
#include "io/hf_checkpoint.h"
#include "obs/progress.h"

namespace llamatrain::cli {

namespace {

struct EvalArgs {
  std::string model_dir;
  std::vector<std::string> prefixes;
  std::vector<std::string> chats;  // conversation JSONL files
  std::string chat_template = "auto";
  bool pack = false;
  int seq = 256;
  int batch = 4;
  int64_t max_windows = 0;
  std::string precision = "fp32";
  std::string device = "cpu";
  std::string tokenizer;  // "" : MODEL/tokenizer.model (else tokenizer.json) if there is one
  bool json = false;
  // Benchmarks (--task): --data is the benchmark's folder.
  std::string task;
  int shots = 5;
  std::vector<std::string> subjects;
  std::string dump;        // JSONL of every question's prompt, log-likelihoods and prediction
  bool seq_given = false;  // --seq-length given (else the model's context)
};

// The tokenizer the per-byte figures need: --tokenizer, else the model folder's (tokenizer.model,
// else tokenizer.json), else none.
std::string find_tokenizer(const EvalArgs& a) {
  if (!a.tokenizer.empty()) return a.tokenizer;
  const std::string inside = data::resolve_tokenizer_path(a.model_dir, data::TokenizerLibrary::kAuto);
  return is_regular_file(inside) ? inside : "";
}

// One result: a line, or with --json one object.
void print_result(const std::string& what, const eval::TextLoss& r, const EvalArgs& a, bool chat, bool text,
                  const std::string& tokenizer_path, const std::string& template_source) {
  if (a.json) {
    nlohmann::ordered_json j{{"data", what}, {"loss", r.loss}, {"perplexity", r.perplexity()}};
    if (chat) {
      j["kind"] = "chat";
      j["samples"] = r.windows;
      j["conversations"] = r.conversations;
      j["truncated"] = r.truncated;
      j["skipped"] = r.skipped;
      j["packed"] = a.pack;
      j["template"] = template_source;
    } else {
      j["windows"] = r.windows;
    }
    j["targets"] = r.targets;
    j["loss_sum"] = r.loss_sum;
    if (text) {
      j["bits_per_byte"] = r.bits(r.text.bytes);
      j["bits_per_char"] = r.bits(r.text.chars);
      j["bytes"] = r.text.bytes;
      j["chars"] = r.text.chars;
      j["tokenizer"] = tokenizer_path;
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    const std::string bits = text ? fmt::format(", {:.4f} bits per byte, {:.4f} bits per character",
                                                r.bits(r.text.bytes), r.bits(r.text.chars))
                                  : "";
    const std::string counts = text ? fmt::format("; {} bytes, {} characters", r.text.bytes, r.text.chars) : "";
    const std::string units =
        chat ? fmt::format("{} assistant tokens of {} conversations in {} {} of {} tokens", r.targets, r.conversations,
                           r.windows, a.pack ? "packed samples" : "samples", a.seq)
             : fmt::format("{} windows of {} tokens", r.windows, a.seq);
    std::printf("%s: loss %.4f, perplexity %.2f%s (%s%s)\n", what.c_str(), r.loss, r.perplexity(), bits.c_str(),
                units.c_str(), counts.c_str());
  }
  std::fflush(stdout);
}

// ---- multiple-choice benchmarks ----

void write_dump(const std::string& path, const eval::Benchmark& b, const std::vector<eval::ScoredQuestion>& scored) {
  std::string out;
  for (const auto& q : scored) {
    const auto& p = q.prepared;
    nlohmann::ordered_json j{{"subject", b.subjects[size_t(p.subject)].name},
                             {"index", p.index},
                             {"shots", p.shots},
                             {"cut", p.cut},
                             {"one_pass", p.one_pass},
                             {"tokens", p.tokens},
                             {"continuation_tokens", p.continuation_tokens},
                             {"context", p.context},
                             {"loglik", q.loglik},
                             {"predicted", q.predicted},
                             {"predicted_norm", q.predicted_norm},
                             {"answer", q.answer}};
    out += j.dump() + "\n";
  }
  write_file_atomic(path, out);
}

nlohmann::ordered_json group_json(const eval::GroupAccuracy& g) {
  return {{"name", g.name},        {"questions", g.micro.questions}, {"correct", g.micro.correct},
          {"acc", g.micro.acc()},  {"acc_norm", g.micro.acc_norm()}, {"acc_macro", g.macro},
          {"subjects", g.subjects}};
}

void print_benchmark_json(const eval::Benchmark& b, const eval::Summary& s, const EvalArgs& a, int seq) {
  nlohmann::ordered_json j{{"task", b.task->name},
                           {"split", b.task->split},
                           {"shots", a.shots},
                           {"seq_length", seq},
                           {"prompts", "lm-evaluation-harness"},
                           {"headline", b.task->headline_macro ? "acc_macro" : "acc"},
                           {"acc", s.overall.micro.acc()},
                           {"acc_norm", s.overall.micro.acc_norm()},
                           {"acc_macro", s.overall.macro},
                           {"questions", s.overall.micro.questions},
                           {"correct", s.overall.micro.correct},
                           {"one_pass", s.one_pass},
                           {"fewer_shots", s.fewer_shots},
                           {"cut", s.cut}};
  j["categories"] = nlohmann::ordered_json::array();
  for (const auto& c : s.categories) j["categories"].push_back(group_json(c));
  j["subjects"] = nlohmann::ordered_json::array();
  for (const auto& x : s.subjects) j["subjects"].push_back(group_json(x));
  std::printf("%s\n", j.dump().c_str());
}

void print_benchmark_table(const eval::Benchmark& b, const eval::Summary& s, const EvalArgs& a, int seq) {
  std::printf("%s %d-shot, %s split, lm-evaluation-harness prompts, %lld questions of %zu subjects, %d tokens "
              "at most\n\n",
              b.task->title, a.shots, b.task->split, (long long)s.overall.micro.questions, s.subjects.size(), seq);
  std::printf("%-42s %9s %8s\n", "subject", "questions", "acc");
  for (const auto& x : s.subjects)
    std::printf("%-42s %9lld %8.4f\n", x.name.c_str(), (long long)x.micro.questions, x.micro.acc());
  std::printf("\n%-24s %8s %9s %8s %8s\n", "category", "subjects", "questions", "micro", "macro");
  for (const auto& c : s.categories)
    std::printf("%-24s %8d %9lld %8.4f %8.4f\n", c.name.c_str(), c.subjects, (long long)c.micro.questions,
                c.micro.acc(), c.macro);
  std::printf("%-24s %8d %9lld %8.4f %8.4f\n", "overall", s.overall.subjects, (long long)s.overall.micro.questions,
              s.overall.micro.acc(), s.overall.macro);
  std::printf("\n%s: %.4f (%s)\n", b.task->title, b.task->headline_macro ? s.overall.macro : s.overall.micro.acc(),
              b.task->headline_macro ? "macro: the mean of the subjects' accuracies, as its papers report it"
                                     : "micro: correct answers over all questions, as its papers report it");
  std::fflush(stdout);
}

// What a run's fit of the prompts to the context did, on stderr.
void note_fitting(const eval::Summary& s, const EvalArgs& a, int seq) {
  if (s.fewer_shots > 0)
    std::fprintf(stderr,
                 "note: %lld questions had fewer than %d examples (the subject has fewer dev rows, or the last ones "
                 "were dropped to fit %d tokens)\n",
                 (long long)s.fewer_shots, a.shots, seq);
  if (s.cut > 0)
    std::fprintf(stderr,
                 "note: %lld questions did not fit %d tokens even without examples: their first tokens were cut\n",
                 (long long)s.cut, seq);
}

void run_benchmark(const EvalArgs& a) {
  const eval::Task& task = eval::parse_task(a.task);
  if (a.prefixes.size() != 1 || !a.chats.empty())
    fail("--task {}: {} --data folders{}, expected one (the benchmark's folder)\nhint: llamatrain eval MODEL --task {} "
         "--data DIR",
         a.task, a.prefixes.size(), a.chats.empty() ? "" : " and --chat files", a.task);
  if (a.shots < 0 || a.shots > 5)
    fail("--shots {}: expected 0 to 5 (the dev split holds 5 examples per subject)", a.shots);
  const eval::Benchmark bench = eval::load_benchmark(task, a.prefixes[0], a.subjects, a.shots > 0);
  // Under mpirun each rank scores its share of the questions and rank 0 prints the whole.
  const auto world = parallel::make_mpi_world();
  const bool rank0 = world->rank() == 0;
  if (*task.note && rank0)
    std::fprintf(stderr, "note: %s (%lld questions)\n", task.note, (long long)bench.num_questions());
  const std::string tokenizer_path = find_tokenizer(a);
  if (tokenizer_path.empty())
    fail("--task {}: {} has no tokenizer.model or tokenizer.json to write the prompts with\nhint: give the model's: "
         "--tokenizer PATH",
         a.task, a.model_dir);
  const data::Tokenizer tok(tokenizer_path);
  auto m =
      io::load_hf_model(a.model_dir, model::parse_precision(a.precision), model::choose_device(a.device, "--device"));
  const int context = m->config().max_seq_len;
  if (a.seq_given && a.seq > context)
    fail("--seq-length {}: the model's context is {} tokens, expected at most that", a.seq, context);
  eval::ScoreOptions o;
  o.shots = a.shots;
  o.seq = a.seq_given ? a.seq : context;
  o.batch = a.batch;
  o.keep_prompts = !a.dump.empty();
  o.rank = world->rank();
  o.ranks = world->size();
  if (o.ranks > 1) o.sum_over_ranks = [&](double* values, size_t n) { world->all_reduce(values, n); };
  std::vector<eval::ScoredQuestion> scored;
  try {
    scored = eval::score_benchmark(*m, tok, bench, o);
  } catch (const std::exception& e) {
    if (o.ranks > 1) world->abort(std::string("error: ") + e.what());  // the others wait in the sum
    throw;
  }
  if (!rank0) return;
  const eval::Summary summary = eval::summarize(bench, scored, a.shots);
  if (!a.dump.empty()) write_dump(a.dump, bench, scored);
  note_fitting(summary, a, o.seq);
  if (a.json)
    print_benchmark_json(bench, summary, a, o.seq);
  else
    print_benchmark_table(bench, summary, a, o.seq);
}

void run_eval(const EvalArgs& a) {
  if (!a.task.empty()) return run_benchmark(a);
  if (a.prefixes.empty() && a.chats.empty())
    fail("eval: nothing to score\nhint: give --data PREFIX (an indexed dataset) or --chat FILE.jsonl (conversations)");
  const auto precision = model::parse_precision(a.precision);
  const model::Device device = model::choose_device(a.device, "--device");
  const std::string tokenizer_path = find_tokenizer(a);
  if (!a.chats.empty() && tokenizer_path.empty())
    fail("--chat: {} has no tokenizer.model or tokenizer.json to render the conversations with\nhint: give the one "
         "the model was trained with: --tokenizer PATH",
         a.model_dir);
  std::optional<data::Tokenizer> tok;
  std::optional<data::PieceLengths> lengths;
  if (!tokenizer_path.empty()) {
    tok.emplace(tokenizer_path);
    lengths = data::piece_lengths(*tok);
  }
  // Training's fine-tuning samples: the template, seq-length + 1 ids an example, pad id as train's.
  data::SftConfig chat_cfg;
  if (!a.chats.empty()) {
    // (auto: the tokenizer_config.json beside the tokenizer, else in the model folder, as train's)
    chat_cfg.chat = data::load_chat_template(a.chat_template, data::find_tokenizer_config(tokenizer_path, a.model_dir));
    data::check_chat_tokens(*chat_cfg.chat, *tok);
    chat_cfg.seq_length = a.seq;
    chat_cfg.pad_id = data::sft_pad_id(*tok);
    chat_cfg.pack = a.pack;
  }
  auto m = io::load_hf_model(a.model_dir, precision, device);
  if (a.seq > m->config().max_seq_len)
    fail("--seq-length {}: the model's context is {} tokens, expected at most that", a.seq, m->config().max_seq_len);
  if (!lengths)
    std::fprintf(stderr,
                 "note: bits per byte and per character left out: %s has no tokenizer.model (give one with "
                 "--tokenizer)\n",
                 a.model_dir.c_str());
  eval::TextLossOptions o;
  o.seq = a.seq;
  o.batch = a.batch;
  o.max_windows = a.max_windows;
  for (const auto& prefix : a.prefixes)
    print_result(prefix, eval::stream_loss(*m, prefix, o, lengths ? &*lengths : nullptr, tokenizer_path), a, false,
                 lengths.has_value(), tokenizer_path, "");
  for (const auto& file : a.chats)
    print_result(file, eval::chat_loss(*m, file, o, *tok, chat_cfg, &*lengths, tokenizer_path), a, true, true,
                 tokenizer_path, chat_cfg.chat->source);
}

}  // namespace

void register_eval(CLI::App& app) {
  auto [cmd, a] = add_command<EvalArgs>(
      app, "eval",
      "Loss, perplexity and bits per byte / per character of a checkpoint or Hugging Face folder on datasets",
      "Each --data prefix (a Megatron .bin/.idx pair) is read in order as one token stream and cut into windows\n"
      "of --seq-length + 1 tokens (stride --seq-length); the loss is the mean cross-entropy of every target.\n"
      "Bits per byte is the targets' losses summed, in bits, over the UTF-8 bytes of text they stand for\n"
      "(per character likewise): unlike perplexity it compares models with different tokenizers on the same\n"
      "text. It needs the tokenizer: the model folder's tokenizer.model or tokenizer.json, or --tokenizer.\n"
      "Each --chat file's rows are rendered with the chat template (--template) and cut to --seq-length + 1\n"
      "tokens as fine-tuning data is; the loss is the mean over the assistant turns' tokens only (prompts,\n"
      "system turns and padding are not scored), the figure training's validation reports for the same\n"
      "file at the same sequence length.\n\n"
      "Examples:\n"
      "  llamatrain eval runs/zh/checkpoints/step_500 --data data/zh_val_text_document --data "
      "data/en_val_text_document\n"
      "  llamatrain eval /models/Llama-2-7b-hf --data data/book_text_document --seq-length 4096 --batch 1 "
      "--max-windows 64 --precision bf16-mixed\n"
      "  llamatrain eval runs/zh/hf --data data/zh_val_text_document --json | jq .bits_per_char   # vs the base "
      "model's\n"
      "  llamatrain eval runs/pretrain/checkpoints/step_100 --data data/val_text_document --tokenizer tokenizer.model\n"
      "  llamatrain eval runs/sft/hf --chat data/chat_val.jsonl --seq-length 2048   # = the run's val_loss on that "
      "file\n\n"
      "Multiple-choice benchmarks (--task): --data is the folder the benchmark's archive unpacks into\n"
      "(MMLU: data/ with dev/ and test/; C-Eval: dev/ and val/, its test answers being unpublished;\n"
      "CMMLU: dev/ and test/). Each question is written as lm-evaluation-harness writes it, after --shots\n"
      "examples from dev, and the choice whose \" A\" .. \" D\" is the most likely is the model's answer.\n"
      "Accuracy per subject, per category, and overall (micro: over questions; macro: the mean over\n"
      "subjects, C-Eval's and CMMLU's published average). --batch is sequences per forward pass.\n\n"
      "  llamatrain eval runs/zh/hf --task cmmlu --data cmmlu_v1_0_1            # did Chinese improve?\n"
      "  llamatrain eval runs/zh/hf --task ceval --data ceval-exam --json | jq .acc_macro\n"
      "  llamatrain eval /models/Llama-2-7b-hf --task mmlu --data mmlu/data --precision bf16-mixed   # English kept?\n"
      "  llamatrain eval runs/zh/hf --task mmlu --data mmlu --shots 0 --subjects college_physics,virology --dump "
      "q.jsonl\n"
      "  mpirun -np 8 llamatrain eval runs/zh/hf --task cmmlu --data cmmlu_v1_0_1   # each rank a share of the "
      "questions\n",
      run_eval);
  cmd->add_option("model", a->model_dir, "checkpoint folder (step_N) or Hugging Face folder")->required();
  cmd->add_option("--data", a->prefixes, "dataset prefix (repeatable); with --task, the benchmark's folder");
  cmd->add_option("--chat", a->chats,
                  "conversation JSONL ({\"messages\"}, ShareGPT or Alpaca rows; repeatable): only the assistant "
                  "turns are scored, as fine-tuning trains them")
      ->check(CLI::ExistingFile);
  cmd->add_option("--template", a->chat_template,
                  "chat template for --chat: auto (the model folder's tokenizer_config.json) | llama2 | llama3 | "
                  "chatml | chatml_plain | qwen3")
      ->capture_default_str();
  cmd->add_flag("--pack", a->pack,
                "--chat: pack conversations into each sample (each attends to itself only), as pack: true trains");
  cmd->add_option("--seq-length", a->seq,
                  "tokens per window (--task: the most tokens a prompt may have; default the model's context)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20))
      ->each([seq_given = &a->seq_given](const std::string&) { *seq_given = true; });
  cmd->add_option("--batch", a->batch, "windows per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-windows", a->max_windows,
                  "stop after this many windows (samples with --chat) per dataset (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--precision", a->precision, "fp32 | bf16-mixed | bf16-sr")->capture_default_str();
  add_device_option(cmd, &a->device);
  cmd->add_option("--tokenizer", a->tokenizer,
                  "tokenizer.model or tokenizer.json the data was made with (default: the model folder's, if it "
                  "has one)");
  cmd->add_flag("--json", a->json, "one JSON object per dataset (benchmark) on stdout");
  cmd->add_option(
      "--task", a->task,
      fmt::format("score a multiple-choice benchmark: {} (--data is then its folder)", eval::task_names(" | ")));
  cmd->add_option("--shots", a->shots, "--task: examples from the dev split before each question (0 to 5)")
      ->capture_default_str();
  cmd->add_option("--subjects", a->subjects, "--task: only these subjects (file-name stems, comma separated)")
      ->delimiter(',');
  cmd->add_option("--dump", a->dump,
                  "--task: write every question's prompt, choice log-likelihoods and prediction to this JSONL file");
}

}  // namespace llamatrain::cli
