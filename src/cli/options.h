// Shared pieces of the subcommands' option handling: add_command (a subcommand, its help and the
// options its callback runs on), range validators whose messages say plainly what was given and what
// is allowed ("--workers: got 0, expected an integer >= 1"; CLI11's own range validators print their
// open end as 1.79769e+308), and main()'s message for parse failures.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

namespace llamatrain::cli {

// A subcommand and the options its flags fill (alive as long as the app).
template <class Options>
struct Command {
  CLI::App* cmd;
  Options* options;
};

// Adds subcommand `name` to parent with its one-line summary and its help footer (what it does, with
// examples); once the command line is parsed, its callback calls run(options). The caller adds the
// options, writing into *options:
//   auto [cmd, o] = add_command<BenchOptions>(app, "bench", "Time training steps ...", kFooter, run_bench);
//   cmd->add_option("--seq", o->seq, "tokens per sequence");
template <class Options, class Run>
Command<Options> add_command(CLI::App& parent, const std::string& name, const std::string& summary,
                             const std::string& footer, Run run) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(name, summary);
  cmd->footer(footer);
  cmd->callback([options, run] { run(*options); });
  return {cmd, options.get()};
}

// An integer in [lo, hi].
CLI::Validator integer_in(int64_t lo, int64_t hi = std::numeric_limits<int32_t>::max());
// A finite number in [lo, hi] (or (lo, hi] with lo_open: "greater than lo").
CLI::Validator number_in(double lo, double hi, bool lo_open = false);

// CLI11 failure message in the program's style: "error: ..." and a hint naming the --help to read;
// unexpected arguments are listed in the order given (CLI11 reverses them).
std::string parse_failure_message(const CLI::App* app, const CLI::Error& e);

// The --device option of the commands that run a model (model::choose_device reads it).
CLI::Option* add_device_option(CLI::App* cmd, std::string* device);

}  // namespace llamatrain::cli
