// `llamatrain tokenizer train | merge | stats`: options, help and console output for the SentencePiece
// tools of src/data/tokenizer_{train,merge,stats}.h. Progress (a bar over the input bytes, then the
// trainer's phase with its elapsed time) is drawn here; the data layer reports through callbacks.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <limits>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "data/tokenizer_merge.h"
#include "data/tokenizer_stats.h"
#include "data/tokenizer_train.h"
#include "obs/progress.h"

namespace llamatrain::cli {

namespace {

data::TrainInputFormat input_format(const std::string& s) {
  if (s == "jsonl") return data::TrainInputFormat::kJsonl;
  if (s == "text") return data::TrainInputFormat::kText;
  return data::TrainInputFormat::kAuto;
}

// "training bpe ... 12.3s" while the trainer works: redrawn each second on a terminal, one line
// otherwise.
class PhaseTicker {
 public:
  explicit PhaseTicker(std::string label) : label_(std::move(label)), t0_(std::chrono::steady_clock::now()) {
    if (!isatty(fileno(stderr))) {
      std::fprintf(stderr, "%s ...\n", label_.c_str());
      return;
    }
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        std::fprintf(stderr, "\r%s ... %s ", label_.c_str(), obs::format_duration(elapsed()).c_str());
        std::fflush(stderr);
        cv_.wait_for(lock, std::chrono::seconds(1));
      }
      std::fprintf(stderr, "\r\033[K");
    });
  }
  ~PhaseTicker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  std::string label_;
  std::chrono::steady_clock::time_point t0_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

struct TrainArgs {
  data::TokenizerTrainOptions opt;
  std::string format = "auto";  // --input-format
  bool quiet = false;
};

// Trains the model, with a bar over the input bytes and then the trainer's phase on stderr, and
// prints what was read and trained.
void run_train(const TrainArgs& a) {
  data::TokenizerTrainOptions opt = a.opt;
  opt.format = input_format(a.format);
  const auto files = data::tokenizer_train_files(opt);
  uint64_t total = 0;
  for (const auto& f : files) total += std::filesystem::file_size(f);
  std::optional<obs::Progress> bar;
  std::optional<PhaseTicker> ticker;
  if (!a.quiet) {
    obs::ProgressOptions po;
    po.label = "reading";
    po.total = static_cast<int64_t>(total);
    po.unit = obs::ProgressUnit::kBytes;
    // Drawn from the first bytes read: checks that fail before reading print no bar.
    opt.on_read = [&bar, po](int64_t n) {
      if (!bar) bar.emplace(po);
      bar->advance(n);
    };
    opt.on_read_done = [&bar, &ticker, &opt] {
      if (bar) bar->finish();
      if (!opt.verbose) ticker.emplace(fmt::format("training {} ({} pieces)", opt.model_type, opt.vocab_size));
    };
  }
  const auto res = data::run_tokenizer_train(opt);
  ticker.reset();
  if (a.quiet) return;
  std::string cut;
  if (res.cut_documents > 0)
    cut = fmt::format(" ({} longer than {} bytes cut at line breaks into {} sentences)", res.cut_documents,
                      opt.max_sentence_length, res.sentences);
  if (opt.input_sentence_size > 0 && res.sentences > opt.input_sentence_size)
    cut += fmt::format("; the trainer sampled {} of {} sentences", opt.input_sentence_size, res.sentences);
  std::fprintf(stderr, "read %lld documents from %zu file%s%s%s\n", static_cast<long long>(res.documents),
               res.files.size(), res.files.size() == 1 ? "" : "s", cut.c_str(),
               res.skipped_lines ? fmt::format(", {} lines skipped", res.skipped_lines).c_str() : "");
  if (!res.byte_order_mark_files.empty())
    std::fprintf(stderr, "note: %zu file(s) began with a UTF-8 byte-order mark, not read as text: %s\n",
                 res.byte_order_mark_files.size(),
                 fmt::format("{}", fmt::join(res.byte_order_mark_files, ", ")).c_str());
  std::fprintf(stderr, "tokenizer train: %s: %d pieces (%s), trained in %s (reading %s)\n", opt.output.c_str(),
               res.pieces, opt.model_type.c_str(), obs::format_duration(res.train_seconds).c_str(),
               obs::format_duration(res.read_seconds).c_str());
}

void add_train(CLI::App& parent) {
  auto [cmd, a] = add_command<TrainArgs>(
      parent, "train", "Train a SentencePiece model (Llama 2's settings) on JSONL or text",
      "Trains with SentencePiece's own trainer. Llama 2's settings: BPE, byte fallback, split digits,\n"
      "identity normalization, extra whitespace kept, dummy prefix, <unk> <s> </s> at ids 0 1 2, no pad.\n"
      "--vocab-size counts every piece, the 3 specials and the 256 byte pieces included (Llama 2: 32000).\n"
      "Input: JSONL (.jsonl/.json: the strings under --json-keys are the documents, as in preprocess) or\n"
      "text (.txt: one sentence per line); other names are read as JSONL when the first line is a JSON object.\n"
      "Documents longer than --max-sentence-length bytes are cut at line breaks, and the count is printed.\n\n"
      "Examples:\n"
      "  llamatrain tokenizer train --input english.jsonl -o en.model --vocab-size 8000\n"
      "  llamatrain tokenizer train --input zh_corpus/ -o zh.model --vocab-size 20000 --character-coverage 0.9995 \\\n"
      "                             --input-sentence-size 2000000 --threads 16\n"
      "  llamatrain tokenizer merge en.model zh.model -o merged.model   # then compare them with tokenizer stats\n",
      run_train);
  cmd->add_option("--input", a->opt.inputs,
                  "input files, folders or quoted globs (.jsonl/.json/.txt, optionally .gz/.zst)")
      ->required();
  cmd->add_option("--json-keys", a->opt.json_keys, "JSON keys whose strings are documents (default: text)");
  cmd->add_option("--input-format", a->format, "auto (by extension, else content), jsonl or text")
      ->check(CLI::IsMember({"auto", "jsonl", "text"}));
  cmd->add_option("-o,--output", a->opt.output, "the model file to write (OUT.model)")->required();
  cmd->add_option("--vocab-size", a->opt.vocab_size, "pieces in the model, specials and bytes included")
      ->required()
      ->check(integer_in(1));
  cmd->add_option("--model-type", a->opt.model_type, "bpe (Llama 2), unigram, char or word")
      ->check(CLI::IsMember({"bpe", "unigram", "char", "word"}));
  cmd->add_option("--character-coverage", a->opt.character_coverage,
                  "share of the characters covered by pieces; the rest fall back to bytes (default 0.9995)")
      ->check(number_in(0.0, 1.0, true));
  cmd->add_option("--threads", a->opt.threads, "trainer threads (default: every core)")->check(integer_in(1, 1024));
  cmd->add_option("--input-sentence-size", a->opt.input_sentence_size,
                  "sentences the trainer samples from the input (default 0: all)")
      ->check(integer_in(0, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--max-sentence-length", a->opt.max_sentence_length,
                  "longest sentence in bytes; longer documents are cut (default 16384)")
      ->check(integer_in(16));
  cmd->add_flag("--verbose", a->opt.verbose, "show SentencePiece's own training log on stderr");
  cmd->add_flag("--quiet", a->quiet, "no progress or summary");
}

struct MergeArgs {
  data::TokenizerMergeOptions opt;
  std::string scores = "below";  // --new-scores
};

// Merges the models and prints what was added, what was left out, and the new pieces' scores.
void run_merge(const MergeArgs& a) {
  data::TokenizerMergeOptions opt = a.opt;
  opt.new_scores = a.scores == "zero" ? data::NewScores::kZero : data::NewScores::kBelow;
  const auto r = data::run_tokenizer_merge(opt);
  std::fprintf(stderr, "tokenizer merge: %s: %d pieces = %d base + %d added%s\n", opt.output.c_str(), r.total,
               r.base_pieces, r.added, r.padding ? fmt::format(" + {} padding", r.padding).c_str() : "");
  std::fprintf(stderr, "  of %d pieces in %s: %d added, %d already in %s\n", r.add_candidates, opt.add.c_str(), r.added,
               r.already_in_base, opt.base.c_str());
  if (!opt.all_pieces) {
    std::fprintf(stderr, "  added for a script new to %s or a character it lacks: %d (new scripts: %s)\n",
                 opt.base.c_str(), r.added,
                 r.new_scripts.empty() ? "none" : fmt::format("{}", fmt::join(r.new_scripts, ", ")).c_str());
    std::fprintf(
        stderr,
        "  left out, as they could form in text %s already encodes (--all-pieces adds them): %d of "
        "its own letters, digits and punctuation only, %d with a line break, tab or space it spells in bytes\n",
        opt.base.c_str(), r.skipped_base_chars, r.skipped_whitespace);
  }
  if (r.added > 0)
    std::fprintf(stderr, "  new scores: %s\n",
                 opt.new_scores == data::NewScores::kZero
                     ? "0 (above every base score: merged first)"
                     : fmt::format("{:g} to {:g} (below the base's lowest, {:g})", r.lowest_base_score - 1,
                                   r.lowest_new_score, r.lowest_base_score)
                           .c_str());
}

void add_merge(CLI::App& parent) {
  auto [cmd, a] = add_command<MergeArgs>(
      parent, "merge", "Append the pieces of one SentencePiece model that another lacks",
      "Keeps every piece of BASE at its id with its score and type, and BASE's trainer and normalizer settings;\n"
      "appends ADD's normal and user-defined pieces that BASE lacks, in ADD's order (never its <unk>,\n"
      "control or byte pieces). By default a normal piece is added when it holds a letter of a script new to\n"
      "BASE (Han for Llama 2: it has Han characters but almost no Han pieces of two) or a visible character\n"
      "BASE lacks; pieces of BASE's own letters, digits and punctuation only, and pieces with a line break or\n"
      "tab BASE spells in bytes, are left out, and new pieces score below every BASE piece: text of BASE's\n"
      "scripts then encodes exactly as under BASE. --new-scores zero gives them score 0 as Chinese-LLaMA's merge does: "
      "above\n"
      "Llama's scores, so BPE merges them first. --pad-to-multiple appends unused pieces <unused_K>, which\n"
      "no text encodes to. docs/tokenizer.md has the rule and its effect.\n\n"
      "Examples:\n"
      "  llamatrain tokenizer merge llama2/tokenizer.model zh.model -o merged.model\n"
      "  llamatrain tokenizer merge en.model zh.model -o merged.model --pad-to-multiple 128\n"
      "  llamatrain tokenizer merge en.model zh.model -o merged.model --new-scores zero --all-pieces\n"
      "      # as Chinese-LLaMA merges\n",
      run_merge);
  cmd->add_option("BASE", a->opt.base, "the model whose pieces and ids are kept")->required();
  cmd->add_option("ADD", a->opt.add, "the model whose missing pieces are appended")->required();
  cmd->add_option("-o,--output", a->opt.output, "the merged model to write")->required();
  cmd->add_option("--new-scores", a->scores,
                  "below (default: after every BASE merge) or zero (first, as Chinese-LLaMA)")
      ->check(CLI::IsMember({"below", "zero"}));
  cmd->add_flag("--all-pieces", a->opt.all_pieces,
                "add every piece BASE lacks, those left out by default too (they can change BASE's encodings)");
  cmd->add_option("--pad-to-multiple", a->opt.pad_to_multiple,
                  "append unused pieces up to a multiple of M (NeMo's make_vocab_size_divisible_by)")
      ->check(integer_in(1, 1 << 20));
}

struct StatsArgs {
  data::TokenizerStatsOptions opt;
  std::string format = "auto";  // --input-format
  bool json = false;
};

void run_stats(const StatsArgs& a) {
  data::TokenizerStatsOptions opt = a.opt;
  opt.format = static_cast<int>(input_format(a.format));
  const auto stats = data::run_tokenizer_stats(opt);
  if (a.json) {
    std::printf("%s\n", data::stats_json(stats).dump(2).c_str());
  } else {
    std::fputs(data::format_stats_table(stats).c_str(), stdout);
  }
}

void add_stats(CLI::App& parent) {
  auto [cmd, a] = add_command<StatsArgs>(
      parent, "stats", "Compare tokenizers (SentencePiece models, tokenizer.json files) side by side on the same text",
      "For each model: tokens, tokens per character overall and by script (han, latin, other), bytes per token,\n"
      "the share of byte-fallback (and unknown) tokens, and how many documents encode to other ids than under\n"
      "the first model (of them, how many are Latin-only). A token counts toward the characters it covers in\n"
      "equal shares; the byte pieces of a character count toward its script (docs/tokenizer.md).\n\n"
      "Examples:\n"
      "  llamatrain tokenizer stats en.model merged.model --input zh_heldout.jsonl\n"
      "  llamatrain tokenizer stats llama2/tokenizer.model merged.model --input mixed.txt --json > stats.json\n"
      "  llamatrain tokenizer stats Llama-3.1-8B/tokenizer.json Qwen2.5-7B/tokenizer.json --input zh_heldout.jsonl\n",
      run_stats);
  cmd->add_option("MODEL", a->opt.models,
                  "tokenizer.model or tokenizer.json files; the first is the reference for 'docs differ'")
      ->required();
  cmd->add_option("--input", a->opt.inputs, "input files, folders or quoted globs (.jsonl/.json/.txt)")->required();
  cmd->add_option("--json-keys", a->opt.json_keys, "JSON keys whose strings are documents (default: text)");
  cmd->add_option("--input-format", a->format, "auto, jsonl or text (one document per line)")
      ->check(CLI::IsMember({"auto", "jsonl", "text"}));
  cmd->add_flag("--json", a->json, "print JSON on stdout instead of the table");
}

}  // namespace

void register_tokenizer(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenizer", "Train and merge SentencePiece tokenizers; compare any tokenizers");
  cmd->require_subcommand(1);
  cmd->footer("Examples:\n"
              "  llamatrain tokenizer train --input english.jsonl -o en.model --vocab-size 8000\n"
              "  llamatrain tokenizer train --input chinese.jsonl -o zh.model --vocab-size 20000\n"
              "  llamatrain tokenizer merge en.model zh.model -o merged.model\n"
              "  llamatrain tokenizer stats en.model merged.model --input chinese.jsonl\n");
  add_train(*cmd);
  add_merge(*cmd);
  add_stats(*cmd);
}

}  // namespace llamatrain::cli
