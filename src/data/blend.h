// Blending several GPT datasets by weight, as Megatron-LM's BlendedMegatronDatasetBuilder and
// BlendedDataset do (docs/formats.md §2.13): data_prefix [w1, p1, w2, p2, ...] -> normalized weights,
// per-dataset sample counts ceil(ceil(N*w)*(1+surplus)), and the greedy blending index built like
// helpers.cpp build_blending_indices. Also the top-level builder that turns model.data settings
// into train/valid/test SampleDatasets. Leaves out: opening files (the caller passes an opener).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"
#include "data/token_source.h"

namespace llamatrain::data {

// Megatron-LM's BlendedMegatronDatasetConfig.mid_level_dataset_surplus default.
constexpr double kDefaultBlendSurplus = 0.005;

// A dataset of fixed-length token samples: a GptDataset split or a blend of them.
class SampleDataset {
 public:
  virtual ~SampleDataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t text_length() const = 0;  // L + extra
  // Writes sample i (text_length()) and returns the number of real tokens.
  virtual int64_t sample_text(int64_t i, int32_t* text) const = 0;
  // Which of the blend's sources (data_prefix's order) sample i comes from: 0 unless blended.
  virtual int source_of(int64_t i) const { return 0; }
};

class GptSplitDataset : public SampleDataset {
 public:
  explicit GptSplitDataset(std::shared_ptr<const GptDataset> ds) : ds_(std::move(ds)) {}
  int64_t size() const override { return ds_->size(); }
  int64_t text_length() const override { return ds_->text_length(); }
  int64_t sample_text(int64_t i, int32_t* text) const override { return ds_->sample_text(i, text); }
  const GptDataset& gpt() const { return *ds_; }

 private:
  std::shared_ptr<const GptDataset> ds_;
};

// numpy.sum of a float64 array (pairwise summation, bit-exact) and Megatron's normalize().
double numpy_sum(const double* a, int64_t n);
std::vector<double> normalize_weights(const std::vector<double>& w);
// ceil(ceil(n * w_k) * (1 + surplus)) for each normalized weight (MLM _get_size_per_split_per_dataset).
std::vector<int64_t> samples_per_dataset(const std::vector<double>& normalized_weights, int64_t n, double surplus);

// Greedy blending index (size): for sample i, with x = max(i, 1), pick the dataset k with the
// largest weights[k]*x - count[k]; ties go to the lowest k (strict '>' scanning from k = 0).
// dataset_sample_index[i] = count[k] before the increment.
void build_blending_indices(int16_t* dataset_index, int64_t* dataset_sample_index, const std::vector<double>& weights,
                            int64_t size);

class BlendedDataset : public SampleDataset {
 public:
  // weights are normalized again here (Megatron does so too). Fails if a dataset would be asked
  // for more samples than it has, or datasets differ in text_length.
  BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets, std::vector<double> weights, int64_t size);
  int64_t size() const override { return size_; }
  int64_t text_length() const override { return datasets_[0]->text_length(); }
  int64_t sample_text(int64_t i, int32_t* text) const override;
  int source_of(int64_t i) const override;
  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }
  const std::vector<double>& weights() const { return weights_; }
  const std::vector<std::shared_ptr<const SampleDataset>>& datasets() const { return datasets_; }

 private:
  std::vector<std::shared_ptr<const SampleDataset>> datasets_;
  std::vector<double> weights_;
  int64_t size_;
  std::vector<int16_t> dataset_index_;         // (size)
  std::vector<int64_t> dataset_sample_index_;  // (size)
};

// data_prefix as in the YAML: [w1, p1, w2, p2, ...] (every odd entry a number) or [p1, p2, ...]. A
// prefix may carry a name for its per-source figures, "NAME:PREFIX" (NAME of letters, digits and
// "_.+-", before any '/': "zh:/data/zh_text_document"); names must differ.
struct BlendSpec {
  std::vector<std::string> prefixes;
  std::vector<double> weights;     // empty when none were given
  std::vector<std::string> names;  // per prefix: its NAME, or "" where none was given
};
BlendSpec parse_data_prefix(const std::vector<std::string>& items);

struct GptDataConfig {
  std::vector<std::string> data_prefix;  // model.data.data_prefix (the train split's when per_split)
  // model.data.data_prefix as {train, validation, test}: each split blends its own prefixes, each
  // file whole (Megatron's blend_per_split); splits_string is not used. An empty list: no such split.
  bool per_split = false;
  std::vector<std::string> validation_prefix, test_prefix;
  std::string splits_string = "969,30,1";  // model.data.splits_string
  int64_t seq_length = 0;                  // model.data.seq_length
  uint32_t seed = 1234;                    // model.seed
  double surplus = kDefaultBlendSurplus;
  bool drop_last_partial_validation = true;
  IndexCacheOptions cache;  // model.data.index_mapping_dir
};
using SourceOpener = std::function<std::shared_ptr<const TokenSource>(const std::string& prefix)>;

// One split (null if its splits_string weight is 0) from sources opened for spec.prefixes, in order.
std::shared_ptr<const SampleDataset> build_gpt_split(const GptDataConfig& cfg, const BlendSpec& spec,
                                                     const std::vector<std::shared_ptr<const TokenSource>>& sources,
                                                     Split split, int64_t num_samples);
// The data_prefix items split `split` reads (empty: the split has no prefixes of its own).
const std::vector<std::string>& split_data_prefix(const GptDataConfig& cfg, Split split);
// Short names of a blend's prefixes, for per-source figures: each file name without the directory and
// preprocess's "_text_document" (or "_document") ending; where two are the same, as many parent folders
// as tell them apart (the ending kept where only it differs, the whole path where nothing else does),
// and a prefix given again "#2", "#3", ... ("/data/zh_text_document" -> "zh"). Distinct for any paths.
std::vector<std::string> source_names(const std::vector<std::string>& prefixes);
// A blend's source names: the given NAMEs, the rest as above (a derived name that equals a given one
// becomes the prefix's whole path).
std::vector<std::string> source_names(const BlendSpec& spec);

// Builds train/valid/test as Megatron does: one unweighted prefix -> a GptDataset per split;
// weights given -> each prefix's split sized ceil(ceil(N*w)*(1+surplus)), blended to
// sum_k ceil(N*w_k) samples; several unweighted prefixes -> one epoch each, blended by their
// lengths to min(N, total). num_samples[k] < 0 means None. A split that does not exist is null.
// per_split: each split is built so from its own prefixes, each file whole.
std::array<std::shared_ptr<const SampleDataset>, 3> build_gpt_datasets(const GptDataConfig& cfg,
                                                                       std::array<int64_t, 3> num_samples,
                                                                       const SourceOpener& open);

}  // namespace llamatrain::data
