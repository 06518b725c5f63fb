// `llamatrain data samples CONFIG [key=value ...]`: prints, in order, the samples the trainer will
// read for a split (token ids, labels and loss mask, or decoded text), built by the same code the
// trainer uses (train/data.h), so a user sees what the model will see before spending compute. When
// some targets are out of the loss (fine-tuning prompts, chat headers and user turns, padding), the
// text is shown again with the ids the loss trains on between ⟦ and ⟧.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "data/gpt_dataset.h"
#include "data/tokenizer.h"
#include "io/hf_config.h"
#include "config/config.h"
#include "train/data.h"

namespace llamatrain::cli {

namespace {

// The sample's text (its inputs and the last target) with every run of ids whose prediction is in
// the loss between ⟦ and ⟧; control ids (<s>, </s>) shown as their pieces. DecodeStream gives each
// id its share of the decoded text.
std::string loss_view(const data::Tokenizer& tok, const std::vector<int32_t>& tokens,
                      const std::vector<int32_t>& targets) {
  const size_t T = tokens.size();
  std::vector<int> ids(tokens.begin(), tokens.end());
  std::vector<bool> trained(T, false);
  for (size_t k = 1; k < T; k++) trained[k] = targets[k - 1] >= 0;
  if (T > 0 && targets[T - 1] >= 0) {
    ids.push_back(targets[T - 1]);
    trained.push_back(true);
  }
  // Trailing untrained repeats of one id (padding) are counted, not shown.
  size_t shown = ids.size();
  while (shown > 1 && !trained[shown - 1] && ids[shown - 1] == ids.back()) shown--;
  if (ids.size() - shown < 2) shown = ids.size();
  data::DecodeStream stream(tok);
  std::string out;
  bool open = false;
  for (size_t k = 0; k < shown; k++) {
    if (trained[k] != open) {
      out += open ? "\u27E7" : "\u27E6";
      open = trained[k];
    }
    const std::string piece = stream.push(ids[k]);
    out += piece.empty() && tok.is_control(ids[k]) ? tok.id_to_piece(ids[k]) : piece;
  }
  out += stream.finish();
  if (open) out += "\u27E7";
  if (shown < ids.size()) out += fmt::format(" (+{} padding ids {})", ids.size() - shown, ids.back());
  return out;
}

struct SamplesArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string split = "train";
  int64_t first = 4;
  int64_t start = 0;
  std::string tokenizer_model;
  bool json = false;
};

void run_samples(const SamplesArgs& a) {
  const auto loaded = train::load_config(a.config, a.overrides);
  const train::TrainConfig& cfg = loaded.config;
  const data::Split split = a.split == "train"        ? data::Split::train
                            : a.split == "validation" ? data::Split::valid
                                                      : data::Split::test;
  std::string tok_path = a.tokenizer_model.empty() ? cfg.model.tokenizer_model_path() : a.tokenizer_model;
  std::optional<data::Tokenizer> tok;
  if (!tok_path.empty()) tok.emplace(tok_path);
  const int32_t eod = cfg.model.init_from ? io::read_hf_config(*cfg.model.init_from).eos_id : 2;
  const auto requested = data::requested_num_samples(cfg.trainer.max_steps, cfg.model.global_batch_size,
                                                     std::max<int64_t>(1, cfg.trainer.val_check_interval),
                                                     cfg.trainer.limit_val_batches, cfg.trainer.limit_test_batches);
  const train::TrainData data(cfg, tok ? &*tok : nullptr, eod, requested);
  if (!data.has(split))
    fail("data samples: the {} split is empty\nhint: check model.data.splits_string (or the {}_ds files)", a.split,
         a.split);
  const int T = int(data.seq_length());
  train::MicroBatch batch = data.micro_batch(1);
  const std::vector<int32_t>& tokens = batch.tokens;
  const std::vector<int32_t>& targets = batch.targets;
  const std::vector<std::string>& sources = data.sources(split);  // names, when the split blends several
  // Fine-tuning: the files, the chat template and the rows rejected, as the trainer logs them.
  if (!a.json && cfg.model.data.fine_tuning) std::printf("%s", data.describe().c_str());
  if (!a.json)
    std::printf("%s split: %lld samples of %d tokens; showing %lld from sample %lld\n", a.split.c_str(),
                (long long)data.size(split), T, (long long)a.first, (long long)a.start);
  for (int64_t i = a.start; i < a.start + a.first; i++) {
    const int64_t valid = data.fill(split, i, batch);
    // Document boundaries: the positions where a new document starts (attention stops before them).
    std::vector<int> starts;
    for (int t = 1; t < int(batch.doc_start.size()); t++)
      if (batch.doc_start[size_t(t)] == t) starts.push_back(t);
    if (a.json) {
      std::vector<int> loss_mask(targets.size());
      for (size_t t = 0; t < targets.size(); t++) loss_mask[t] = targets[t] >= 0;
      nlohmann::json j{{"index", i}, {"tokens", tokens}, {"labels", targets}, {"loss_mask", loss_mask}};
      if (!batch.positions.empty()) j["position_ids"] = batch.positions;
      if (data.documents()) j["document_starts"] = starts;
      if (!sources.empty()) j["source"] = sources[size_t(batch.source[0])];
      std::printf("%s\n", j.dump().c_str());
      continue;
    }
    std::printf("sample %lld (%lld of %d targets in the loss%s):\n", (long long)i, (long long)valid, T,
                sources.empty() ? "" : fmt::format("; source {}", sources[size_t(batch.source[0])]).c_str());
    if (tok) {
      const std::vector<int> ids(tokens.begin(), tokens.end());
      std::printf(
          "  text: %s\n",
          nlohmann::json(tok->decode(ids)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("  tokens:");
      for (int32_t t : tokens) std::printf(" %d", t);
      std::printf("\n");
    }
    if (valid < T && tok)
      std::printf("  loss: %s\n", nlohmann::json(loss_view(*tok, tokens, targets))
                                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                                      .c_str());
    if (data.documents()) {
      std::printf("  documents start at: 0");
      for (int t : starts) std::printf(" %d", t);
      std::printf(" (attention stops at each)\n");
    }
    if (valid < T) {
      std::printf("  masked target positions:");
      for (int t = 0; t < T; t++)
        if (targets[size_t(t)] < 0) std::printf(" %d", t);
      std::printf("\n");
    }
  }
}

}  // namespace

void register_data_samples(CLI::App& data_cmd) {
  auto [cmd, a] = add_command<SamplesArgs>(
      data_cmd, "samples", "Print the samples the trainer will read, in order",
      "CONFIG and key=value overrides are those of `llamatrain train`; the samples are built by the trainer's\n"
      "own data code, in the order it consumes them (global sample index --start, --start + 1, ...).\n\n"
      "Examples:\n"
      "  llamatrain data samples configs/tiny.yaml model.data.data_prefix=[1.0,data/book_text_document] --first 2\n"
      "  llamatrain data samples configs/llama2_7b.yaml --split validation --first 3 --tokenizer-model tok.model\n"
      "  llamatrain data samples run.yaml --first 100 --json > samples.jsonl    # ids and labels (-100 = masked)\n"
      "  llamatrain data samples sft.yaml model.data.chat=true model.data.chat_template=llama3 --first 2\n\n"
      "The `loss:` line shows the text again with the ids the loss trains on between \u27E6 and \u27E7 (for chat "
      "data:\n"
      "each assistant turn and its end token); --json gives loss_mask, 1 per target position in the loss. Where\n"
      "the split blends several data_prefix sources, each sample names its source (as validation's per-source\n"
      "figures do).\n",
      run_samples);
  cmd->add_option("config", a->config, "YAML config")->required();
  cmd->add_option("overrides", a->overrides, "key=value overrides");
  cmd->add_option("--split", a->split, "train | validation | test")
      ->capture_default_str()
      ->check(CLI::IsMember({"train", "validation", "test"}));
  cmd->add_option("--first", a->first, "number of samples")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  cmd->add_option("--start", a->start, "first global sample index")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--tokenizer-model", a->tokenizer_model, "decode with this tokenizer (default: the config's)");
  cmd->add_flag("--json", a->json,
                "one JSON object per sample: index, tokens, labels, loss_mask (position_ids and document_starts "
                "where the data restarts them)");
}

}  // namespace llamatrain::cli
