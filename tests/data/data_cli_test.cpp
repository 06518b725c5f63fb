// `llamatrain data inspect|merge` and `llamatrain preprocess` through the real binary: inspect
// prints the header, counts, checks and decoded documents and fails clearly on a corrupt file;
// merge of two preprocessed halves equals preprocessing the whole corpus, byte for byte.
#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace llamatrain::data {
namespace {

using llamatrain::testing::fixture;
using llamatrain::testing::golden;
using llamatrain::testing::read_file;
using llamatrain::testing::run_capture;
using llamatrain::testing::TempDir;
using llamatrain::testing::write_file;

const std::string& bin() {
  static const std::string b = llamatrain::testing::llamatrain_bin();
  return b;
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing '" << part << "' in:\n" << text;
}

TEST(DataCli, InspectShowsHeaderChecksAndDocuments) {
  std::string out;
  std::string prefix = golden("fixture_eod_text_document");
  ASSERT_EQ(run_capture(bin() + " data inspect " + prefix + " --docs 4", &out), 0) << out;
  expect_contains(out, "dtype uint16 (code 8");
  expect_contains(out, "sequences 25, documents 25, tokens 723");
  expect_contains(out, "checks: ok");
  expect_contains(out, "tokens/sequence: min 2");
  expect_contains(out, "document 3 (30 tokens):");
  ASSERT_EQ(run_capture(bin() + " data inspect " + prefix + " --docs 4 --tokenizer-model " + fixture("tokenizer.model"),
                        &out),
            0)
      << out;
  expect_contains(out, "\"你好，世界。这是一个用于测试的中文句子。\"");
  expect_contains(out, "all in range");
  ASSERT_EQ(run_capture(bin() + " data inspect " + golden("ids_int32") + " --docs 10", &out), 0) << out;
  expect_contains(out, "dtype int32 (code 4");
  expect_contains(out, "65535 70000 2147483647 0");
}

TEST(DataCli, InspectOfCorruptFileFailsClearly) {
  TempDir dir;
  std::string idx = read_file(golden("fixture_eod_text_document.idx"));
  write_file(dir / "c.idx", idx.substr(0, idx.size() - 5));
  write_file(dir / "c.bin", read_file(golden("fixture_eod_text_document.bin")));
  std::string out;
  EXPECT_EQ(run_capture(bin() + " data inspect " + (dir / "c"), &out), 1);
  expect_contains(out, "error: " + (dir / "c.idx"));
  expect_contains(out, "re-run llamatrain preprocess");
  // A token id past the tokenizer's vocab is reported.
  EXPECT_EQ(
      run_capture(bin() + " data inspect " + golden("ids_int32") + " --tokenizer-model " + fixture("tokenizer.model"),
                  &out),
      1);
  expect_contains(out, "outside the vocab");
}

TEST(DataCli, MergeOfHalvesEqualsPreprocessOfWholeCorpus) {
  TempDir dir;
  std::string text = read_file(fixture("corpus.jsonl"));
  size_t pos = 0;
  for (int l = 0; l < 17; ++l) pos = text.find('\n', pos) + 1;
  write_file(dir / "p0.jsonl", text.substr(0, pos));
  write_file(dir / "p1.jsonl", text.substr(pos));
  std::string out;
  for (std::string p : {"p0", "p1"}) {
    std::string cmd = bin() + " preprocess --input " + (dir / (p + ".jsonl")) + " --tokenizer-model " +
                      fixture("tokenizer.model") + " --output-prefix " + (dir / p) + " --append-eod --workers 2";
    ASSERT_EQ(run_capture(cmd, &out), 0) << out;
    expect_contains(out, "skipped");
  }
  ASSERT_EQ(run_capture(bin() + " data merge " + (dir / "all") + " " + (dir / "p0_text_document") + " " +
                            (dir / "p1_text_document"),
                        &out),
            0)
      << out;
  expect_contains(out, "merged 2 datasets");
  EXPECT_EQ(read_file(dir / "all.bin"), read_file(golden("fixture_eod_text_document.bin")));
  EXPECT_EQ(read_file(dir / "all.idx"), read_file(golden("fixture_eod_text_document.idx")));

  // Different dtypes cannot be merged.
  EXPECT_EQ(run_capture(bin() + " data merge " + (dir / "bad") + " " + (dir / "all") + " " + golden("ids_int32"), &out),
            1);
  expect_contains(out, "the dtypes differ");
}

TEST(DataCli, PreprocessCliStrictAndHelp) {
  TempDir dir;
  std::string out;
  std::string cmd = bin() + " preprocess --input " + fixture("corpus.jsonl") + " --tokenizer-model " +
                    fixture("tokenizer.model") + " --output-prefix " + (dir / "s") + " --strict";
  EXPECT_EQ(run_capture(cmd, &out), 1);
  expect_contains(out, "error: " + fixture("corpus.jsonl") + ":3:");
  ASSERT_EQ(run_capture(bin() + " preprocess --help", &out), 0);
  expect_contains(out, "Examples:");
  expect_contains(out, "--append-eod");
  ASSERT_EQ(run_capture(bin() + " data merge --help", &out), 0);
  expect_contains(out, "Examples:");
}

}  // namespace
}  // namespace llamatrain::data
