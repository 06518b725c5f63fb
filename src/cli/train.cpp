// Placeholder registration for `llamatrain train` (being written in this issue).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/error.h"

namespace llamatrain::cli {

void register_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "(not built yet)");
  cmd->callback([] { fail("llamatrain train is not built yet"); });
}

}  // namespace llamatrain::cli
