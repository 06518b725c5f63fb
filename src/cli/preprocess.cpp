// `llamatrain preprocess`: options and help for the JSONL/text -> Megatron .bin/.idx pipeline
// (src/data/preprocess.h does the work). Prints the summary on stderr when done.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "data/preprocess.h"

namespace llamatrain::cli {

void register_preprocess(CLI::App& app) {
  auto opt = std::make_shared<data::PreprocessOptions>();
  auto format = std::make_shared<std::string>("jsonl");
  auto quiet = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("preprocess", "Tokenize JSONL/text corpora into Megatron indexed datasets (.bin/.idx)");
  cmd->footer(
      "Writes OUTPUT_PREFIX_<key>_document.bin/.idx per --json-keys key (byte-compatible with Megatron/NeMo),\n"
      "and OUTPUT_PREFIX.stats.json. Conventions follow NeMo's preprocess_data_for_megatron.py: no BOS\n"
      "(unless --bos), --append-eod appends eos (2 for Llama 2) to every document, empty documents are\n"
      "skipped, --need-pad-id only adds one to the vocab size used to choose the dtype (uint16 if < 65500).\n"
      "Malformed lines are skipped and counted (first file:line locations printed); --strict stops at the first.\n\n"
      "Examples:\n"
      "  llamatrain preprocess --input book.jsonl --json-keys text --tokenizer-model llama2/tokenizer.model \\\n"
      "                        --output-prefix data/book --append-eod --workers 8\n"
      "      # -> data/book_text_document.bin/.idx; train with model.data.data_prefix=[1.0,data/book_text_document]\n"
      "  llamatrain preprocess --input 'shards/*.jsonl.zst' corpus_dir/ --tokenizer-model tokenizer.model \\\n"
      "                        --output-prefix data/redpajama --append-eod --need-pad-id --workers 16\n"
      "  llamatrain preprocess --input lines.txt --input-format text --tokenizer-model tokenizer.model \\\n"
      "                        --output-prefix data/lines --append-eod\n");
  cmd->add_option("--input", opt->inputs, "input files, folders or quoted globs (.jsonl/.json/.txt, optionally .gz/.zst)")
      ->required();
  cmd->add_option("--input-format", *format, "jsonl (one JSON object per line) or text (one document per line)")
      ->check(CLI::IsMember({"jsonl", "text"}));
  cmd->add_option("--json-keys", opt->json_keys, "JSON keys to tokenize; one dataset per key (default: text)");
  cmd->add_option("--tokenizer-model", opt->tokenizer_model, "SentencePiece tokenizer.model")->required();
  cmd->add_option("--output-prefix", opt->output_prefix, "output path prefix (its folder must exist)")->required();
  cmd->add_flag("--append-eod", opt->append_eod, "append the eos id after each document");
  cmd->add_flag("--need-pad-id", opt->need_pad_id, "count a <pad> token in the vocab size when the tokenizer has none (NeMo)");
  cmd->add_flag("--bos", opt->bos, "prepend the bos id to each document (legacy Megatron; NeMo does not)");
  cmd->add_flag("--strict", opt->strict, "stop with an error at the first malformed line instead of skipping it");
  cmd->add_option("--workers", opt->workers, "tokenizer threads")->check(CLI::PositiveNumber);
  cmd->add_flag("--quiet", *quiet, "no progress, warnings or summary on stderr");
  cmd->callback([opt, format, quiet] {
    opt->input_format = *format == "text" ? data::InputFormat::kText : data::InputFormat::kJsonl;
    if (*quiet) opt->progress = data::ProgressMode::kOff;
    auto stats = data::run_preprocess(*opt);
    if (!*quiet) std::fputs(data::format_summary(stats, *opt).c_str(), stderr);
  });
}

}  // namespace llamatrain::cli
