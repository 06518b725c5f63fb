// Placeholder registration for `llamatrain data` until the data pipeline (issue 3) lands here.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/error.h"

namespace llamatrain::cli {

void register_data(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "(not built yet) see issue 3");
  cmd->callback([] { fail("llamatrain data is not built yet\nhint: see issue 3"); });
}

}  // namespace llamatrain::cli
