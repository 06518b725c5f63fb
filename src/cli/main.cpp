// llamatrain entry point: builds the CLI11 app from the per-command register_* functions, runs it,
// and turns a llamatrain::Error into a plain "error: ..." message and exit code 1 (the only place it
// is caught). Command-line mistakes get CLI11's codes (100-115) with the same "error:" style. A failed
// allocation, a std::filesystem failure or any other library exception is also caught here, as a
// last resort, so no failure ends in an abort; each has its cause fixed where it is thrown.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/file.h"

int main(int argc, char** argv) {
  CLI::App app{"llamatrain: continued pretraining and full fine-tuning of Llama models, one native program.\n\n"
               "Examples:\n"
               "  llamatrain preprocess --input corpus.jsonl --tokenizer-model tokenizer.model \\\n"
               "                        --output-prefix data/corpus --append-eod --workers 8\n"
               "  llamatrain data inspect data/corpus_text_document\n"
               "  llamatrain plan configs/llama2_7b.yaml model.data.data_prefix=[1.0,data/corpus_text_document] \\\n"
               "                  --nodes 4 --hardware trn1.32xlarge\n"
               "  llamatrain train configs/llama2_7b.yaml model.init_from=/models/Llama-2-7b-hf \\\n"
               "                   model.data.data_prefix=[1.0,data/corpus_text_document] "
               "exp_manager.explicit_log_dir=runs/cpt\n"
               "  llamatrain report runs/cpt -o cpt.html\n"
               "  llamatrain export runs/cpt/checkpoints/step_500 --hf out/cpt-step500\n"
               "  llamatrain generate out/cpt-step500 --prompt \"The capital of France is\"\n"
               "  llamatrain bench --model stories110m --seq 256 --batch 8 --precision bf16-mixed\n"};
  app.set_version_flag("--version", std::string("llamatrain ") + LLAMATRAIN_VERSION);
  app.require_subcommand(1);
  namespace cli = llamatrain::cli;
  app.failure_message(cli::parse_failure_message);
  // The subcommands, in the order `llamatrain --help` lists them.
  for (auto register_command :
       {cli::register_train, cli::register_generate, cli::register_bench, cli::register_preprocess, cli::register_data,
        cli::register_export, cli::register_eval, cli::register_diagnose, cli::register_plan, cli::register_report,
        cli::register_doctor, cli::register_tokenizer})
    register_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const llamatrain::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory: a buffer could not be allocated\n"
                         "hint: the job needs more memory than the machine has free: make it smaller (a smaller model, "
                         "batch or sequence length) or free memory\n");
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    std::fprintf(stderr, "error: %s\n", llamatrain::filesystem_error_message(e).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "error: writing the output failed: %s\nhint: check where stdout goes (a full disk?)\n",
                 std::strerror(errno));
    return 1;
  }
  return 0;
}
