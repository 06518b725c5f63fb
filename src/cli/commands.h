// One register_<command> per subcommand, each in src/cli/<command>.cpp: it adds the subcommand,
// its options and help text with examples to the app, and sets its callback (add_command in
// options.h); main() lists them. Callbacks throw llamatrain::Error for user mistakes; main() catches
// it and exits 1.
#pragma once

namespace CLI {
class App;
}

namespace llamatrain::cli {

void register_train(CLI::App& app);
void register_generate(CLI::App& app);
void register_bench(CLI::App& app);
void register_preprocess(CLI::App& app);
void register_data(CLI::App& app);
void register_export(CLI::App& app);
void register_eval(CLI::App& app);
void register_diagnose(CLI::App& app);
void register_plan(CLI::App& app);
void register_report(CLI::App& app);
void register_doctor(CLI::App& app);
void register_tokenizer(CLI::App& app);
void register_data_samples(CLI::App& data_cmd);  // `data samples`, added by register_data

}  // namespace llamatrain::cli
