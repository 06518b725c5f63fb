// Placeholder registration for `llamatrain generate` (being written in this issue).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/error.h"

namespace llamatrain::cli {

void register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "(not built yet)");
  cmd->callback([] { fail("llamatrain generate is not built yet"); });
}

}  // namespace llamatrain::cli
