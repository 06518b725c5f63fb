// End to end through the files: `llamatrain preprocess` writes a Megatron dataset, IndexedTokenSource
// opens it for GPT sample construction, and every sample equals the one built from the same
// sequences held in memory; the index cache lands next to the data and is reused.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "data/blend.h"
#include "data/indexed_token_source.h"
#include "test_util.h"

namespace llamatrain::data {
namespace {

using testing::fixture;
using testing::llamatrain_bin;
using testing::run_capture;
using testing::TempDir;

TEST(IndexedSamples, PreprocessedDatasetFeedsGptSamples) {
  TempDir tmp;
  const std::string dir = tmp.path();
  const std::string prefix = tmp / "corpus";
  std::string out;
  ASSERT_EQ(0, run_capture(llamatrain_bin() + " preprocess --input " + fixture("corpus.jsonl") + " --tokenizer-model " +
                               fixture("tokenizer.model") + " --output-prefix " + prefix +
                               " --append-eod --workers 2 --quiet",
                           &out))
      << out;
  const std::string data_prefix = prefix + "_text_document";
  auto source = open_indexed_source(data_prefix);
  ASSERT_GT(source->num_sequences(), 10);

  std::vector<std::vector<int32_t>> seqs;
  for (int64_t i = 0; i < source->num_sequences(); i++) {
    std::vector<int32_t> s(source->sequence_length(i));
    source->read(i, 0, int64_t(s.size()), s.data());
    seqs.push_back(std::move(s));
  }
  auto memory = std::make_shared<InMemoryTokenSource>(seqs);

  GptDataConfig cfg;
  cfg.data_prefix = {data_prefix};
  cfg.splits_string = "90,10,0";
  cfg.seq_length = 16;
  cfg.seed = 7;
  const std::array<int64_t, 3> n = {40, 8, -1};
  auto from_file = build_gpt_datasets(cfg, n, open_indexed_source);
  GptDataConfig mem_cfg = cfg;
  mem_cfg.cache.enabled = false;
  auto from_memory = build_gpt_datasets(mem_cfg, n, [&](const std::string&) { return memory; });
  for (int split = 0; split < 2; split++) {
    ASSERT_NE(from_file[split], nullptr);
    ASSERT_EQ(from_file[split]->size(), from_memory[split]->size());
    std::vector<int32_t> a(17), b(17);
    for (int64_t i = 0; i < from_file[split]->size(); i++) {
      from_file[split]->sample_text(i, a.data());
      from_memory[split]->sample_text(i, b.data());
      ASSERT_EQ(a, b) << "split " << split << " sample " << i;
    }
  }
  // The cache was written next to the data and a second build reads the same samples from it.
  int cache_files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.path().string().find("corpus_text_document") != std::string::npos && e.path().extension() != ".bin" &&
        e.path().extension() != ".idx" && e.is_regular_file())
      cache_files++;
  EXPECT_GT(cache_files, 0) << "no index cache next to the data";
  auto again = build_gpt_datasets(cfg, n, open_indexed_source);
  std::vector<int32_t> a(17), b(17);
  for (int64_t i = 0; i < again[0]->size(); i++) {
    again[0]->sample_text(i, a.data());
    from_memory[0]->sample_text(i, b.data());
    ASSERT_EQ(a, b) << "cached sample " << i;
  }
}

TEST(IndexedSamples, MissingPrefixIsAClearError) {
  try {
    open_indexed_source("/nonexistent/data/corpus_text_document");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/data/corpus_text_document"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace llamatrain::data
