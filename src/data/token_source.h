// TokenSource: the read-only view of a tokenized corpus that GPT sample construction needs (a
// Megatron .bin/.idx dataset in production, an in-memory list of sequences in tests). Sequence i
// holds sequence_length(i) int32 token ids; read() copies a slice. fingerprint() names the content
// (path, size and mtime of the files) so an index cache built from other data is never reused.
// Leaves out: writing, document boundaries (GPTDataset works on sequences), dtype handling.
#pragma once

#include <memory>

#include <cstdint>
#include <string>
#include <vector>

namespace llamatrain::data {

struct TokenSource {
  virtual ~TokenSource() = default;
  virtual int64_t num_sequences() const = 0;
  virtual int32_t sequence_length(int64_t i) const = 0;
  // Copies tokens [offset, offset + count) of sequence `seq` into out (count). Callers keep the
  // range inside the sequence.
  virtual void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const = 0;
  // All sequence lengths (num_sequences) when the source holds them contiguously (the .idx
  // sizes array); nullptr makes callers gather them with sequence_length().
  virtual const int32_t* sizes_data() const { return nullptr; }
  // Identifies the content for the index cache key: changes whenever the data may have changed.
  virtual std::string fingerprint() const = 0;
  // Where the index cache goes by default (the directory of the data files); "" = no default, so
  // the cache is used only when a cache directory is given explicitly.
  virtual std::string default_cache_dir() const { return {}; }
  // Short name used in cache file names and messages (e.g. the prefix's file name).
  virtual std::string name() const = 0;
};

// Sequences held in memory; for tests and for small synthetic corpora.
class InMemoryTokenSource : public TokenSource {
 public:
  explicit InMemoryTokenSource(std::vector<std::vector<int32_t>> sequences, std::string name = "memory");
  int64_t num_sequences() const override { return int64_t(sequences_.size()); }
  int32_t sequence_length(int64_t i) const override { return int32_t(sequences_[size_t(i)].size()); }
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const override;
  std::string fingerprint() const override;  // a hash of every token, so equal content = equal key
  std::string name() const override { return name_; }

 private:
  std::vector<std::vector<int32_t>> sequences_;
  std::string name_;
};

// Another source whose every id read is checked against a vocabulary of `vocab` ids: an id outside it
// (a corpus made with another tokenizer, a flipped byte) is an Error with code "data" naming `where`
// (the dataset's path), the sequence and the position, never an out-of-bounds read in the model. The
// check is one compare per token of a copy already made.
class VocabCheckedSource : public TokenSource {
 public:
  VocabCheckedSource(std::shared_ptr<const TokenSource> inner, int64_t vocab, std::string where);
  int64_t num_sequences() const override { return inner_->num_sequences(); }
  int32_t sequence_length(int64_t i) const override { return inner_->sequence_length(i); }
  void read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const override;
  const int32_t* sizes_data() const override { return inner_->sizes_data(); }
  std::string fingerprint() const override { return inner_->fingerprint(); }
  std::string default_cache_dir() const override { return inner_->default_cache_dir(); }
  std::string name() const override { return inner_->name(); }

 private:
  std::shared_ptr<const TokenSource> inner_;
  int64_t vocab_;
  std::string where_;
};

// "path:size:mtime_ns" of a file, or fails naming it when it cannot be read. Used by file-backed
// sources to build fingerprint() from PREFIX.idx and PREFIX.bin.
std::string file_fingerprint(const std::string& path);

// 64-bit FNV-1a, used for cache keys and checksums (not cryptographic).
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);

}  // namespace llamatrain::data
