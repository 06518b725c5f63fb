// IndexedDataset as a TokenSource; see indexed_token_source.h.
#include "data/indexed_token_source.h"

#include <filesystem>

namespace llamatrain::data {

IndexedTokenSource::IndexedTokenSource(const std::string& prefix) : dataset_(prefix) {}

std::string IndexedTokenSource::fingerprint() const {
  return file_fingerprint(dataset_.prefix() + ".idx") + "|" + file_fingerprint(dataset_.prefix() + ".bin");
}

std::string IndexedTokenSource::default_cache_dir() const {
  const auto dir = std::filesystem::path(dataset_.prefix()).parent_path();
  return dir.empty() ? std::string(".") : dir.string();
}

std::string IndexedTokenSource::name() const { return std::filesystem::path(dataset_.prefix()).filename().string(); }

std::shared_ptr<const TokenSource> open_indexed_source(const std::string& prefix) {
  return std::make_shared<IndexedTokenSource>(prefix);
}

}  // namespace llamatrain::data
