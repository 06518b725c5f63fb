// Option validators and the parse-failure message; see options.h.
#include "cli/options.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace llamatrain::cli {

namespace {

std::string bound_text(double v) { return fmt::format("{}", v); }

}  // namespace

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  const std::string range =
      hi >= std::numeric_limits<int32_t>::max() ? fmt::format(">= {}", lo) : fmt::format("from {} to {}", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end != '\0' || errno == ERANGE)
          return fmt::format("got '{}', expected an integer {}", s, range);
        if (v < lo || v > hi) return fmt::format("got {}, expected an integer {}", v, range);
        return {};
      },
      hi >= std::numeric_limits<int32_t>::max() ? fmt::format(">={}", lo) : fmt::format("{}..{}", lo, hi));
}

CLI::Validator number_in(double lo, double hi, bool lo_open) {
  std::string range;
  if (std::isinf(hi))
    range = fmt::format("{} {}", lo_open ? ">" : ">=", bound_text(lo));
  else
    range = fmt::format("{} {} and <= {}", lo_open ? ">" : ">=", bound_text(lo), bound_text(hi));
  return CLI::Validator(
      [lo, hi, lo_open, range](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !std::isfinite(v))
          return fmt::format("got '{}', expected a finite number {}", s, range);
        if ((lo_open ? v <= lo : v < lo) || v > hi) return fmt::format("got {}, expected a number {}", s, range);
        return {};
      },
      std::isinf(hi) ? fmt::format("{}{}", lo_open ? ">" : ">=", bound_text(lo))
                     : fmt::format("{}{}, {}]", lo_open ? "(" : "[", bound_text(lo), bound_text(hi)));
}

std::string parse_failure_message(const CLI::App* app, const CLI::Error& e) {
  // The subcommand being parsed: the deepest one the command line selected.
  std::string command = "llamatrain";
  const CLI::App* current = app;
  while (!current->get_subcommands().empty()) {
    current = current->get_subcommands().front();
    command += " " + current->get_name();
  }
  std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    std::vector<std::string> args = current->remaining();
    if (args.empty()) args = app->remaining();
    const bool option = !args.empty() && args[0].starts_with("-");
    what =
        fmt::format("{}: unknown {} {}, expected only the {} its help lists", command, option ? "option" : "argument",
                    fmt::join(args, " "), current == app ? "commands and options" : "options");
  } else if (current == app && !app->remaining().empty() && !app->remaining()[0].starts_with("-")) {
    std::vector<std::string> names;
    for (const CLI::App* sub : app->get_subcommands({})) names.push_back(sub->get_name());
    what = fmt::format("unknown command '{}', expected one of: {}", app->remaining()[0], fmt::join(names, ", "));
  } else if (what.rfind("Could not convert: ", 0) == 0) {
    // "Could not convert: --workers = abc"
    const std::string rest = what.substr(19);
    const size_t eq = rest.find(" = ");
    if (eq != std::string::npos)
      what = fmt::format("{}: got '{}', expected a number", rest.substr(0, eq), rest.substr(eq + 3));
  }
  return fmt::format("error: {}\nhint: `{} --help` lists the options, with examples\n", what, command);
}

CLI::Option* add_device_option(CLI::App* cmd, std::string* device) {
  return cmd
      ->add_option("--device", *device,
                   "cpu | cuda (an NVIDIA GPU; gpu also) | auto (cuda where usable, else cpu) | ref (the reference "
                   "kernels: slow, for checking results)")
      ->capture_default_str();
}

}  // namespace llamatrain::cli
