// TrainData: see data.h.
#include "train/data.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/file.h"
#include "data/chat.h"
#include "data/indexed_token_source.h"

namespace llamatrain::train {

namespace {

constexpr std::array<data::Split, 3> kSplits = {data::Split::train, data::Split::valid, data::Split::test};

const char* split_title(data::Split s) {
  return s == data::Split::train ? "train" : s == data::Split::valid ? "validation" : "test";
}

}  // namespace

TrainData::TrainData(const TrainConfig& config, const data::Tokenizer* tokenizer, int32_t eod_id,
                     std::array<int64_t, 3> requested, int64_t vocab_size) {
  const DataConfig& d = config.model.data;
  seq_length_ = d.seq_length;
  fine_tuning_ = d.fine_tuning;
  sample_options_ = config.sample_options(tokenizer ? tokenizer->eos_id() : eod_id);
  if (!fine_tuning_) {
    own_positions_ = d.reset_position_ids;
    documents_ = d.reset_attention_mask;
    const data::SourceOpener open =
        [vocab_size](const std::string& prefix) -> std::shared_ptr<const data::TokenSource> {
      auto source = data::open_indexed_source(prefix);
      if (vocab_size <= 0) return source;
      return std::make_shared<data::VocabCheckedSource>(std::move(source), vocab_size, prefix + ".bin");
    };
    const data::GptDataConfig gpt = config.gpt_data_config();
    gpt_ = data::build_gpt_datasets(gpt, requested, open);
    if (!gpt_[0])
      fail("model.data.splits_string \"{}\": the train split is empty, expected a positive train weight",
           d.splits_string);
    for (data::Split s : kSplits) {
      const auto& ds = gpt_[int(s)];
      if (!ds) continue;
      description_ += fmt::format("  {:<10} {} samples of {} tokens\n", split_title(s), ds->size(), seq_length_);
      const data::BlendSpec spec = data::parse_data_prefix(data::split_data_prefix(gpt, s));
      if (spec.prefixes.size() > 1) source_names_[int(s)] = data::source_names(spec);
    }
    return;
  }
  if (!tokenizer)
    fail("fine-tuning data needs a tokenizer, got none\nhint: set model.tokenizer.model (a tokenizer.model) or "
         "model.init_from (a Hugging Face folder that holds one)");
  const std::array<const SftDatasetConfig*, 3> cfgs = {&d.train_ds, &d.validation_ds, &d.test_ds};
  std::optional<data::ChatTemplate> chat;
  if (d.chat) {
    chat = data::load_chat_template(
        d.chat_template, data::find_tokenizer_config(tokenizer->path(), config.model.init_from.value_or("")));
    description_ += fmt::format("  chat template: {}\n", chat->source);
  }
  for (data::Split s : kSplits) {
    const SftDatasetConfig& c = *cfgs[int(s)];
    if (c.file_names.empty()) continue;
    data::SftConfig sc = c.sft_config(data::sft_pad_id(*tokenizer));
    sc.seq_length = seq_length_;
    sc.chat = chat;
    if (sc.pack) own_positions_ = documents_ = true;  // examples attend to themselves only
    std::vector<data::SftExample> examples;
    std::vector<std::string> rejected;  // first file:line: reason of each file
    for (const std::string& f : c.file_names) {
      data::SftStats stats;
      auto part = data::load_sft_jsonl(f, *tokenizer, sc, &stats);
      description_ += fmt::format("  {:<10} {}: {}\n", split_title(s), f, data::format_sft_stats(stats));
      examples.insert(examples.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
      rejected.insert(rejected.end(), stats.locations.begin(), stats.locations.end());
    }
    if (examples.empty())
      fail("model.data.{}_ds: no usable examples in {}{}{}\nhint: {}",
           s == data::Split::train   ? "train"
           : s == data::Split::valid ? "validation"
                                     : "test",
           fmt::join(c.file_names, ", "), rejected.empty() ? "" : "; rows rejected:\n  ", fmt::join(rejected, "\n  "),
           d.chat ? "rows of model.data.chat are {\"messages\": [{\"role\": ..., \"content\": ...}]} or Alpaca's "
                    "{\"instruction\", \"input\", \"output\"}"
                  : "check label_key and prompt_template against the JSONL fields (model.data.chat=true for "
                    "conversation rows)");
    sft_[int(s)] = std::make_shared<data::SftDataset>(std::move(examples), sc, uint32_t(config.model.seed), c.shuffle);
    if (sc.pack) description_ += fmt::format("  {:<10} {}\n", split_title(s), sft_[int(s)]->describe_packing());
  }
  if (!sft_[0]) fail("model.data.train_ds.file_names is empty, expected at least one JSONL file");
}

int64_t TrainData::size(data::Split s) const {
  if (fine_tuning_) return sft_[int(s)] ? sft_[int(s)]->size() : 0;
  return gpt_[int(s)] ? gpt_[int(s)]->size() : 0;
}

int64_t TrainData::fill(data::Split s, int64_t first, int B, int32_t* tokens, int32_t* targets, int32_t* positions,
                        int32_t* doc_start, int64_t* real, int* source) const {
  const int64_t T = seq_length_, n = size(s);
  CHECK(n > 0, "fill from an empty split");
  int64_t valid = 0;
  data::GptSample sample;
  std::vector<int32_t> text;
  for (int b = 0; b < B; b++) {
    const int64_t i = first + b;
    if (fine_tuning_) {
      sft_[int(s)]->get(i, &sample);  // SftDataset reshuffles per epoch past its size
    } else {
      const auto& ds = *gpt_[int(s)];
      text.resize(size_t(ds.text_length()));
      const int64_t real = ds.sample_text(i % n, text.data());
      data::make_gpt_sample(&sample, text.data(), real, T, sample_options_);
      if (source != nullptr) source[b] = ds.source_of(i % n);
    }
    if (source != nullptr && fine_tuning_) source[b] = 0;
    CHECK(int64_t(sample.tokens.size()) == T && int64_t(sample.labels.size()) == T);
    if (real != nullptr) real[b] = sample.real;
    for (int64_t t = 0; t < T; t++) {
      tokens[b * T + t] = sample.tokens[size_t(t)];
      const bool keep = sample.loss_mask[size_t(t)] > 0 && sample.labels[size_t(t)] >= 0;
      targets[b * T + t] = keep ? sample.labels[size_t(t)] : -100;
      valid += keep;
      if (positions != nullptr) positions[b * T + t] = sample.position_ids[size_t(t)];
      if (doc_start != nullptr) doc_start[b * T + t] = sample.doc_start[size_t(t)];
    }
  }
  return valid;
}

int64_t TrainData::fill(data::Split s, int64_t first, MicroBatch& mb) const {
  std::vector<int32_t> starts;  // doc_start of the batch, to count pairs also where the model gets none
  std::vector<int32_t>& docs = mb.doc_start.empty() ? starts : mb.doc_start;
  docs.resize(mb.tokens.size());
  std::vector<int64_t> real(size_t(mb.B));
  mb.source.resize(size_t(mb.B));
  const int64_t valid =
      fill(s, first, mb.B, mb.tokens.data(), mb.targets.data(), mb.positions.empty() ? nullptr : mb.positions.data(),
           docs.data(), real.data(), mb.source.data());
  // Pairs per document over the real inputs: the sequences' real prefixes, cut at document starts.
  mb.real_tokens = 0;
  mb.attention_pairs = 0;
  const int64_t T = seq_length_;
  for (int b = 0; b < mb.B; b++) {
    const int32_t* d = docs.data() + int64_t(b) * T;
    mb.real_tokens += real[size_t(b)];
    for (int64_t t = 0; t < real[size_t(b)]; t++) mb.attention_pairs += double(t - d[t]) + 0.5;  // len^2 / 2 a document
  }
  return valid;
}

MicroBatch TrainData::micro_batch(int B) const {
  MicroBatch mb;
  mb.B = B;
  mb.T = int(seq_length_);
  const size_t n = size_t(B) * size_t(seq_length_);
  mb.tokens.resize(n);
  mb.targets.resize(n);
  if (own_positions_) mb.positions.resize(n);
  if (documents_) mb.doc_start.resize(n);
  return mb;
}

std::string TrainData::describe() const { return description_; }

}  // namespace llamatrain::train
