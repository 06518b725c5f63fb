// `llamatrain preprocess`: options and help for the JSONL/text -> Megatron .bin/.idx pipeline
// (src/data/preprocess.h does the work). Prints the summary on stderr when done. Megatron-LM's and
// NeMo's preprocess flags are accepted where they change nothing here (--dataset-impl mmap,
// --keep-newlines, ...) or map onto ours (--tokenizer-library huggingface|sentencepiece with
// --tokenizer-type naming the model folder or its tokenizer.json/tokenizer.model); the others are
// refused with what they do there and what to do here.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/file.h"
#include "data/preprocess.h"
#include "data/tokenizer.h"

namespace llamatrain::cli {

namespace {

// Flags of Megatron-LM's tools/preprocess_data.py and NeMo's preprocess_data_for_megatron.py.
struct MegatronFlags {
  std::string dataset_impl, tokenizer_library, tokenizer_type, vocab_file, merge_file, files_filter, lang;
  int partitions = 1, log_interval = 1, vocab_size = 0, vocab_extra_ids = 0;
  bool split_sentences = false, keep_newlines = false, keep_sequential = false, apply_ftfy = false,
       preproc_folder = false;
};

[[noreturn]] void unsupported(const std::string& flag, const std::string& there, const std::string& here,
                              const std::string& todo) {
  fail("{}: {}; {}\nhint: {}", flag, there, here, todo);
}

// Applies the Megatron/NeMo flags to the options, or refuses them plainly.
void apply_megatron_flags(const CLI::App& cmd, const MegatronFlags& m, data::PreprocessOptions* opt) {
  if (cmd.count("--split-sentences"))
    unsupported("--split-sentences",
                "in Megatron it splits every document into sentences with NLTK punkt and stores one sequence per "
                "sentence (for BERT/T5-style training)",
                "llamatrain stores each document as one sequence (GPT-style pretraining) and has no sentence "
                "splitter",
                "drop --split-sentences (and --keep-newlines, --lang); the documents are tokenized whole, "
                "newlines included");
  if (cmd.count("--dataset-impl") && m.dataset_impl != "mmap")
    unsupported("--dataset-impl " + m.dataset_impl,
                "Megatron's " + m.dataset_impl + " format is its older (or RETRO) variant",
                "llamatrain writes the mmap format (MMIDIDX), which current Megatron-LM and NeMo read",
                "use --dataset-impl mmap, or drop the flag");
  if (cmd.count("--vocab-file") || cmd.count("--merge-file"))
    unsupported(
        cmd.count("--vocab-file") ? "--vocab-file" : "--merge-file",
        "in Megatron it gives a GPT-2 BPE or WordPiece vocabulary",
        "llamatrain tokenizes with SentencePiece models (tokenizer.model) and Hugging Face tokenizer.json files",
        "pass --tokenizer-model PATH/tokenizer.model or PATH/tokenizer.json");
  if (cmd.count("--vocab-size") || cmd.count("--vocab-extra-ids"))
    unsupported(cmd.count("--vocab-size") ? "--vocab-size" : "--vocab-extra-ids",
                "in Megatron it configures the NullTokenizer or T5's sentinel tokens",
                "llamatrain takes the vocabulary from the tokenizer file",
                "drop the flag and pass --tokenizer-model PATH/tokenizer.model (or tokenizer.json)");
  if (cmd.count("--apply-ftfy"))
    unsupported("--apply-ftfy", "in NeMo it rewrites every document with ftfy.fix_text before tokenizing",
                "llamatrain tokenizes the text exactly as given",
                "fix the text beforehand (python -m ftfy), or drop the flag");
  if (cmd.count("--files-filter") && m.files_filter != "**/*.json*")
    unsupported("--files-filter " + m.files_filter, "in NeMo it selects the files of a --preproc-folder input",
                "llamatrain takes files, folders and quoted glob patterns in --input directly",
                fmt::format("pass the pattern as an input, e.g. --input 'FOLDER/{}'", m.files_filter));

  if (cmd.count("--tokenizer-library") && m.tokenizer_library != "sentencepiece" &&
      m.tokenizer_library != "huggingface")
    unsupported("--tokenizer-library " + m.tokenizer_library,
                "NeMo's " + m.tokenizer_library +
                    " tokenizers are neither SentencePiece models nor Hugging Face "
                    "tokenizer.json files",
                "llamatrain tokenizes with SentencePiece models and Hugging Face tokenizer.json files",
                "use --tokenizer-library huggingface --tokenizer-type MODEL_FOLDER (or sentencepiece with "
                "--tokenizer-model PATH/tokenizer.model)");
  const bool hf = cmd.count("--tokenizer-library") && m.tokenizer_library == "huggingface";
  const bool spm = cmd.count("--tokenizer-library") && m.tokenizer_library == "sentencepiece";
  // A folder is read by the library's rule (data/tokenizer.h): huggingface prefers tokenizer.json,
  // otherwise tokenizer.model comes first.
  opt->tokenizer_library = hf    ? data::TokenizerLibrary::kHuggingFace
                           : spm ? data::TokenizerLibrary::kSentencePiece
                                 : data::TokenizerLibrary::kAuto;
  if (cmd.count("--tokenizer-type")) {
    const std::string& t = m.tokenizer_type;
    if (is_directory(t) || t.ends_with(".json") || t.ends_with(".model") || is_regular_file(t)) {
      // NeMo's huggingface library names the model folder (or its tokenizer file) here
      const std::string file = data::resolve_tokenizer_path(t, opt->tokenizer_library);
      if (!is_regular_file(file))
        fail("--tokenizer-type {}: {}\nhint: pass the folder of a downloaded Hugging Face model (tokenizer.json or "
             "tokenizer.model), or --tokenizer-model with the file",
             t,
             is_directory(t)
                 ? fmt::format("the folder has no {}", spm ? "tokenizer.model" : "tokenizer.json or tokenizer.model")
                 : "file not found");
      if (opt->tokenizer_model.empty()) opt->tokenizer_model = file;
    } else if (t == "Llama2Tokenizer") {
      opt->bos = true;  // Megatron's Llama 2 tokenizer prepends BOS to every document
    } else if (t != "SentencePieceTokenizer" && t != "GPTSentencePieceTokenizer" && t != "HuggingFaceTokenizer") {
      unsupported("--tokenizer-type " + t,
                  "it names a Megatron tokenizer class or a Hugging Face hub model, neither of which is a "
                  "tokenizer file here",
                  "llamatrain reads SentencePiece models and tokenizer.json files and downloads nothing",
                  "pass the downloaded model folder: --tokenizer-library huggingface --tokenizer-type MODEL_FOLDER "
                  "(or --tokenizer-model PATH/tokenizer.json)");
    }
  }
  if (opt->tokenizer_model.empty())
    fail("--tokenizer-model is required, expected the tokenizer.model or tokenizer.json\nhint: e.g. --tokenizer-model "
         "/models/Llama-2-7b-hf/tokenizer.model, or --tokenizer-library huggingface --tokenizer-type "
         "/models/Llama-3.1-8B");
  if (!is_directory(opt->tokenizer_model) && opt->tokenizer_library == data::TokenizerLibrary::kAuto)
    opt->tokenizer_library = data::TokenizerLibrary::kFile;
  else if (is_directory(opt->tokenizer_model) && !cmd.count("--tokenizer-library"))
    opt->tokenizer_library = data::TokenizerLibrary::kFile;  // a --tokenizer-model folder is refused, naming its file
}

}  // namespace

void register_preprocess(CLI::App& app) {
  auto opt = std::make_shared<data::PreprocessOptions>();
  auto format = std::make_shared<std::string>("jsonl");
  auto quiet = std::make_shared<bool>(false);
  auto mg = std::make_shared<MegatronFlags>();
  auto* cmd =
      app.add_subcommand("preprocess", "Tokenize JSONL/text corpora into Megatron indexed datasets (.bin/.idx)");
  cmd->footer(
      "Writes OUTPUT_PREFIX_<key>_document.bin/.idx per --json-keys key (byte-compatible with Megatron/NeMo),\n"
      "and OUTPUT_PREFIX.stats.json. Conventions follow NeMo's preprocess_data_for_megatron.py: no BOS\n"
      "(unless --bos), --append-eod appends eos (2 for Llama 2) to every document, empty documents are\n"
      "skipped, --need-pad-id only adds one to the vocab size used to choose the dtype (uint16 if < 65500).\n"
      "Malformed lines are skipped and counted (first file:line locations printed); --strict stops at the first.\n"
      "An input that gives no document at all is an error that says what the lines hold.\n\n"
      "Tokens are uint16 in the .bin when the vocabulary has fewer than 65500 ids, else int32 (Llama 3, Qwen2.5).\n\n"
      "Megatron-LM / NeMo flags: --dataset-impl mmap, --tokenizer-library sentencepiece|huggingface,\n"
      "--tokenizer-type (the model folder: huggingface reads its tokenizer.json, else tokenizer.model; its\n"
      "tokenizer file; or SentencePieceTokenizer, GPTSentencePieceTokenizer,\n"
      "HuggingFaceTokenizer; Llama2Tokenizer also prepends BOS, as Megatron's does), --keep-newlines, --lang,\n"
      "--partitions, --log-interval, --keep-sequential-samples and --preproc-folder are accepted (the output is\n"
      "the same); --split-sentences, --vocab-file/--merge-file, --apply-ftfy and other --dataset-impl values are\n"
      "refused with what to do instead.\n\n"
      "Examples:\n"
      "  llamatrain preprocess --input book.jsonl --json-keys text --tokenizer-model llama2/tokenizer.model \\\n"
      "                        --output-prefix data/book --append-eod --workers 8\n"
      "      # -> data/book_text_document.bin/.idx; train with model.data.data_prefix=[1.0,data/book_text_document]\n"
      "  llamatrain preprocess --input 'shards/*.jsonl.zst' corpus_dir/ --tokenizer-model tokenizer.model \\\n"
      "                        --output-prefix data/redpajama --append-eod --need-pad-id --workers 16\n"
      "  llamatrain preprocess --input lines.txt --input-format text --tokenizer-model tokenizer.model \\\n"
      "                        --output-prefix data/lines --append-eod\n"
      "  llamatrain preprocess --input zh.jsonl --tokenizer-library huggingface --tokenizer-type /models/Llama-3.1-8B "
      "\\\n"
      "                        --output-prefix data/zh --append-eod --workers 8   # tokenizer.json, int32 tokens\n");
  cmd->add_option("--input", opt->inputs,
                  "input files, folders or quoted globs (.jsonl/.json/.txt, optionally .gz/.zst)")
      ->required();
  cmd->add_option("--input-format", *format, "jsonl (one JSON object per line) or text (one document per line)")
      ->check(CLI::IsMember({"jsonl", "text"}));
  cmd->add_option("--json-keys", opt->json_keys, "JSON keys to tokenize; one dataset per key (default: text)");
  cmd->add_option("--tokenizer-model", opt->tokenizer_model,
                  "the tokenizer file: a SentencePiece tokenizer.model or a Hugging Face tokenizer.json");
  cmd->add_option("--output-prefix", opt->output_prefix, "output path prefix (its folder must exist)")->required();
  cmd->add_flag("--append-eod", opt->append_eod, "append the eos id after each document");
  cmd->add_flag("--need-pad-id", opt->need_pad_id,
                "count a <pad> token in the vocab size when the tokenizer has none (NeMo)");
  cmd->add_flag("--bos", opt->bos, "prepend the bos id to each document (legacy Megatron; NeMo does not)");
  cmd->add_flag("--strict", opt->strict, "stop with an error at the first malformed line instead of skipping it");
  cmd->add_option("--workers", opt->workers, "tokenizer threads")->check(integer_in(1, data::kMaxWorkers));
  cmd->add_flag("--quiet", *quiet, "no progress, warnings or summary on stderr");

  auto* megatron = cmd->add_option_group("Megatron-LM / NeMo compatibility");
  megatron->add_option("--dataset-impl", mg->dataset_impl, "mmap (the only format written)");
  megatron->add_option("--tokenizer-library", mg->tokenizer_library, "sentencepiece or huggingface (NeMo)");
  megatron->add_option("--tokenizer-type", mg->tokenizer_type,
                       "the model folder (tokenizer.json or tokenizer.model), a tokenizer file, or a Megatron "
                       "SentencePiece tokenizer class");
  megatron->add_flag("--keep-newlines", mg->keep_newlines, "accepted: newlines are always kept");
  megatron->add_option("--lang", mg->lang, "accepted: only used by sentence splitting");
  megatron->add_option("--partitions", mg->partitions, "accepted: the output does not depend on it")
      ->check(integer_in(1));
  megatron->add_option("--log-interval", mg->log_interval, "accepted: progress is timed")->check(integer_in(1));
  megatron->add_flag("--keep-sequential-samples", mg->keep_sequential, "accepted: input order is always kept");
  megatron->add_flag("--preproc-folder", mg->preproc_folder, "accepted: --input takes folders");
  megatron->add_option("--files-filter", mg->files_filter, "refused: use a quoted glob in --input");
  megatron->add_flag("--split-sentences", mg->split_sentences, "refused: documents are stored whole");
  megatron->add_option("--vocab-file", mg->vocab_file, "refused: pass the tokenizer.json instead");
  megatron->add_option("--merge-file", mg->merge_file, "refused: pass the tokenizer.json instead");
  megatron->add_option("--vocab-size", mg->vocab_size, "refused: the vocabulary comes from the model");
  megatron->add_option("--vocab-extra-ids", mg->vocab_extra_ids, "refused: no T5 sentinels");
  megatron->add_flag("--apply-ftfy", mg->apply_ftfy, "refused: the text is tokenized as given");

  cmd->callback([cmd, opt, format, quiet, mg] {
    apply_megatron_flags(*cmd, *mg, opt.get());
    opt->input_format = *format == "text" ? data::InputFormat::kText : data::InputFormat::kJsonl;
    if (*quiet) opt->progress = data::ProgressMode::kOff;
    auto stats = data::run_preprocess(*opt);
    if (!*quiet) std::fputs(data::format_summary(stats, *opt).c_str(), stderr);
  });
}

}  // namespace llamatrain::cli
