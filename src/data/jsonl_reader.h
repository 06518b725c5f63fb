// Streaming input for corpora: expands files, globs and folders into a sorted file list; reads lines
// from plain, gzip (zlib) or zstd files (detected by magic bytes, decompressed in a stream, so
// memory does not grow with the file); and pulls string fields out of one JSON object per line
// with simdjson's DOM parser (the whole line is validated, like Python's json.loads).
// Leaves out: JSON values other than strings (MLM's pre-split lists of sentences are "non_string").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llamatrain::data {

enum class InputFormat { kJsonl, kText };  // kText: one document per line, key "text"

// Expands each PATH: an existing file is taken as is; a folder contributes every file below it
// whose name ends in .jsonl/.json (kJsonl) or .txt (kText), optionally followed by .gz or .zst;
// a pattern with * ? [ is globbed. Folder and glob matches are sorted by path, so the order is
// deterministic. Throws Error for a path that matches nothing.
std::vector<std::string> expand_inputs(const std::vector<std::string>& paths, InputFormat format);

// Reads one file line by line, decompressing gzip/zstd on the fly.
class LineReader {
 public:
  explicit LineReader(const std::string& path);  // throws Error if it can't be opened
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its '\n'; false at the end of the file. The view stays valid until the
  // next call. Throws Error (with file:line) on a damaged or truncated compressed stream. A UTF-8
  // byte-order mark that starts the file is not part of the first line (byte_order_mark() says so).
  bool next(std::string_view* line);
  bool byte_order_mark() const { return bom_; }
  int64_t line_number() const { return line_number_; }  // 1-based, of the line last returned
  uint64_t bytes_consumed() const;  // bytes of the file read so far (compressed bytes if compressed)
  uint64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }
  const char* compression() const;  // "none", "gzip" or "zstd"

  class Source;

 private:
  bool refill();

  std::string path_;
  uint64_t file_size_ = 0;
  std::unique_ptr<Source> source_;
  std::vector<char> buf_;  // decompressed bytes [begin_, end_) not yet returned
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  bool bom_ = false;
  int64_t line_number_ = 0;
};

// Outcome of reading one input line; the names are the skip reasons of PREFIX.stats.json.
enum class LineStatus : uint8_t {
  kOk,
  kBlankLine,
  kInvalidJson,
  kInvalidUtf8,
  kNotObject,
  kMissingKey,
  kNonString,
  kEmptyDocument
};
inline constexpr int kNumLineStatus = 8;
const char* line_status_name(LineStatus s);  // "invalid_json", ...

// Bytes that must be readable after the end of a line handed to JsonFieldExtractor (simdjson reads
// ahead in 64-byte blocks; the contents do not matter).
inline constexpr size_t kJsonPadding = 64;

// Extracts string fields from JSON object lines; one per thread (it owns a reusable parser).
class JsonFieldExtractor {
 public:
  explicit JsonFieldExtractor(std::vector<std::string> keys);
  ~JsonFieldExtractor();

  // Parses line [data, data+len) (kJsonPadding readable bytes must follow) and points values[k]
  // at the unescaped value of keys[k] (valid until the next call). When a duplicate key occurs the
  // last one wins, as in Python. On failure returns the reason and sets *detail: the key index for
  // kMissingKey/kNonString, the simdjson error code for kInvalidJson/kInvalidUtf8.
  LineStatus extract(const char* data, size_t len, std::vector<std::string_view>* values, int* detail);
  // A readable explanation of a failure returned by extract().
  std::string describe(LineStatus status, int detail) const;
  // The keys of the JSON object on line [data, data+len) in order (padding as for extract()); empty if
  // the line is not an object. Used to say what the input holds when a --json-keys key is missing.
  std::vector<std::string> object_keys(const char* data, size_t len);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<std::string> keys_;
};

// True if [data, data+len) is valid UTF-8 (simdjson's validator).
bool is_valid_utf8(const char* data, size_t len);

}  // namespace llamatrain::data
