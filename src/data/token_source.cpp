// InMemoryTokenSource and the fingerprint/hash helpers; see token_source.h.
#include "data/token_source.h"

#include <sys/stat.h>

#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace llamatrain::data {

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

InMemoryTokenSource::InMemoryTokenSource(std::vector<std::vector<int32_t>> sequences, std::string name)
    : sequences_(std::move(sequences)), name_(std::move(name)) {}

void InMemoryTokenSource::read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const {
  const auto& s = sequences_[size_t(seq)];
  CHECK(offset >= 0 && count >= 0 && offset + count <= int64_t(s.size()),
        "read of sequence {} [{}, {}) outside its {} tokens", seq, offset, offset + count, s.size());
  if (count > 0) std::memcpy(out, s.data() + offset, size_t(count) * sizeof(int32_t));
}

std::string InMemoryTokenSource::fingerprint() const {
  uint64_t h = fnv1a64("memory", 6);
  for (const auto& s : sequences_) {
    uint64_t n = s.size();
    h = fnv1a64(&n, sizeof(n), h);
    h = fnv1a64(s.data(), s.size() * sizeof(int32_t), h);
  }
  return fmt::format("memory:{}:{}:{:016x}", name_, sequences_.size(), h);
}

std::string file_fingerprint(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    fail("data file {}: cannot stat it ({})\nhint: check data_prefix (no .bin/.idx suffix)", path,
         std::strerror(errno));
  int64_t mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return fmt::format("{}:{}:{}", path, int64_t(st.st_size), mtime_ns);
}

VocabCheckedSource::VocabCheckedSource(std::shared_ptr<const TokenSource> inner, int64_t vocab, std::string where)
    : inner_(std::move(inner)), vocab_(vocab), where_(std::move(where)) {}

void VocabCheckedSource::read(int64_t seq, int64_t offset, int64_t count, int32_t* out) const {
  inner_->read(seq, offset, count, out);
  int32_t bad = 0;
  for (int64_t j = 0; j < count; j++) bad |= int32_t(out[j] < 0 || out[j] >= vocab_);  // (no branch per token)
  if (bad == 0) return;
  for (int64_t j = 0; j < count; j++)
    if (out[j] < 0 || out[j] >= vocab_)
      fail_as("data",
              "{}: document {} holds token id {} at position {}, outside the model's vocabulary of {} ids\nhint: the "
              "data was tokenized with another tokenizer, or the file is damaged; preprocess it again with the "
              "model's tokenizer (`llamatrain plan` checks the ids before a run)",
              where_, seq, out[j], offset + j, vocab_);
}

}  // namespace llamatrain::data
