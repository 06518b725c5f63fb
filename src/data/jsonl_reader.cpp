// Input expansion, streaming decompressing line reader and JSON field extraction; see jsonl_reader.h.
#include "data/jsonl_reader.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <simdjson.h>

#include "core/error.h"

namespace llamatrain::data {

static_assert(kJsonPadding >= simdjson::SIMDJSON_PADDING);

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Input expansion

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool corpus_name(const std::string& name, InputFormat format) {
  std::string base = name;
  for (const char* c : {".gz", ".zst"})
    if (ends_with(base, c)) base.resize(base.size() - std::strlen(c));
  if (format == InputFormat::kText) return ends_with(base, ".txt");
  return ends_with(base, ".jsonl") || ends_with(base, ".json");
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& paths, InputFormat format) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(p, fs::directory_options::follow_directory_symlink, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->is_regular_file() && corpus_name(it->path().filename().string(), format))
          found.push_back(it->path().string());
      if (ec) fail("cannot list folder {}: {}", p, ec.message());
      if (found.empty())
        fail("input folder {} holds no {} files\nhint: files must end in {}, optionally followed by .gz or .zst", p,
             format == InputFormat::kText ? "text" : "JSONL",
             format == InputFormat::kText ? ".txt" : ".jsonl or .json");
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else if (fs::exists(p, ec)) {
      out.push_back(p);
    } else if (p.find_first_of("*?[") != std::string::npos) {
      glob_t g{};
      int rc = ::glob(p.c_str(), 0, nullptr, &g);  // glob sorts its matches
      std::vector<std::string> found;
      if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i)
          if (!fs::is_directory(g.gl_pathv[i], ec)) found.push_back(g.gl_pathv[i]);
      ::globfree(&g);
      if (found.empty())
        fail("input pattern {} matches no file\nhint: quote the pattern so the shell leaves it to llamatrain", p);
      out.insert(out.end(), found.begin(), found.end());
    } else {
      fail("input {} not found, expected a file, a folder or a glob pattern", p);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Byte sources

class LineReader::Source {
 public:
  virtual ~Source() = default;
  // Fills up to n decompressed bytes; returns 0 at the end. Throws Error on damaged input.
  virtual size_t read(char* dst, size_t n) = 0;
  virtual uint64_t consumed() const = 0;
  virtual const char* name() const = 0;
};

namespace {

class PlainSource : public LineReader::Source {
 public:
  PlainSource(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PlainSource() override { ::close(fd_); }
  size_t read(char* dst, size_t n) override {
    while (true) {
      ssize_t r = ::read(fd_, dst, n);
      if (r >= 0) {
        consumed_ += static_cast<uint64_t>(r);
        return static_cast<size_t>(r);
      }
      if (errno != EINTR) fail("reading {} failed: {}", path_, std::strerror(errno));
    }
  }
  uint64_t consumed() const override { return consumed_; }
  const char* name() const override { return "none"; }

 private:
  int fd_;
  std::string path_;
  uint64_t consumed_ = 0;
};

class GzipSource : public LineReader::Source {
 public:
  GzipSource(int fd, std::string path) : path_(std::move(path)) {
    gz_ = ::gzdopen(fd, "rb");
    if (!gz_) {
      ::close(fd);
      fail("cannot open {} as gzip", path_);
    }
    ::gzbuffer(gz_, 1 << 20);
  }
  ~GzipSource() override { ::gzclose(gz_); }
  size_t read(char* dst, size_t n) override {
    int r = ::gzread(gz_, dst, static_cast<unsigned>(std::min<size_t>(n, 1u << 30)));
    if (r < 0) {
      int code = 0;
      const char* msg = ::gzerror(gz_, &code);
      fail("{}: gzip stream is damaged ({})\nhint: check the file with `gzip -t {}`", path_, msg, path_);
    }
    if (r == 0) {
      int code = 0;
      const char* msg = ::gzerror(gz_, &code);
      if (code != Z_OK && code != Z_STREAM_END)
        fail("{}: gzip stream is truncated or damaged ({})\nhint: check the file with `gzip -t {}`", path_, msg, path_);
    }
    return static_cast<size_t>(r);
  }
  uint64_t consumed() const override { return static_cast<uint64_t>(::gzoffset(gz_)); }
  const char* name() const override { return "gzip"; }

 private:
  std::string path_;
  gzFile gz_ = nullptr;
};

class ZstdSource : public LineReader::Source {
 public:
  ZstdSource(int fd, std::string path) : fd_(fd), path_(std::move(path)), in_(ZSTD_DStreamInSize()) {
    ctx_ = ZSTD_createDCtx();
    CHECK(ctx_ != nullptr, "ZSTD_createDCtx");
  }
  ~ZstdSource() override {
    ZSTD_freeDCtx(ctx_);
    ::close(fd_);
  }
  size_t read(char* dst, size_t n) override {
    ZSTD_outBuffer out{dst, n, 0};
    while (out.pos == 0) {
      if (in_pos_ == in_len_) {
        ssize_t r;
        do r = ::read(fd_, in_.data(), in_.size());
        while (r < 0 && errno == EINTR);
        if (r < 0) fail("reading {} failed: {}", path_, std::strerror(errno));
        consumed_ += static_cast<uint64_t>(r);
        in_pos_ = 0;
        in_len_ = static_cast<size_t>(r);
        if (r == 0) {
          if (last_ret_ != 0)
            fail("{}: zstd stream is truncated (the last frame is incomplete)\nhint: check the file with `zstd -t {}`",
                 path_, path_);
          return 0;
        }
      }
      ZSTD_inBuffer in{in_.data(), in_len_, in_pos_};
      size_t ret = ZSTD_decompressStream(ctx_, &out, &in);
      in_pos_ = in.pos;
      if (ZSTD_isError(ret))
        fail("{}: zstd stream is damaged ({})\nhint: check the file with `zstd -t {}`", path_, ZSTD_getErrorName(ret),
             path_);
      last_ret_ = ret;
    }
    return out.pos;
  }
  uint64_t consumed() const override { return consumed_; }
  const char* name() const override { return "zstd"; }

 private:
  int fd_;
  std::string path_;
  ZSTD_DCtx* ctx_ = nullptr;
  std::vector<char> in_;
  size_t in_pos_ = 0, in_len_ = 0;
  size_t last_ret_ = 0;
  uint64_t consumed_ = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// LineReader

LineReader::LineReader(const std::string& path) : path_(path), buf_(1 << 20) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open input {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) file_size_ = static_cast<uint64_t>(st.st_size);
  // Detect compression by magic bytes (pread keeps the offset at 0; FIFOs are taken as plain).
  unsigned char magic[4] = {0, 0, 0, 0};
  ssize_t got = S_ISREG(st.st_mode) ? ::pread(fd, magic, 4, 0) : 0;
  if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b)
    source_ = std::make_unique<GzipSource>(fd, path);
  else if (got == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd)
    source_ = std::make_unique<ZstdSource>(fd, path);
  else
    source_ = std::make_unique<PlainSource>(fd, path);
}

LineReader::~LineReader() = default;

uint64_t LineReader::bytes_consumed() const { return source_->consumed(); }
const char* LineReader::compression() const { return source_->name(); }

bool LineReader::refill() {
  if (eof_) return false;
  // Move the unreturned tail to the front; grow when one line fills the whole buffer.
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);
  try {
    size_t n = source_->read(buf_.data() + end_, buf_.size() - end_);
    if (n == 0) eof_ = true;
    end_ += n;
    return n > 0;
  } catch (const Error& e) {
    fail("{}\n(while reading line {} of {})", e.what(), line_number_ + 1, path_);
  }
}

bool LineReader::next(std::string_view* line) {
  if (line_number_ == 0 && !bom_) {  // before the first line: a byte-order mark is no text (Python's utf-8-sig)
    while (end_ - begin_ < 3 && refill()) {
    }
    if (end_ - begin_ >= 3 && std::memcmp(buf_.data() + begin_, "\xEF\xBB\xBF", 3) == 0) {
      begin_ += 3;
      bom_ = true;
    }
  }
  size_t scanned = begin_;
  while (true) {
    const char* start = buf_.data() + scanned;
    const void* nl = std::memchr(start, '\n', end_ - scanned);
    if (nl) {
      size_t pos = static_cast<const char*>(nl) - buf_.data();
      *line = std::string_view(buf_.data() + begin_, pos - begin_);
      begin_ = pos + 1;
      ++line_number_;
      return true;
    }
    size_t before = end_ - begin_;
    if (!refill()) {
      if (end_ == begin_) return false;
      *line = std::string_view(buf_.data() + begin_, end_ - begin_);  // last line without '\n'
      begin_ = end_;
      ++line_number_;
      return true;
    }
    scanned = begin_ + before;  // refill moved the data to the front
  }
}

// ---------------------------------------------------------------------------------------------
// JSON fields

const char* line_status_name(LineStatus s) {
  switch (s) {
    case LineStatus::kOk: return "ok";
    case LineStatus::kBlankLine: return "blank_line";
    case LineStatus::kInvalidJson: return "invalid_json";
    case LineStatus::kInvalidUtf8: return "invalid_utf8";
    case LineStatus::kNotObject: return "not_object";
    case LineStatus::kMissingKey: return "missing_key";
    case LineStatus::kNonString: return "non_string";
    case LineStatus::kEmptyDocument: return "empty_document";
  }
  return "unknown";
}

struct JsonFieldExtractor::Impl {
  simdjson::dom::parser parser;
};

JsonFieldExtractor::JsonFieldExtractor(std::vector<std::string> keys)
    : impl_(std::make_unique<Impl>()), keys_(std::move(keys)) {}
JsonFieldExtractor::~JsonFieldExtractor() = default;

LineStatus JsonFieldExtractor::extract(const char* data, size_t len, std::vector<std::string_view>* values,
                                       int* detail) {
  values->assign(keys_.size(), std::string_view());
  *detail = 0;
  bool blank = true;
  for (size_t i = 0; i < len && blank; ++i) blank = data[i] == ' ' || data[i] == '\t' || data[i] == '\r';
  if (blank) return LineStatus::kBlankLine;
  simdjson::dom::element doc;
  auto err = impl_->parser.parse(data, len, false).get(doc);
  if (err) {
    *detail = static_cast<int>(err);
    return err == simdjson::UTF8_ERROR ? LineStatus::kInvalidUtf8 : LineStatus::kInvalidJson;
  }
  simdjson::dom::object obj;
  if (doc.get_object().get(obj)) return LineStatus::kNotObject;
  std::vector<char> found(keys_.size(), 0);
  std::vector<char> is_string(keys_.size(), 0);
  for (auto field : obj) {
    for (size_t k = 0; k < keys_.size(); ++k) {
      if (field.key != keys_[k]) continue;
      found[k] = 1;  // a later duplicate replaces an earlier one
      std::string_view v;
      is_string[k] = field.value.get_string().get(v) == simdjson::SUCCESS;
      if (is_string[k]) (*values)[k] = v;
    }
  }
  for (size_t k = 0; k < keys_.size(); ++k) {
    if (!found[k]) {
      *detail = static_cast<int>(k);
      return LineStatus::kMissingKey;
    }
    if (!is_string[k]) {
      *detail = static_cast<int>(k);
      return LineStatus::kNonString;
    }
  }
  return LineStatus::kOk;
}

std::string JsonFieldExtractor::describe(LineStatus status, int detail) const {
  auto key = [&] {
    return detail >= 0 && static_cast<size_t>(detail) < keys_.size() ? keys_[detail] : std::string("?");
  };
  switch (status) {
    case LineStatus::kBlankLine: return "blank line";
    case LineStatus::kInvalidJson:
      return fmt::format("invalid JSON ({})", simdjson::error_message(static_cast<simdjson::error_code>(detail)));
    case LineStatus::kInvalidUtf8: return "invalid UTF-8";
    case LineStatus::kNotObject: return "the line is JSON but not an object, expected {\"KEY\": \"text\", ...}";
    case LineStatus::kMissingKey: return fmt::format("key \"{}\" is missing", key());
    case LineStatus::kNonString: return fmt::format("the value of key \"{}\" is not a string", key());
    case LineStatus::kEmptyDocument:
      return fmt::format("the value of key \"{}\" gives no tokens (empty document)", key());
    case LineStatus::kOk: return "ok";
  }
  return "unknown";
}

std::vector<std::string> JsonFieldExtractor::object_keys(const char* data, size_t len) {
  std::vector<std::string> keys;
  simdjson::dom::element doc;
  simdjson::dom::object obj;
  if (impl_->parser.parse(data, len, false).get(doc) || doc.get_object().get(obj)) return keys;
  for (auto field : obj) keys.emplace_back(field.key);
  return keys;
}

bool is_valid_utf8(const char* data, size_t len) { return simdjson::validate_utf8(data, len); }

}  // namespace llamatrain::data
