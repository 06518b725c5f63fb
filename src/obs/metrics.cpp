// metrics.jsonl writer and reader (see metrics.h for the format and the failure policy).
#include "obs/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "obs/write_or_stop.h"

namespace llamatrain::obs {

namespace {

// Offset just past the last '\n' of the file open on fd (0 when it has none).
int64_t end_of_last_line(int fd, int64_t size) {
  char buf[4096];
  for (int64_t end = size; end > 0;) {
    const int64_t start = std::max<int64_t>(0, end - int64_t(sizeof buf));
    const ssize_t n = ::pread(fd, buf, size_t(end - start), start);
    if (n != end - start) return size;  // unreadable: leave the file as it is
    for (int64_t i = n - 1; i >= 0; --i)
      if (buf[i] == '\n') return start + i + 1;
    end = start;
  }
  return 0;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec)
    fail("metrics: cannot create directory {} for {}: {}\nhint: choose a writable log directory", parent.string(), path,
         ec.message());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail("metrics: cannot open {} for appending: {}\nhint: choose a writable log directory", path,
         std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    const int64_t keep = end_of_last_line(fd_, st.st_size);
    if (keep < st.st_size && ::ftruncate(fd_, keep) == 0)
      fmt::print(stderr,
                 "warning: metrics: {} ended in an unfinished line ({} bytes, from a run stopped "
                 "mid-write); cut it off\n",
                 path, st.st_size - keep);
  }
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write(const nlohmann::ordered_json& record) {
  CHECK(record.is_object(), "metrics: a record must be a JSON object, got {}", record.type_name());
  const std::string line = record.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  std::lock_guard lock(mu_);
  write_or_stop(fd_, error_, line, path_, "metrics", "metrics.jsonl");
}

void MetricsWriter::write(int64_t step, std::initializer_list<std::pair<std::string_view, double>> values) {
  nlohmann::ordered_json record;
  record["step"] = step;
  for (const auto& [name, value] : values) record[std::string(name)] = value;
  write(record);
}

std::string MetricsWriter::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("metrics: cannot open {}: {}\nhint: check the path", path, std::strerror(errno));
  std::vector<nlohmann::json> records;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object())
      fail("metrics: {}:{}: not a JSON object, got \"{}\"\nhint: each line of a metrics file is one JSON object", path,
           line_no, line.substr(0, 80));
    records.push_back(std::move(record));
  }
  return records;
}

double metric_value(const nlohmann::json& record, const std::string& key) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!it->is_number())
    fail("metrics: \"{}\" is {}, expected a number or null\nhint: read it as JSON instead", key, it->dump());
  return it->get<double>();
}

}  // namespace llamatrain::obs
