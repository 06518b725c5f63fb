// TensorBoard event writer: protobuf wire encoding of the few Event fields we write, TFRecord
// framing, CRC32C on the SSE4.2 instruction, and the event file's life (name, buffering, errors).
// Field numbers and the framing are in docs/formats.md section 6.
#include "obs/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/host.h"
#include "obs/write_or_stop.h"

namespace llamatrain::obs {

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace tfevents {

namespace {

// Protobuf wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

void put_key(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field) << 3 | wire_type); }

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_key(out, field, kFixed64);
  put_le(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put_key(out, field, kFixed32);
  put_le(out, bits, 4);
}

// int64 as a varint: negative values take 10 bytes (two's complement), as protobuf encodes them.
void put_int64(std::string& out, int field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, uint64_t(v));
}

void put_bytes(std::string& out, int field, std::string_view v) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, v.size());
  out.append(v);
}

// Event fields (event.proto) and the nested messages we use (summary.proto, tensor.proto).
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5, kEventSourceMetadata = 10;
constexpr int kSourceMetadataWriter = 1;
constexpr int kSummaryValue = 1;
constexpr int kValueTag = 1, kValueSimpleValue = 2, kValueTensor = 8, kValueMetadata = 9;
constexpr int kMetadataPluginData = 1, kMetadataDataClass = 4, kPluginDataName = 1;
constexpr int kDataClassTensor = 2;
constexpr int kTensorDtype = 1, kTensorShape = 2, kTensorStringVal = 8;
constexpr int kDtString = 7;

// Event{wall_time, step, summary{value}}: the part every summary event shares.
std::string summary_event(double wall_time, int64_t step, const std::string& value) {
  std::string summary;
  put_bytes(summary, kSummaryValue, value);
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  if (step != 0) put_int64(event, kEventStep, step);
  put_bytes(event, kEventSummary, summary);
  return event;
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t n) { return crc32c_mask(crc32c(data, n)); }

std::string frame_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out.append(data);
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

std::string file_version_event(double wall_time, std::string_view writer) {
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_bytes(event, kEventFileVersion, "brain.Event:2");
  if (!writer.empty()) {
    std::string source;
    put_bytes(source, kSourceMetadataWriter, writer);
    put_bytes(event, kEventSourceMetadata, source);
  }
  return event;
}

std::string scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  put_bytes(v, kValueTag, tag);
  put_float(v, kValueSimpleValue, value);  // a oneof member: written even when 0
  return summary_event(wall_time, step, v);
}

std::string text_event(double wall_time, int64_t step, std::string_view tag, std::string_view text) {
  std::string plugin_data, metadata, tensor, v;
  put_bytes(plugin_data, kPluginDataName, "text");  // content: TextPluginData{version=0}, i.e. empty
  put_bytes(metadata, kMetadataPluginData, plugin_data);
  put_key(metadata, kMetadataDataClass, kVarint);
  put_varint(metadata, kDataClassTensor);
  put_key(tensor, kTensorDtype, kVarint);
  put_varint(tensor, kDtString);
  put_bytes(tensor, kTensorShape, "");  // rank 0: a scalar string
  put_bytes(tensor, kTensorStringVal, text);
  put_bytes(v, kValueTag, tag);  // fields in number order, as protobuf serializers write them
  put_bytes(v, kValueTensor, tensor);
  put_bytes(v, kValueMetadata, metadata);
  return summary_event(wall_time, step, v);
}

std::string event_file_name(int64_t seconds, std::string_view host, int64_t pid, int64_t uid) {
  return fmt::format("events.out.tfevents.{:010d}.{}.{}.{}", seconds, host, pid, uid);
}

}  // namespace tfevents

namespace {

constexpr size_t kFlushBytes = 64 << 10;
constexpr std::string_view kPrefix = "events.out.tfevents.";

// Largest event file name in `dir` that carries a 10-digit timestamp, and that timestamp.
std::pair<std::string, int64_t> latest_event_file(const std::filesystem::path& dir) {
  std::pair<std::string, int64_t> latest{"", -1};
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kPrefix) || name.size() < kPrefix.size() + 10) continue;
    const std::string digits = name.substr(kPrefix.size(), 10);
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (name > latest.first) latest = {name, std::stoll(digits)};
  }
  return latest;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& logdir) {
  if (!crc32c_supported())
    fail("tensorboard: event files need the CPU's SSE4.2 crc32 instruction, which this CPU lacks\n"
         "hint: turn TensorBoard logging off; metrics.jsonl records the same values");
  std::error_code ec;
  std::filesystem::create_directories(logdir, ec);
  if (ec || !std::filesystem::is_directory(logdir))
    fail("tensorboard: cannot create log directory {}: {}\nhint: choose a writable log directory", logdir,
         ec ? ec.message() : "a file of that name exists");

  // Name: TensorBoard's Python writer's; the timestamp is moved past the latest file already here
  // (a resumed run, or a clock behind the previous machine's) because TensorBoard reads a run's
  // files in name order. The uid counts files this process made; O_EXCL never reuses a name.
  static std::atomic<int64_t> next_uid{0};
  const auto [latest, latest_seconds] = latest_event_file(logdir);
  int64_t seconds = int64_t(wall_time_now());
  const std::string host = host_name();
  const int64_t pid = ::getpid();
  for (int attempt = 0; fd_ < 0; ++attempt) {
    const int64_t uid = next_uid++;
    std::string name = tfevents::event_file_name(seconds, host, pid, uid);
    if (name <= latest) {  // also when uid 10 would sort before this process's uid 9
      seconds = latest_seconds + 1;
      name = tfevents::event_file_name(seconds, host, pid, uid);
    }
    path_ = (std::filesystem::path(logdir) / name).string();
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && (errno != EEXIST || attempt == 100))
      fail("tensorboard: cannot create event file {}: {}\nhint: check that the log directory is writable", path_,
           std::strerror(errno));
  }
  std::lock_guard lock(mu_);
  append_locked(tfevents::file_version_event(wall_time_now(), "llamatrain"));
  flush_locked();
}

TensorBoardWriter::~TensorBoardWriter() {
  std::lock_guard lock(mu_);
  flush_locked();
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::add_scalar(std::string_view tag, float value, int64_t step, double wall_time) {
  CHECK(!tag.empty(), "tensorboard: empty tag");
  std::lock_guard lock(mu_);
  append_locked(tfevents::scalar_event(wall_time, step, tag, value));
}

void TensorBoardWriter::add_text(std::string_view tag, std::string_view text, int64_t step, double wall_time) {
  CHECK(!tag.empty(), "tensorboard: empty tag");
  std::lock_guard lock(mu_);
  append_locked(tfevents::text_event(wall_time, step, tag, text));
}

void TensorBoardWriter::flush() {
  std::lock_guard lock(mu_);
  flush_locked();
}

std::string TensorBoardWriter::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

void TensorBoardWriter::append_locked(const std::string& event) {
  if (fd_ < 0) return;
  pending_ += tfevents::frame_record(event);
  if (pending_.size() >= kFlushBytes) flush_locked();
}

void TensorBoardWriter::flush_locked() {
  // A record cut short at the end of the file is where TensorBoard's reader stops; everything before
  // it stays readable.
  write_or_stop(fd_, error_, pending_, path_, "tensorboard", "TensorBoard logging");
  pending_.clear();
}

}  // namespace llamatrain::obs
