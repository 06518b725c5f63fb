// Placeholder registration for `llamatrain bench` (being written in this issue).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/error.h"

namespace llamatrain::cli {

void register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "(not built yet)");
  cmd->callback([] { fail("llamatrain bench is not built yet"); });
}

}  // namespace llamatrain::cli
