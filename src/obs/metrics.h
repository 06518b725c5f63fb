// metrics.jsonl: one JSON object per line ({"step":10,"loss":2.31,"lr":0.0003,...}), keys in the
// order written, appended and written through per line, so `tail -f`, jq and pandas.read_json(
// lines=True) read a live run. JSON has no NaN or infinity: non-finite numbers are written as null
// (TensorBoard's event file keeps the exact value). A resumed run appends to the same file, so steps
// after its checkpoint appear twice; the later line is the one that counts. Failure policy as for
// TensorBoardWriter: cannot open = Error at construction; a failed write = one warning on stderr,
// then the writer stops. read_metrics() is for tests and tools.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llamatrain::obs {

class MetricsWriter {
 public:
  // Opens `path` for appending, creating it and its parent directories. An unfinished last line
  // (a run killed mid-write) is cut off first so new lines start clean. Throws Error naming the
  // file when it cannot be opened.
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Appends `record` (a JSON object) as one line with one write(2). Strings that are not valid
  // UTF-8 get U+FFFD for the bad bytes. Thread-safe.
  void write(const nlohmann::ordered_json& record);
  // The common case: {"step": step, name: value, ...} in the order given.
  void write(int64_t step, std::initializer_list<std::pair<std::string_view, double>> values);

  const std::string& path() const { return path_; }
  // Empty while writing works; the reason otherwise.
  std::string error() const;

 private:
  mutable std::mutex mu_;
  std::string path_;
  int fd_ = -1;
  std::string error_;
};

// Every line of a metrics.jsonl file, parsed. Throws Error naming file and line for a line that is
// not a JSON object.
std::vector<nlohmann::json> read_metrics(const std::string& path);

// record[key] as a double: NaN when the key is missing or null (how non-finite values are stored).
double metric_value(const nlohmann::json& record, const std::string& key);

}  // namespace llamatrain::obs
