// IndexedTokenSource: a Megatron .bin/.idx dataset (IndexedDataset, mmapped) seen as the TokenSource
// that GPT sample construction reads, so `data_prefix` entries open straight from disk. The index
// cache goes next to the data (the prefix's directory) and is keyed by the size and mtime of both
// files. open_indexed_source is the SourceOpener for build_gpt_datasets.
#pragma once

#include <memory>
#include <string>

#include "data/indexed_dataset.h"
#include "data/token_source.h"

namespace llamatrain::data {

class IndexedTokenSource : public TokenSource {
 public:
  explicit IndexedTokenSource(const std::string& prefix);  // throws Error naming the files
  int64_t num_sequences() const override { return dataset_.num_sequences(); }
  int32_t sequence_length(int64_t i) const override { return dataset_.sequence_length(i); }
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const override {
    dataset_.read(seq, offset, count, out);
  }
  // The .idx sizes array starts at byte 34, not 4-aligned: not exposed (sizes_data() stays null).
  std::string fingerprint() const override;
  std::string default_cache_dir() const override;
  std::string name() const override;
  const IndexedDataset& dataset() const { return dataset_; }

 private:
  IndexedDataset dataset_;
};

std::shared_ptr<const TokenSource> open_indexed_source(const std::string& prefix);

}  // namespace llamatrain::data
