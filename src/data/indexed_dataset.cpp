// Megatron indexed dataset writer and reader (the .idx mapped, the .bin read with pread); see
// indexed_dataset.h and docs/formats.md section 1.
// All multi-byte values are little-endian and read/written through memcpy (the arrays are unaligned).
#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "core/file.h"

namespace llamatrain::data {

static_assert(std::endian::native == std::endian::little, "the indexed dataset format is little-endian");

namespace {

constexpr size_t kBufferBytes = 4 << 20;

const char* kRegenerate =
    "the file is damaged, truncated, or not a Megatron indexed dataset; regenerate it with "
    "`llamatrain preprocess --input CORPUS --tokenizer-model tokenizer.model --output-prefix OUT` "
    "(re-run llamatrain preprocess ...), or copy both .bin and .idx again";

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool valid_code(uint8_t code) { return code >= 1 && code <= 8; }

}  // namespace

const char* dtype_name(TokenDtype d) {
  switch (d) {
    case TokenDtype::kUint8: return "uint8";
    case TokenDtype::kInt8: return "int8";
    case TokenDtype::kInt16: return "int16";
    case TokenDtype::kInt32: return "int32";
    case TokenDtype::kInt64: return "int64";
    case TokenDtype::kFloat64: return "float64";
    case TokenDtype::kFloat32: return "float32";
    case TokenDtype::kUint16: return "uint16";
  }
  return "unknown";
}

int dtype_itemsize(TokenDtype d) {
  switch (d) {
    case TokenDtype::kUint8:
    case TokenDtype::kInt8: return 1;
    case TokenDtype::kInt16:
    case TokenDtype::kUint16: return 2;
    case TokenDtype::kInt32:
    case TokenDtype::kFloat32: return 4;
    case TokenDtype::kInt64:
    case TokenDtype::kFloat64: return 8;
  }
  return 0;
}

TokenDtype dtype_for_vocab(int64_t vocab_size) { return vocab_size < 65500 ? TokenDtype::kUint16 : TokenDtype::kInt32; }

std::string index_path(const std::string& prefix) { return prefix + ".idx"; }
std::string data_path(const std::string& prefix) { return prefix + ".bin"; }

// ---------------------------------------------------------------------------------------------
// Writer

// Append-only array of fixed-size elements: the last chunk in memory, earlier ones in a file that
// is created on the first overflow and always removed with the object.
class IndexedDatasetWriter::Spill {
 public:
  static constexpr size_t kChunkBytes = 1 << 20;  // a multiple of every element size
  Spill(std::string path, size_t elem) : path_(std::move(path)), elem_(elem) { buf_.reserve(kChunkBytes); }
  ~Spill() {
    if (f_) std::fclose(f_);
    if (file_bytes_ > 0 || f_) std::remove(path_.c_str());
    unregister_temporary(registration_);
  }
  void push(const void* v) {
    const auto* p = static_cast<const uint8_t*>(v);
    buf_.insert(buf_.end(), p, p + elem_);
    if (buf_.size() >= kChunkBytes) flush();
  }
  // Calls fn(bytes, n) over the whole array in order, in chunks of whole elements.
  template <typename F>
  void for_each(F fn) {
    if (f_) {
      if (std::fflush(f_) != 0 || std::fseek(f_, 0, SEEK_SET) != 0) fail("reading back {} failed", path_);
      std::vector<uint8_t> chunk(kChunkBytes);
      for (uint64_t done = 0; done < file_bytes_;) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), file_bytes_ - done));
        if (std::fread(chunk.data(), 1, n, f_) != n) fail("reading back {} failed: {}", path_, std::strerror(errno));
        fn(chunk.data(), n);
        done += n;
      }
    }
    if (!buf_.empty()) fn(buf_.data(), buf_.size());
  }

 private:
  void flush() {
    if (!f_) {
      registration_ = register_temporary(path_, false);
      f_ = std::fopen(path_.c_str(), "w+b");
      if (!f_)
        fail("cannot create {}: {}\nhint: check the --output-prefix folder and its free space", path_,
             std::strerror(errno));
    }
    if (std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
      fail("writing {} failed: {}\nhint: is the disk full?", path_, std::strerror(errno));
    file_bytes_ += buf_.size();
    buf_.clear();
  }

  std::string path_;
  size_t elem_;
  std::FILE* f_ = nullptr;
  int registration_ = -1;
  uint64_t file_bytes_ = 0;
  std::vector<uint8_t> buf_;
};

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDtype dtype)
    : prefix_(std::move(prefix)), dtype_(dtype), buffer_(kBufferBytes) {
  if (dtype != TokenDtype::kUint16 && dtype != TokenDtype::kInt32 && dtype != TokenDtype::kInt64 &&
      dtype != TokenDtype::kUint8 && dtype != TokenDtype::kInt16 && dtype != TokenDtype::kInt8)
    fail("indexed dataset {}: token dtype {} is not an integer type, expected uint16 or int32", prefix_,
         dtype_name(dtype));
  const std::string parent = std::filesystem::path(prefix_).parent_path().string();
  if (!parent.empty() && !is_directory(parent))
    fail("output folder {} does not exist\nhint: create it first (mkdir -p {})", parent, parent);
  bin_ = std::make_unique<AtomicFile>(data_path(prefix_));
  sizes_ = std::make_unique<Spill>(index_path(prefix_) + ".sizes.tmp", 4);
  doc_idx_ = std::make_unique<Spill>(index_path(prefix_) + ".docs.tmp", 8);
  const int64_t zero = 0;
  doc_idx_->push(&zero);
}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

void IndexedDatasetWriter::flush_buffer() {
  if (buffer_used_ == 0) return;
  bin_->write(buffer_.data(), buffer_used_);
  buffer_used_ = 0;
}

void IndexedDatasetWriter::write_bytes(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    if (buffer_used_ == buffer_.size()) flush_buffer();
    size_t take = std::min(n, buffer_.size() - buffer_used_);
    std::memcpy(buffer_.data() + buffer_used_, p, take);
    buffer_used_ += take;
    p += take;
    n -= take;
  }
}

namespace {
template <typename T>
void convert_tokens(uint8_t* out, std::span<const int32_t> tokens, const std::string& prefix) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    int64_t v = tokens[i];
    if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        v > static_cast<int64_t>(std::numeric_limits<T>::max()))
      fail("indexed dataset {}: token id {} does not fit the file's dtype (range {}..{})\n"
           "hint: the dtype is chosen from the tokenizer's vocab size; is the tokenizer the right one?",
           prefix, v, static_cast<int64_t>(std::numeric_limits<T>::min()),
           static_cast<int64_t>(std::numeric_limits<T>::max()));
    T t = static_cast<T>(v);
    std::memcpy(out + i * sizeof(T), &t, sizeof(T));
  }
}
}  // namespace

void IndexedDatasetWriter::add_sequence(std::span<const int32_t> tokens) {
  CHECK(!finished_, "add_sequence after finish");
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("indexed dataset {}: a sequence of {} tokens does not fit the i32 sizes field", prefix_, tokens.size());
  const size_t item = dtype_itemsize(dtype_);
  size_t done = 0;
  // Convert in chunks straight into the output buffer.
  while (done < tokens.size()) {
    if (buffer_used_ + item > buffer_.size()) flush_buffer();
    size_t room = (buffer_.size() - buffer_used_) / item;
    size_t n = std::min(room, tokens.size() - done);
    uint8_t* out = buffer_.data() + buffer_used_;
    auto chunk = tokens.subspan(done, n);
    switch (dtype_) {
      case TokenDtype::kUint16: convert_tokens<uint16_t>(out, chunk, prefix_); break;
      case TokenDtype::kInt32: convert_tokens<int32_t>(out, chunk, prefix_); break;
      case TokenDtype::kInt64: convert_tokens<int64_t>(out, chunk, prefix_); break;
      case TokenDtype::kUint8: convert_tokens<uint8_t>(out, chunk, prefix_); break;
      case TokenDtype::kInt8: convert_tokens<int8_t>(out, chunk, prefix_); break;
      case TokenDtype::kInt16: convert_tokens<int16_t>(out, chunk, prefix_); break;
      default: CHECK(false, "unsupported writer dtype");
    }
    buffer_used_ += n * item;
    done += n;
  }
  const int32_t size = static_cast<int32_t>(tokens.size());
  sizes_->push(&size);
  ++num_sequences_;
  bin_bytes_ += tokens.size() * item;
  num_tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetWriter::end_document() {
  CHECK(!finished_, "end_document after finish");
  const int64_t d = num_sequences_;
  doc_idx_->push(&d);
  ++num_doc_indices_;
}

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  add_sequence(tokens);
  end_document();
}

void IndexedDatasetWriter::append(const IndexedDataset& other) {
  CHECK(!finished_, "append after finish");
  if (other.dtype() != dtype_)
    fail("cannot merge {} (dtype {}) into {} (dtype {}): the dtypes differ, expected the same dtype\n"
         "hint: preprocess all parts with the same tokenizer (and the same --need-pad-id)",
         other.prefix(), dtype_name(other.dtype()), prefix_, dtype_name(dtype_));
  const int64_t base_seq = num_sequences();
  for (int64_t i = 0; i < other.num_sequences(); ++i) {
    const int32_t size = other.sequence_length(i);
    sizes_->push(&size);
  }
  num_sequences_ += other.num_sequences();
  for (int64_t k = 1; k <= other.num_documents(); ++k) {
    const int64_t d = base_seq + other.document_index(k);
    doc_idx_->push(&d);
  }
  num_doc_indices_ += other.num_documents();
  write_bytes(other.bin_data(), other.bin_size());
  bin_bytes_ += other.bin_size();
  num_tokens_ += other.num_tokens();
}

void IndexedDatasetWriter::finish() {
  CHECK(!finished_, "finish called twice");
  flush_buffer();
  CHECK(bin_->bytes_written() == bin_bytes_, ".bin has {} bytes written, {} counted", bin_->bytes_written(),
        bin_bytes_);

  AtomicFile idx(index_path(prefix_));
  const uint64_t S = static_cast<uint64_t>(num_sequences_), D = static_cast<uint64_t>(num_doc_indices_);
  const uint8_t code = static_cast<uint8_t>(dtype_);
  idx.write(kIndexMagic, 9);
  idx.write(&kIndexVersion, 8);
  idx.write(&code, 1);
  idx.write(&S, 8);
  idx.write(&D, 8);
  auto copy = [&](const uint8_t* p, size_t n) { idx.write(p, n); };
  sizes_->for_each(copy);
  // pointers[i] = sum of sizes[0..i) * itemsize: byte offsets, recomputed from the sizes.
  const int64_t item = dtype_itemsize(dtype_);
  int64_t running = 0;
  std::vector<int64_t> ptrs;
  sizes_->for_each([&](const uint8_t* p, size_t n) {
    ptrs.resize(n / 4);
    for (size_t i = 0; i < n / 4; ++i) {
      ptrs[i] = running;
      running += static_cast<int64_t>(load<int32_t>(p + 4 * i)) * item;
    }
    idx.write(ptrs.data(), 8 * ptrs.size());
  });
  CHECK(static_cast<uint64_t>(running) == bin_bytes_, "pointers end at {}, .bin has {} bytes", running, bin_bytes_);
  doc_idx_->for_each(copy);

  // The .bin first: a finished-looking pair needs the .idx, which is committed last.
  bin_->commit();
  idx.commit();
  finished_ = true;
  bin_.reset();
  sizes_.reset();  // removes the spill files
  doc_idx_.reset();
}

// ---------------------------------------------------------------------------------------------
// Index parsing

IndexView parse_index(const uint8_t* data, size_t size, const std::string& idx_name, uint64_t bin_size,
                      const std::string& bin_name) {
  IndexView v;
  if (size < kIndexHeaderSize)
    fail("{}: file is {} bytes, shorter than the {}-byte header, expected at least {}\nhint: {}", idx_name, size,
         kIndexHeaderSize, kIndexHeaderSize, kRegenerate);
  if (std::memcmp(data, kIndexMagic, 9) != 0) {
    std::string seen;
    for (int i = 0; i < 9; ++i) seen += fmt::format("{:02x}", data[i]);
    fail("{}: field 'magic' is {}, expected 4d4d49444944580000 (\"MMIDIDX\\0\\0\"){}\nhint: {}", idx_name, seen,
         std::memcmp(data, "TNTIDX\0\0", 8) == 0 ? " (this is the older non-mmap TNTIDX format, not supported)" : "",
         kRegenerate);
  }
  uint64_t version = load<uint64_t>(data + 9);
  if (version != kIndexVersion)
    fail("{}: field 'version' is {}, expected {}\nhint: {}", idx_name, version, kIndexVersion, kRegenerate);
  uint8_t code = data[17];
  if (!valid_code(code))
    fail("{}: field 'dtype' has code {}, expected 1..8 (8 = uint16, 4 = int32)\nhint: {}", idx_name, code, kRegenerate);
  v.dtype = static_cast<TokenDtype>(code);
  if (v.dtype == TokenDtype::kFloat32 || v.dtype == TokenDtype::kFloat64)
    fail("{}: field 'dtype' has code {} ({}), expected an integer token type (8 = uint16, 4 = int32)\nhint: {}",
         idx_name, code, dtype_name(v.dtype), kRegenerate);
  const uint64_t S = load<uint64_t>(data + 18);
  const uint64_t D = load<uint64_t>(data + 26);
  const uint64_t body = size - kIndexHeaderSize;
  // Overflow-safe: 12*S + 8*D must equal body exactly.
  if (S > body / 12)
    fail("{}: field 'sequence count' is {}, expected at most {} for a {}-byte file\nhint: {}", idx_name, S, body / 12,
         size, kRegenerate);
  if (D > body / 8)
    fail("{}: field 'document count' is {}, expected at most {} for a {}-byte file\nhint: {}", idx_name, D, body / 8,
         size, kRegenerate);
  const uint64_t expected = kIndexHeaderSize + 12 * S + 8 * D;
  if (expected != size)
    fail("{}: file size is {} bytes, expected {} = 34 + 12*S + 8*D for S={} sequences and D={} document "
         "indices{}\nhint: {}",
         idx_name, size, expected, S, D,
         size == expected + S ? " (this looks like a multimodal dataset with sequence_modes, not supported)" : "",
         kRegenerate);
  if (D < 1)
    fail("{}: field 'document count' is 0, expected at least 1 (document_indices starts with 0)\nhint: {}", idx_name,
         kRegenerate);
  v.num_sequences = S;
  v.num_doc_indices = D;
  v.sizes = data + kIndexHeaderSize;
  v.pointers = v.sizes + 4 * S;
  v.doc_idx = v.pointers + 8 * S;

  // sizes and pointers: contiguous sequences covering the whole .bin.
  const uint64_t item = dtype_itemsize(v.dtype);
  uint64_t expect_ptr = 0;
  uint64_t tokens = 0;
  for (uint64_t i = 0; i < S; ++i) {
    int32_t s = load<int32_t>(v.sizes + 4 * i);
    int64_t p = load<int64_t>(v.pointers + 8 * i);
    if (s < 0) fail("{}: field 'sizes[{}]' is {}, expected a length >= 0\nhint: {}", idx_name, i, s, kRegenerate);
    if (p < 0 || static_cast<uint64_t>(p) != expect_ptr)
      fail("{}: field 'pointers[{}]' is {}, expected {} (pointers[i-1] + sizes[i-1] * {} bytes)\nhint: {}", idx_name, i,
           p, expect_ptr, item, kRegenerate);
    expect_ptr += static_cast<uint64_t>(s) * item;
    tokens += static_cast<uint64_t>(s);
    if (expect_ptr > bin_size)
      fail("{}: sequence {} ends at byte {}, past the end of {} ({} bytes), expected the .bin to hold it\n"
           "hint: the .bin is truncated or belongs to another dataset; {}",
           idx_name, i, expect_ptr, bin_name, bin_size, kRegenerate);
  }
  if (expect_ptr != bin_size)
    fail("{}: size is {} bytes, expected {} bytes (the {} tokens listed in {} times {} bytes)\n"
         "hint: the .bin and .idx do not belong together; {}",
         bin_name, bin_size, expect_ptr, tokens, idx_name, item, kRegenerate);
  v.num_tokens = tokens;

  // document indices: 0, non-decreasing, ending at S.
  int64_t prev = load<int64_t>(v.doc_idx);
  if (prev != 0) fail("{}: field 'document_indices[0]' is {}, expected 0\nhint: {}", idx_name, prev, kRegenerate);
  for (uint64_t k = 1; k < D; ++k) {
    int64_t d = load<int64_t>(v.doc_idx + 8 * k);
    if (d < prev)
      fail("{}: field 'document_indices[{}]' is {}, expected >= {} (document_indices[{}]; they never decrease)\nhint: "
           "{}",
           idx_name, k, d, prev, k - 1, kRegenerate);
    prev = d;
  }
  if (static_cast<uint64_t>(prev) != S)
    fail("{}: field 'document_indices[{}]' (the last) is {}, expected {} (the sequence count)\nhint: {}", idx_name,
         D - 1, prev, S, kRegenerate);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Reader

namespace {
const char* kPrefixHint =
    "the dataset prefix names PREFIX.bin and PREFIX.idx without the extension, e.g. data/corpus_text_document; "
    "create it with `llamatrain preprocess`";
}  // namespace

IndexedDataset::IndexedDataset(const std::string& prefix)
    : prefix_(prefix),
      idx_(index_path(prefix), "dataset index", kPrefixHint),
      bin_(data_path(prefix), "dataset token data", kPrefixHint) {
  static const uint8_t kEmpty[1] = {0};
  index_ = parse_index(idx_.data() ? idx_.data() : kEmpty, idx_.size(), idx_.path(), bin_.size(), bin_.path());
  bin_fd_ = ::open(bin_.path().c_str(), O_RDONLY | O_CLOEXEC);
  if (bin_fd_ < 0)
    fail_as("data", "cannot open dataset token data {}: {}\nhint: {}", bin_.path(), std::strerror(errno), kPrefixHint);
}

IndexedDataset::~IndexedDataset() {
  if (bin_fd_ >= 0) ::close(bin_fd_);
}

void IndexedDataset::read_bin(int64_t at, size_t bytes, uint8_t* out, int64_t i) const {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t r = ::pread(bin_fd_, out + done, bytes - done, off_t(at) + off_t(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      fail_as("data",
              "{}: cannot read bytes [{}, {}) of sequence {}: {}\nhint: check the disk or the file system "
              "it is on; the run can resume from its last checkpoint",
              bin_.path(), at, at + int64_t(bytes), i, std::strerror(errno));
    if (r == 0) {
      struct stat st {};
      const int64_t now = ::fstat(bin_fd_, &st) == 0 ? int64_t(st.st_size) : -1;
      fail_as("data",
              "{}: sequence {} ends at byte {}, but the file now holds {} bytes ({} when the run opened it): it was "
              "truncated or rewritten in place while the run read it\nhint: preprocess into a new prefix (never over "
              "the files a running job reads), point data_prefix at it, and resume from the last checkpoint",
              bin_.path(), i, at + int64_t(bytes), now, bin_.size());
    }
    done += size_t(r);
  }
}

int32_t IndexedDataset::sequence_length(int64_t i) const {
  CHECK(i >= 0 && static_cast<uint64_t>(i) < index_.num_sequences, "sequence {} out of range [0, {})", i,
        index_.num_sequences);
  return load<int32_t>(index_.sizes + 4 * i);
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  CHECK(i >= 0 && static_cast<uint64_t>(i) < index_.num_sequences, "sequence {} out of range [0, {})", i,
        index_.num_sequences);
  return load<int64_t>(index_.pointers + 8 * i);
}

int64_t IndexedDataset::document_index(int64_t k) const {
  CHECK(k >= 0 && static_cast<uint64_t>(k) < index_.num_doc_indices, "document index {} out of range [0, {})", k,
        index_.num_doc_indices);
  return load<int64_t>(index_.doc_idx + 8 * k);
}

std::vector<int64_t> IndexedDataset::document_indices() const {
  std::vector<int64_t> out(index_.num_doc_indices);
  if (!out.empty()) std::memcpy(out.data(), index_.doc_idx, out.size() * 8);
  return out;
}

template <typename T>
void IndexedDataset::read_as(int64_t i, int64_t offset, int64_t count, T* out) const {
  const int64_t len = sequence_length(i);
  CHECK(offset >= 0 && count >= 0 && offset + count <= len, "tokens [{}, {}) out of sequence {} of length {}", offset,
        offset + count, i, len);
  const size_t item = dtype_itemsize(index_.dtype);
  thread_local std::vector<uint8_t> bytes;  // this thread's last read, reused
  bytes.resize(size_t(count) * item);
  if (count > 0) read_bin(sequence_pointer(i) + offset * int64_t(item), bytes.size(), bytes.data(), i);
  const uint8_t* p = bytes.data();
  auto copy = [&](auto tag) {
    using S = decltype(tag);
    for (int64_t j = 0; j < count; ++j) out[j] = static_cast<T>(load<S>(p + j * sizeof(S)));
  };
  switch (index_.dtype) {
    case TokenDtype::kUint16: copy(uint16_t{}); break;
    case TokenDtype::kInt32: copy(int32_t{}); break;
    case TokenDtype::kInt64: copy(int64_t{}); break;
    case TokenDtype::kUint8: copy(uint8_t{}); break;
    case TokenDtype::kInt8: copy(int8_t{}); break;
    case TokenDtype::kInt16: copy(int16_t{}); break;
    default: CHECK(false, "float token dtype passed validation");
  }
}

void IndexedDataset::read(int64_t i, int64_t offset, int64_t count, int32_t* out) const {
  read_as(i, offset, count, out);
}
void IndexedDataset::read(int64_t i, int64_t offset, int64_t count, int64_t* out) const {
  read_as(i, offset, count, out);
}

std::vector<int32_t> IndexedDataset::sequence(int64_t i) const {
  std::vector<int32_t> out(sequence_length(i));
  read(i, 0, static_cast<int64_t>(out.size()), out.data());
  return out;
}

}  // namespace llamatrain::data
