// Placeholder registration for `llamatrain preprocess` until the data pipeline (issue 3) lands here.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/error.h"

namespace llamatrain::cli {

void register_preprocess(CLI::App& app) {
  auto* cmd = app.add_subcommand("preprocess", "(not built yet) see issue 3");
  cmd->callback([] { fail("llamatrain preprocess is not built yet\nhint: see issue 3"); });
}

}  // namespace llamatrain::cli
