// TensorBoard event files written natively (docs/formats.md section 6): TFRecord framing with masked
// CRC32C, hand-encoded Event / Summary / Value protobufs, a first record with file_version
// "brain.Event:2" and source_metadata.writer "llamatrain". Scalars use the legacy simple_value form
// (what PyTorch's SummaryWriter writes; TensorBoard migrates it on read); text uses the text
// plugin's string tensor. CRC32C comes from the SSE4.2 crc32 instruction, checked at run time.
// Failure policy: a directory or file that cannot be created is an Error at construction (before
// training starts); a write that fails later (disk full) is reported once on stderr and the writer
// stops writing, so a long run is never killed by its logging. Histograms and images are left out.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace llamatrain::obs {

// Seconds since the Unix epoch (system clock), TensorBoard's wall_time.
double wall_time_now();

namespace tfevents {

// TFRecord's mask (core/crc32c.h computes the CRC): rotate right by 15, then add 0xA282EAD8 (wrapping).
uint32_t masked_crc32c(const void* data, size_t n);

// One TFRecord: u64 length, masked CRC of the length bytes, data, masked CRC of data (all LE).
std::string frame_record(std::string_view data);
// Serialized Event{wall_time, file_version="brain.Event:2", source_metadata{writer}}; an empty
// writer leaves source_metadata out.
std::string file_version_event(double wall_time, std::string_view writer);
// Serialized Event{wall_time, step, summary{value{tag, simple_value}}}; step 0 is left out, as
// proto3 does.
std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value);
// Serialized Event{wall_time, step, summary{value{tag, metadata{plugin_data{plugin_name="text"},
// data_class=TENSOR}, tensor{dtype=DT_STRING, shape=[], string_val=[text]}}}}.
std::string text_event(double wall_time, int64_t step, std::string_view tag, std::string_view text);

// The file name TensorBoard's Python writer uses: events.out.tfevents.<seconds, 10 digits>.<host>.<pid>.<uid>
std::string event_file_name(int64_t seconds, std::string_view host, int64_t pid, int64_t uid);

}  // namespace tfevents

class TensorBoardWriter {
 public:
  // Creates `logdir` (and parents) and a new event file in it whose name sorts after every event
  // file already there, so TensorBoard reads a resumed run's files in order. Throws Error naming the
  // directory or file when either cannot be created, or when the CPU lacks SSE4.2.
  explicit TensorBoardWriter(const std::string& logdir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Records are buffered and written by flush(), when 64 KiB are pending, and by the destructor.
  // Any float is accepted (NaN and infinities are stored as such). Thread-safe.
  void add_scalar(std::string_view tag, float value, int64_t step, double wall_time = wall_time_now());
  // Text (Markdown) shown in TensorBoard's Text tab, e.g. the run's configuration.
  void add_text(std::string_view tag, std::string_view text, int64_t step, double wall_time = wall_time_now());
  // Writes the pending records to the file (no fsync). On a write error: one warning on stderr,
  // error() set, and every later call does nothing.
  void flush();

  const std::string& path() const { return path_; }
  // Empty while writing works; the reason otherwise.
  std::string error() const;

 private:
  void append_locked(const std::string& event);
  void flush_locked();

  mutable std::mutex mu_;
  std::string path_;
  int fd_ = -1;
  std::string pending_;  // framed records not yet written
  std::string error_;
};

}  // namespace llamatrain::obs
