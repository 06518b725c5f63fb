// `llamatrain preprocess`: JSONL/text corpora -> Megatron indexed datasets PREFIX_<key>_document.
// Pipeline: one reader thread (decompress, split lines into ~1 MB batches) -> N worker threads
// (JSON parse + SentencePiece, one tokenizer each) -> the calling thread writes batches in input
// order. At most 2N+2 batches are in flight, so memory does not grow with the corpus.
// Conventions (NeMo's preprocess_data_for_megatron.py): no BOS unless `bos`, EOD = eos_id after
// each non-empty document with `append_eod`, documents with no tokens skipped and counted,
// `need_pad_id` only adds 1 to the vocab size used for the dtype choice. See docs/data.md.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/jsonl_reader.h"
#include "data/tokenizer.h"

namespace llamatrain::data {

enum class ProgressMode { kAuto, kOff };  // kAuto: ~2x/s on a TTY, every ~5 s otherwise

struct PreprocessOptions {
  std::vector<std::string> inputs;  // files, folders, globs (expand_inputs)
  InputFormat input_format = InputFormat::kJsonl;
  std::vector<std::string> json_keys{"text"};
  std::string tokenizer_model;  // a tokenizer.model or tokenizer.json file, or a folder (tokenizer_library)
  TokenizerLibrary tokenizer_library = TokenizerLibrary::kFile;
  std::string output_prefix;
  bool append_eod = false;
  bool need_pad_id = false;
  bool bos = false;
  bool strict = false;  // the first skipped line is an Error with file:line
  int workers = 1;
  ProgressMode progress = ProgressMode::kAuto;
  size_t batch_bytes = 1 << 20;  // text per batch handed to a worker
  int batch_lines = 4096;
};

inline constexpr int kMaxSkipLocations = 5;  // file:line locations kept per skip reason
inline constexpr int kMaxWorkers = 1024;

struct PreprocessStats {
  std::vector<std::string> files;
  uint64_t input_bytes = 0;  // on-disk (compressed) bytes of all inputs
  uint64_t text_bytes = 0;   // decompressed bytes of all lines
  int64_t lines = 0;
  int vocab_size = 0;  // incl. the pad added by need_pad_id
  TokenDtype dtype = TokenDtype::kUint16;
  struct Output {
    std::string key, prefix;  // prefix = OUTPUT_PREFIX_<key>_document
    int64_t documents = 0, tokens = 0, min_tokens = 0, max_tokens = 0;
  };
  std::vector<Output> outputs;                                     // one per json key
  std::array<int64_t, kNumLineStatus> skipped{};                   // by LineStatus
  std::array<std::vector<std::string>, kNumLineStatus> locations;  // first file:line per reason
  double elapsed_s = 0;
  int workers = 0;
  std::vector<std::string> byte_order_mark_files;  // inputs that began with a UTF-8 BOM (skipped)
};

// The dataset prefix written for one key: OUTPUT_PREFIX_<key>_document.
std::string key_prefix(const std::string& output_prefix, const std::string& key);

// Runs the whole pipeline, writes the datasets and OUTPUT_PREFIX.stats.json (all through
// temporaries renamed at the end, core/file.h), prints progress and the summary on stderr. Throws
// Error, writing nothing, when the output folder is not writable (checked first) or when a
// --json-keys key would get no document (saying what the input holds instead).
PreprocessStats run_preprocess(const PreprocessOptions& options);

std::string format_summary(const PreprocessStats& stats, const PreprocessOptions& options);
std::string stats_json(const PreprocessStats& stats, const PreprocessOptions& options);

}  // namespace llamatrain::data
