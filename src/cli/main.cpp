// llamatrain entry point: builds the CLI11 app from the per-command register_* functions, runs it,
// and turns a llamatrain::Error (or a failed allocation) into a plain message and exit code 1 (the only
// place they are caught).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <new>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "llamatrain: continued pretraining and full fine-tuning of Llama models, one native program.\n\n"
      "Examples:\n"
      "  llamatrain train --demo                                   # tiny model on built-in text\n"
      "  llamatrain preprocess --input corpus.jsonl --tokenizer-model tokenizer.model \\\n"
      "                        --output-prefix data/corpus --append-eod --workers 8\n"
      "  llamatrain data inspect data/corpus_text_document\n"
      "  llamatrain generate /models/Llama-2-7b-hf --prompt \"The capital of France is\"\n"
      "  llamatrain bench --model stories110m --seq 256 --batch 8 --precision bf16-mixed\n"};
  app.set_version_flag("--version", std::string("llamatrain ") + LLAMATRAIN_VERSION);
  app.require_subcommand(1);
  llamatrain::cli::register_train(app);
  llamatrain::cli::register_generate(app);
  llamatrain::cli::register_bench(app);
  llamatrain::cli::register_preprocess(app);
  llamatrain::cli::register_data(app);
  llamatrain::cli::register_export(app);
  llamatrain::cli::register_eval(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const llamatrain::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "error: out of memory: a buffer could not be allocated\n"
                 "hint: lower the batch size or sequence length, use a smaller model or --precision bf16-sr, "
                 "or run on a machine with more memory\n");
    return 1;
  }
  return 0;
}
