// Megatron/NeMo memory-mapped indexed dataset ("MMIDIDX", docs/formats.md section 1): PREFIX.bin holds the
// tokens of every sequence back to back, PREFIX.idx the 34-byte header, sizes (i32[S]), byte
// pointers (i64[S]) and document indices (i64[D]), all little-endian and unaligned.
// The writer streams tokens to PREFIX.bin.tmp-XXXXXX (the index arrays to .tmp spill files:
// bounded memory) and commits PREFIX.bin then PREFIX.idx only in finish() (core/file.h): an
// interrupted run never leaves files that look finished. The reader maps both files, never loads
// them whole, and validates everything at open, so its accessors only CHECK their arguments.
// Leaves out: multimodal `sequence_modes`, the older non-mmap "TNTIDX" format.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/file.h"

namespace llamatrain::data {

// dtype codes of the .idx header (docs/formats.md 1.3). Tokens use kUint16 (vocab < 65500) or kInt32.
enum class TokenDtype : uint8_t {
  kUint8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUint16 = 8
};
const char* dtype_name(TokenDtype d);  // "uint16", "int32", ...
int dtype_itemsize(TokenDtype d);      // bytes per token
// Megatron's optimal_dtype / NeMo's __best_fitting_dtype: uint16 if vocab_size < 65500 else int32.
TokenDtype dtype_for_vocab(int64_t vocab_size);

std::string index_path(const std::string& prefix);  // PREFIX.idx
std::string data_path(const std::string& prefix);   // PREFIX.bin

inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIndexVersion = 1;
inline constexpr size_t kIndexHeaderSize = 34;

// Writes PREFIX.bin/.idx. Usage: add_document() per document (or add_sequence() for each sentence,
// then end_document()), then finish(). Destroying an unfinished writer removes its .tmp files.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(std::string prefix, TokenDtype dtype);  // throws Error if the .bin can't be created
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one sequence (one `sizes` entry, may be empty). Throws Error if a token does not fit
  // dtype; after any Error the writer must be discarded (its destructor removes the .tmp files).
  void add_sequence(std::span<const int32_t> tokens);
  // Closes the current document: appends the sequence count to document_indices. A document with
  // no sequence since the last end_document() repeats the previous value (MLM's empty document).
  void end_document();
  // One document made of one sequence: add_sequence(tokens) then end_document().
  void add_document(std::span<const int32_t> tokens);
  // Appends all sequences and documents of another dataset (Megatron's merge_datasets.py
  // add_index): same dtype required, pointers rebased, document indices offset by our count.
  void append(const class IndexedDataset& other);
  // Flushes the .bin, writes the .idx, then commits PREFIX.bin and PREFIX.idx (in that order).
  void finish();

  const std::string& prefix() const { return prefix_; }
  TokenDtype dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_doc_indices_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }

  class Spill;  // an append-only array kept in a .tmp file beyond a fixed in-memory chunk

 private:
  void write_bytes(const void* data, size_t n);
  void flush_buffer();

  std::string prefix_;
  TokenDtype dtype_;
  std::unique_ptr<AtomicFile> bin_;
  std::vector<uint8_t> buffer_;  // (kBufferBytes,) pending .bin bytes
  size_t buffer_used_ = 0;
  uint64_t bin_bytes_ = 0;  // bytes of .bin written so far (incl. buffered)
  int64_t num_tokens_ = 0;
  int64_t num_sequences_ = 0;    // S
  int64_t num_doc_indices_ = 1;  // D (document_indices starts with 0)
  // The index arrays spill to PREFIX.idx.{sizes,docs}.tmp so memory stays bounded whatever the
  // corpus size; pointers are recomputed from sizes in finish().
  std::unique_ptr<Spill> sizes_;    // (S,) int32
  std::unique_ptr<Spill> doc_idx_;  // (D,) int64
  bool finished_ = false;
};

// Parsed, validated view of an .idx image (pointers into memory the caller keeps alive).
struct IndexView {
  TokenDtype dtype = TokenDtype::kUint16;
  uint64_t num_sequences = 0;         // S
  uint64_t num_doc_indices = 0;       // D = documents + 1
  const uint8_t* sizes = nullptr;     // (S,) i32 LE, unaligned
  const uint8_t* pointers = nullptr;  // (S,) i64 LE, unaligned
  const uint8_t* doc_idx = nullptr;   // (D,) i64 LE, unaligned
  uint64_t num_tokens = 0;            // sum of sizes
};
// Validates an .idx image against the size of its .bin: magic, version, dtype code, counts vs the
// file size, sizes >= 0, pointers[0] = 0 and pointers[i+1] = pointers[i] + sizes[i]*itemsize,
// the end of the last sequence = bin_size, document indices starting at 0, non-decreasing and
// ending at S. Throws Error naming idx_name, the field, the value seen and the value expected.
IndexView parse_index(const uint8_t* data, size_t size, const std::string& idx_name, uint64_t bin_size,
                      const std::string& bin_name);

// Read-only dataset: the .idx mapped, the .bin's tokens read with pread (never through a mapping, so
// a .bin truncated or rewritten in place while a job reads it is an Error naming the file, where a
// mapped read would kill the process with SIGBUS). Thread-safe for concurrent reads after
// construction.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);  // opens PREFIX.idx and PREFIX.bin; throws Error
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  TokenDtype dtype() const { return index_.dtype; }
  int64_t num_sequences() const { return static_cast<int64_t>(index_.num_sequences); }
  int64_t num_documents() const { return static_cast<int64_t>(index_.num_doc_indices) - 1; }
  int64_t num_tokens() const { return static_cast<int64_t>(index_.num_tokens); }
  int32_t sequence_length(int64_t i) const;   // sizes[i]; CHECKs 0 <= i < S
  int64_t sequence_pointer(int64_t i) const;  // pointers[i], in bytes
  int64_t document_index(int64_t k) const;    // document_indices[k], 0 <= k <= num_documents()
  std::vector<int64_t> document_indices() const;
  // Copies tokens [offset, offset + count) of sequence i into out (CHECKs the range).
  void read(int64_t i, int64_t offset, int64_t count, int32_t* out) const;  // out: (count,)
  void read(int64_t i, int64_t offset, int64_t count, int64_t* out) const;  // out: (count,)
  std::vector<int32_t> sequence(int64_t i) const;                           // the whole sequence i
  // The raw .bin bytes, mapped (for merging and `plan`'s whole-file checks); (bin_size(),) bytes.
  const uint8_t* bin_data() const { return bin_.data(); }
  uint64_t bin_size() const { return bin_.size(); }
  uint64_t idx_size() const { return idx_.size(); }

 private:
  template <typename T>
  void read_as(int64_t i, int64_t offset, int64_t count, T* out) const;
  // bytes of the .bin from byte `at` (sequence i's) into out; an Error with code "data" naming the file
  // when it ends first or cannot be read.
  void read_bin(int64_t at, size_t bytes, uint8_t* out, int64_t i) const;

  std::string prefix_;
  MappedFile idx_;   // PREFIX.idx
  MappedFile bin_;   // PREFIX.bin
  int bin_fd_ = -1;  // PREFIX.bin again, for the token reads
  IndexView index_;
};

}  // namespace llamatrain::data
