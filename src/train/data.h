// The trainer's data: model.data resolved into train / validation / test sample sets, either Megatron
// indexed datasets (data_prefix, blends and splits, via data::build_gpt_datasets) or fine-tuning JSONL
// (train_ds / validation_ds / test_ds, via data::SftDataset). A micro-batch is named by its first global
// sample index: sample i of a split is a pure function of (data, seed, i), so the trainer's only data
// state is consumed_samples, and `llamatrain data samples` prints exactly what the trainer reads.
// Leaves out: data-parallel slicing (the caller passes the sample indices of its rank).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/blend.h"
#include "data/gpt_dataset.h"
#include "data/sft.h"
#include "data/tokenizer.h"
#include "model/llama.h"
#include "config/config.h"

namespace llamatrain::train {

// One micro-batch's host arrays (B, T), sized by TrainData::micro_batch and filled by its fill:
// positions and doc_start stay empty unless the data has them.
struct MicroBatch {
  int B = 0, T = 0;
  std::vector<int32_t> tokens, targets, positions, doc_start;
  std::vector<int> source;  // (B) each sample's source in TrainData::sources (0 unless blended)
  // What the last fill holds: inputs that are text (not padding), and the (query, key) pairs its
  // attention computes over them, causal within each document: sum of len^2 / 2 (obs::step_flops's
  // convention: T^2 / 2 for a sequence of one document).
  int64_t real_tokens = 0;
  double attention_pairs = 0;
  model::Documents documents() const {
    return {positions.empty() ? nullptr : positions.data(), doc_start.empty() ? nullptr : doc_start.data()};
  }
};

class TrainData {
 public:
  // Opens the data of config for sequences of seq_length tokens. tokenizer is required for
  // fine-tuning data (it tokenizes the JSONL); for indexed data it gives the EOD id (else eod_id
  // below). requested[k] are the sample counts Megatron would ask of each split. Throws Error
  // naming the file or key for missing or unusable data.
  // vocab_size > 0: every id read from an indexed dataset is checked against it (an Error with code
  // "data" naming the file, document and position; data::VocabCheckedSource).
  TrainData(const TrainConfig& config, const data::Tokenizer* tokenizer, int32_t eod_id,
            std::array<int64_t, 3> requested, int64_t vocab_size = 0);

  bool has(data::Split s) const { return size(s) > 0; }
  int64_t size(data::Split s) const;  // samples in the split (0 if it does not exist)
  int64_t seq_length() const { return seq_length_; }
  bool fine_tuning() const { return fine_tuning_; }

  // Whether samples restart positions (reset_position_ids, packed fine-tuning examples) and whether
  // they hold several documents that must not see each other (reset_attention_mask, packed examples):
  // then fill's positions and doc_start are the model's model::Documents.
  // The names of the sources a split blends (data/blend.h: source_names), in data_prefix's order;
  // empty unless it blends two or more (validation reports a figure for each).
  const std::vector<std::string>& sources(data::Split s) const { return source_names_[int(s)]; }

  bool own_positions() const { return own_positions_; }
  bool documents() const { return documents_; }

  // tokens and targets (B, T) of global samples first .. first+B-1 of split s; a sample index past
  // the end wraps around (a new pass over the split). targets are -100 where the loss is masked
  // (padding, prompt tokens, EOD inputs with eod_mask_loss). positions and doc_start (B, T), when
  // given, get each token's position and its document's start (data::GptSample); real (B), each
  // sample's inputs that are text (not padding); source (B), each sample's source. Returns the number
  // of unmasked targets.
  int64_t fill(data::Split s, int64_t first, int B, int32_t* tokens, int32_t* targets, int32_t* positions = nullptr,
               int32_t* doc_start = nullptr, int64_t* real = nullptr, int* source = nullptr) const;
  MicroBatch micro_batch(int B) const;
  int64_t fill(data::Split s, int64_t first, MicroBatch& mb) const;

  // Multi-line description for the run's start: sources, weights, samples per split.
  std::string describe() const;

 private:
  int64_t seq_length_ = 0;
  bool fine_tuning_ = false;
  bool own_positions_ = false, documents_ = false;
  data::SampleOptions sample_options_;
  std::array<std::shared_ptr<const data::SampleDataset>, 3> gpt_{};
  std::array<std::shared_ptr<const data::SftDataset>, 3> sft_{};
  std::array<std::vector<std::string>, 3> source_names_;
  std::string description_;
};

}  // namespace llamatrain::train
