// Indexed dataset (.bin/.idx) writer and reader: the docs/formats.md 1.7 test vector byte for byte, round
// trips (uint16/int32, multi-sequence and empty documents, sub-range reads), files written by the
// independent Python writer (tools/reference/megatron_writer.py), merging, and clear errors for
// every truncation of a small .idx and for corrupt fields (magic, version, dtype, counts, pointers,
// document indices, .bin size).
#include "data/indexed_dataset.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace llamatrain::data {
namespace {

using llamatrain::testing::exists;
using llamatrain::testing::golden;
using llamatrain::testing::read_file;
using llamatrain::testing::TempDir;
using llamatrain::testing::write_file;

std::string hex_bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

// Expects constructing the dataset to throw Error whose message contains every one of `parts`.
void expect_open_error(const std::string& prefix, std::initializer_list<std::string> parts) {
  try {
    IndexedDataset ds(prefix);
    ADD_FAILURE() << "opened " << prefix << " without error";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  }
}

TEST(IndexedDataset, Formats17TestVectorByteForByte) {
  TempDir dir;
  std::string prefix = dir / "tv";
  {
    IndexedDatasetWriter w(prefix, TokenDtype::kUint16);
    std::vector<int32_t> a{1, 5, 2}, b{1, 7, 8, 2};
    w.add_document(a);
    w.add_document(b);
    EXPECT_FALSE(exists(prefix + ".idx"));  // nothing final before finish()
    EXPECT_FALSE(llamatrain::testing::temporaries(dir.path()).empty());
    w.finish();
  }
  EXPECT_TRUE(llamatrain::testing::temporaries(dir.path()).empty());
  std::string bin = read_file(prefix + ".bin");
  EXPECT_EQ(bin, hex_bytes({1, 0, 5, 0, 2, 0, 1, 0, 7, 0, 8, 0, 2, 0}));
  std::string idx = read_file(prefix + ".idx");
  std::string expect = std::string("MMIDIDX\0\0", 9) + hex_bytes({1, 0, 0, 0, 0, 0, 0, 0}) + hex_bytes({8}) +
                       hex_bytes({2, 0, 0, 0, 0, 0, 0, 0}) + hex_bytes({3, 0, 0, 0, 0, 0, 0, 0}) +
                       hex_bytes({3, 0, 0, 0, 4, 0, 0, 0}) + std::string(8, '\0') +
                       hex_bytes({6, 0, 0, 0, 0, 0, 0, 0}) + std::string(8, '\0') +
                       hex_bytes({1, 0, 0, 0, 0, 0, 0, 0}) + hex_bytes({2, 0, 0, 0, 0, 0, 0, 0});
  ASSERT_EQ(idx.size(), 82u);
  EXPECT_EQ(idx, expect);

  IndexedDataset ds(prefix);
  EXPECT_EQ(ds.num_sequences(), 2);
  EXPECT_EQ(ds.num_documents(), 2);
  EXPECT_EQ(ds.num_tokens(), 7);
  EXPECT_EQ(ds.dtype(), TokenDtype::kUint16);
  EXPECT_EQ(ds.sequence(1), (std::vector<int32_t>{1, 7, 8, 2}));
  EXPECT_EQ(ds.sequence_pointer(1), 6);
}

TEST(IndexedDataset, DtypeChoiceMatchesMegatron) {
  EXPECT_EQ(dtype_for_vocab(32000), TokenDtype::kUint16);
  EXPECT_EQ(dtype_for_vocab(32001), TokenDtype::kUint16);
  EXPECT_EQ(dtype_for_vocab(65499), TokenDtype::kUint16);
  EXPECT_EQ(dtype_for_vocab(65500), TokenDtype::kInt32);
  EXPECT_EQ(dtype_for_vocab(128256), TokenDtype::kInt32);
}

TEST(IndexedDataset, RoundTripRandomDocumentsBothDtypes) {
  TempDir dir;
  std::mt19937 rng(7);
  for (TokenDtype dt : {TokenDtype::kUint16, TokenDtype::kInt32}) {
    const int32_t max_id = dt == TokenDtype::kUint16 ? 65535 : 2000000000;
    std::vector<std::vector<int32_t>> docs;
    for (int d = 0; d < 200; ++d) {
      std::vector<int32_t> doc(rng() % 300);
      for (auto& t : doc) t = static_cast<int32_t>(rng() % (static_cast<uint32_t>(max_id) + 1));
      docs.push_back(doc);
    }
    std::string prefix = dir / dtype_name(dt);
    {
      IndexedDatasetWriter w(prefix, dt);
      for (const auto& d : docs) w.add_document(d);
      w.finish();
    }
    IndexedDataset ds(prefix);
    ASSERT_EQ(ds.num_sequences(), 200);
    EXPECT_EQ(ds.dtype(), dt);
    int64_t total = 0;
    for (int d = 0; d < 200; ++d) {
      ASSERT_EQ(ds.sequence(d), docs[d]) << "document " << d;
      EXPECT_EQ(ds.document_index(d), d);
      total += static_cast<int64_t>(docs[d].size());
    }
    EXPECT_EQ(ds.num_tokens(), total);
    EXPECT_EQ(ds.bin_size(), static_cast<uint64_t>(total * dtype_itemsize(dt)));
    // Sub-range reads into int32 and int64.
    int d = 0;
    while (docs[d].size() < 10) ++d;
    std::vector<int32_t> part(5);
    ds.read(d, 3, 5, part.data());
    EXPECT_EQ(part, std::vector<int32_t>(docs[d].begin() + 3, docs[d].begin() + 8));
    std::vector<int64_t> part64(5);
    ds.read(d, 3, 5, part64.data());
    for (int j = 0; j < 5; ++j) EXPECT_EQ(part64[j], docs[d][3 + j]);
  }
}

// A .bin truncated (or rewritten in place) under a reader that opened it whole: the tokens still in
// the file read as before; a read past the new end is an Error with the "data" code naming the file,
// where it ends and the fix, never a SIGBUS (the reader does not map the .bin).
TEST(IndexedDataset, ABinTruncatedUnderTheReaderIsANamedError) {
  TempDir dir;
  const std::string prefix = dir / "corpus";
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 40; ++d) docs.push_back(std::vector<int32_t>(size_t(100 + d), d + 1));
  {
    IndexedDatasetWriter w(prefix, TokenDtype::kUint16);
    for (const auto& d : docs) w.add_document(d);
    w.finish();
  }
  IndexedDataset ds(prefix);
  const int64_t cut = ds.sequence_pointer(20) + 10;  // inside sequence 20
  ASSERT_EQ(::truncate((prefix + ".bin").c_str(), off_t(cut)), 0);
  EXPECT_EQ(ds.sequence(19), docs[19]) << "what is still in the file reads as before";
  std::vector<int32_t> head(5);
  ds.read(20, 0, 5, head.data());  // bytes [0, 10) of sequence 20 are still there
  EXPECT_EQ(head, std::vector<int32_t>(5, 21));
  for (int64_t seq : {int64_t(20), int64_t(39)}) {
    try {
      (void)ds.sequence(seq);
      ADD_FAILURE() << "read sequence " << seq << " past the end of the truncated file";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(std::string(e.code()), "data");
      for (const std::string& part : std::vector<std::string>{
               prefix + ".bin", "sequence " + std::to_string(seq), "now holds " + std::to_string(cut) + " bytes",
               "truncated or rewritten in place", "resume from the last checkpoint"})
        EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
    }
  }
}

TEST(IndexedDataset, MultiSequenceAndEmptyDocuments) {
  TempDir dir;
  std::string prefix = dir / "multi";
  {
    IndexedDatasetWriter w(prefix, TokenDtype::kUint16);
    w.add_sequence(std::vector<int32_t>{10, 11});
    w.add_sequence(std::vector<int32_t>{12});
    w.end_document();  // document 0: sequences 0, 1
    w.end_document();  // document 1: empty (MLM's add_document of nothing)
    w.add_sequence(std::vector<int32_t>{});
    w.end_document();  // document 2: one empty sequence
    w.add_document(std::vector<int32_t>{13, 14, 15});
    w.finish();
  }
  IndexedDataset ds(prefix);
  EXPECT_EQ(ds.num_sequences(), 4);
  EXPECT_EQ(ds.num_documents(), 4);
  EXPECT_EQ(ds.document_indices(), (std::vector<int64_t>{0, 2, 2, 3, 4}));
  EXPECT_EQ(ds.sequence_length(2), 0);
  EXPECT_EQ(ds.sequence(3), (std::vector<int32_t>{13, 14, 15}));
}

// More index entries than one in-memory chunk: the arrays go through the spill files and back.
TEST(IndexedDataset, LargeIndexSpillsAndRoundTrips) {
  TempDir dir;
  std::string prefix = dir / "large";
  const int64_t n = 700000;  // > 2 chunks of int32 sizes, > 5 chunks of int64 document indices
  {
    IndexedDatasetWriter w(prefix, TokenDtype::kUint16);
    std::vector<int32_t> doc;
    for (int64_t i = 0; i < n; ++i) {
      doc.assign(static_cast<size_t>(i % 3), static_cast<int32_t>(i % 60000));
      if (i % 5 == 4) {
        w.add_sequence(doc);  // every 5th document has two sequences
        w.add_sequence(doc);
        w.end_document();
      } else {
        w.add_document(doc);
      }
    }
    EXPECT_TRUE(exists(prefix + ".idx.sizes.tmp"));
    w.finish();
  }
  EXPECT_FALSE(exists(prefix + ".idx.sizes.tmp"));
  EXPECT_FALSE(exists(prefix + ".idx.docs.tmp"));
  IndexedDataset ds(prefix);  // validates pointers and document indices
  EXPECT_EQ(ds.num_documents(), n);
  EXPECT_EQ(ds.num_sequences(), n + n / 5);
  for (int64_t k : {int64_t{0}, int64_t{4}, int64_t{262143}, int64_t{524289}, n - 1}) {
    int64_t first = ds.document_index(k);
    auto seq = ds.sequence(first);
    EXPECT_EQ(seq, std::vector<int32_t>(static_cast<size_t>(k % 3), static_cast<int32_t>(k % 60000))) << k;
    EXPECT_EQ(ds.document_index(k + 1) - first, k % 5 == 4 ? 2 : 1) << k;
  }
}

TEST(IndexedDataset, EmptyDatasetIsValid) {
  TempDir dir;
  std::string prefix = dir / "empty";
  {
    IndexedDatasetWriter w(prefix, TokenDtype::kUint16);
    w.finish();
  }
  EXPECT_EQ(read_file(prefix + ".idx").size(), 42u);  // header + document_indices = [0]
  EXPECT_EQ(read_file(prefix + ".bin").size(), 0u);
  IndexedDataset ds(prefix);
  EXPECT_EQ(ds.num_sequences(), 0);
  EXPECT_EQ(ds.num_documents(), 0);
}

TEST(IndexedDataset, TokenOutOfDtypeRangeIsAnError) {
  TempDir dir;
  IndexedDatasetWriter w(dir / "x", TokenDtype::kUint16);
  std::vector<int32_t> bad{1, 70000};
  EXPECT_THROW(w.add_document(bad), Error);
  std::vector<int32_t> neg{-1};
  EXPECT_THROW(w.add_document(neg), Error);
}

TEST(IndexedDataset, UnfinishedWriterLeavesNothing) {
  TempDir dir;
  std::string prefix = dir / "unfinished";
  {
    IndexedDatasetWriter w(prefix, TokenDtype::kUint16);
    w.add_document(std::vector<int32_t>{1, 2, 3});
  }
  EXPECT_FALSE(exists(prefix + ".bin"));
  EXPECT_FALSE(exists(prefix + ".idx"));
  EXPECT_TRUE(llamatrain::testing::temporaries(dir.path()).empty());
}

TEST(IndexedDataset, MissingOutputFolderIsAClearError) {
  try {
    IndexedDatasetWriter w("/nonexistent_llamatrain_dir/sub/x", TokenDtype::kUint16);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent_llamatrain_dir/sub"), std::string::npos) << e.what();
  }
}

// The committed golden written by the Python writer: int32 dtype, ids >= 65500, an empty document.
TEST(IndexedDataset, ReadsPythonWrittenInt32Golden) {
  IndexedDataset ds(golden("ids_int32"));
  EXPECT_EQ(ds.dtype(), TokenDtype::kInt32);
  ASSERT_EQ(ds.num_sequences(), 4);
  EXPECT_EQ(ds.sequence(0), (std::vector<int32_t>{1, 5, 2}));
  EXPECT_EQ(ds.sequence(1), (std::vector<int32_t>{1, 7, 8, 2}));
  EXPECT_EQ(ds.sequence(2), (std::vector<int32_t>{}));
  EXPECT_EQ(ds.sequence(3), (std::vector<int32_t>{65535, 70000, 2147483647, 0}));
}

// Random documents written at test time by the independent Python writer, read back here.
TEST(IndexedDataset, ReadsPythonWrittenRandomFiles) {
  if (auto why = llamatrain::testing::python_missing({"numpy"}); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  std::mt19937 rng(11);
  for (std::string dt : {"uint16", "int32"}) {
    std::vector<std::vector<int64_t>> docs;
    std::string json = "[";
    for (int d = 0; d < 50; ++d) {
      std::vector<int64_t> doc(rng() % 40);
      for (auto& t : doc) t = dt == "uint16" ? rng() % 65536 : 65500 + rng() % 200000;
      docs.push_back(doc);
      json += d ? ",[" : "[";
      for (size_t j = 0; j < doc.size(); ++j) {
        if (j) json += ',';
        json += std::to_string(doc[j]);
      }
      json += ']';
    }
    json += "]";
    write_file(dir / "ids.json", json);
    std::string prefix = dir / ("py_" + dt);
    std::string cmd = std::string(SYSTEM_PYTHON) + " " +
                      llamatrain::testing::source_path("tools/reference/megatron_writer.py") + " ids --ids " +
                      (dir / "ids.json") + " --dtype " + dt + " --output-prefix " + prefix;
    std::string out;
    ASSERT_EQ(llamatrain::testing::run_capture(cmd, &out), 0) << out;
    IndexedDataset ds(prefix);
    EXPECT_EQ(ds.dtype(), dt == "uint16" ? TokenDtype::kUint16 : TokenDtype::kInt32);
    ASSERT_EQ(ds.num_sequences(), 50);
    for (int d = 0; d < 50; ++d) {
      std::vector<int64_t> got(ds.sequence_length(d));
      ds.read(d, 0, static_cast<int64_t>(got.size()), got.data());
      ASSERT_EQ(got, docs[d]) << dt << " document " << d;
    }
  }
}

// The committed golden of the fixture corpus, read back and decoded with the fixture tokenizer.
TEST(IndexedDataset, ReadsPythonWrittenPreprocessGolden) {
  IndexedDataset ds(golden("fixture_eod_text_document"));
  EXPECT_EQ(ds.dtype(), TokenDtype::kUint16);
  EXPECT_EQ(ds.num_documents(), 25);
  Tokenizer tok(llamatrain::testing::fixture("tokenizer.model"));
  auto first = ds.sequence(0);
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first.back(), tok.eos_id());
  first.pop_back();
  EXPECT_EQ(tok.decode(first), "The quick brown fox jumps over the lazy dog.");
  auto chinese = ds.sequence(3);
  chinese.pop_back();
  EXPECT_EQ(tok.decode(chinese), "你好，世界。这是一个用于测试的中文句子。");
}

TEST(IndexedDataset, AppendRebasesPointersAndDocumentIndices) {
  TempDir dir;
  std::string a = dir / "a", b = dir / "b", ab = dir / "ab", both = dir / "both";
  {
    IndexedDatasetWriter w(a, TokenDtype::kUint16);
    w.add_document(std::vector<int32_t>{1, 2});
    w.add_sequence(std::vector<int32_t>{3});
    w.add_sequence(std::vector<int32_t>{4, 5});
    w.end_document();
    w.finish();
  }
  {
    IndexedDatasetWriter w(b, TokenDtype::kUint16);
    w.add_document(std::vector<int32_t>{6, 7, 8});
    w.end_document();
    w.finish();
  }
  {
    IndexedDatasetWriter w(both, TokenDtype::kUint16);
    w.add_document(std::vector<int32_t>{1, 2});
    w.add_sequence(std::vector<int32_t>{3});
    w.add_sequence(std::vector<int32_t>{4, 5});
    w.end_document();
    w.add_document(std::vector<int32_t>{6, 7, 8});
    w.end_document();
    w.finish();
  }
  {
    IndexedDataset da(a), db(b);
    IndexedDatasetWriter w(ab, TokenDtype::kUint16);
    w.append(da);
    w.append(db);
    w.finish();
  }
  EXPECT_EQ(read_file(ab + ".bin"), read_file(both + ".bin"));
  EXPECT_EQ(read_file(ab + ".idx"), read_file(both + ".idx"));
  IndexedDataset m(ab);
  EXPECT_EQ(m.document_indices(), (std::vector<int64_t>{0, 1, 3, 4, 4}));

  IndexedDataset int32(golden("ids_int32"));
  IndexedDatasetWriter w(dir / "mixed", TokenDtype::kUint16);
  EXPECT_THROW(w.append(int32), Error);
}

// ---- corrupt and truncated files ----

class CorruptIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = dir_ / "good";
    IndexedDatasetWriter w(prefix_, TokenDtype::kUint16);
    w.add_document(std::vector<int32_t>{1, 5, 2});
    w.add_document(std::vector<int32_t>{1, 7, 8, 2});
    w.add_document(std::vector<int32_t>{9});
    w.finish();
    idx_ = read_file(prefix_ + ".idx");
    bin_ = read_file(prefix_ + ".bin");
  }
  // Writes idx/bin under a new prefix and returns it.
  std::string make(const std::string& name, const std::string& idx, const std::string& bin) {
    std::string p = dir_ / name;
    write_file(p + ".idx", idx);
    write_file(p + ".bin", bin);
    return p;
  }
  template <typename T>
  std::string patched(size_t offset, T value) {
    std::string s = idx_;
    std::memcpy(s.data() + offset, &value, sizeof(T));
    return s;
  }
  TempDir dir_;
  std::string prefix_, idx_, bin_;
};

TEST_F(CorruptIndex, EveryTruncationIsAClearError) {
  ASSERT_EQ(idx_.size(), 34u + 12 * 3 + 8 * 4);
  for (size_t n = 0; n < idx_.size(); ++n) {
    std::string p = make("trunc", idx_.substr(0, n), bin_);
    SCOPED_TRACE("idx truncated to " + std::to_string(n) + " bytes");
    expect_open_error(p, {p + ".idx", "re-run llamatrain preprocess", "expected"});
  }
  // One extra byte is also wrong.
  std::string p = make("long", idx_ + "x", bin_);
  expect_open_error(p, {p + ".idx", "file size is 103 bytes, expected 102"});
}

TEST_F(CorruptIndex, FlippedHeaderFields) {
  std::string bad_magic = idx_;
  bad_magic[2] ^= 0x20;
  std::string p = make("magic", bad_magic, bin_);
  expect_open_error(p, {p + ".idx", "'magic'", "4d4d49444944580000", "re-run llamatrain preprocess"});

  std::string tnt = idx_;
  std::memcpy(tnt.data(), "TNTIDX\0\0\0", 9);
  p = make("tnt", tnt, bin_);
  expect_open_error(p, {"TNTIDX"});

  p = make("version", patched<uint64_t>(9, 2), bin_);
  expect_open_error(p, {p + ".idx", "'version' is 2, expected 1"});

  p = make("dtype0", patched<uint8_t>(17, 0), bin_);
  expect_open_error(p, {p + ".idx", "'dtype' has code 0"});
  p = make("dtype9", patched<uint8_t>(17, 9), bin_);
  expect_open_error(p, {"'dtype' has code 9"});
  p = make("dtypef", patched<uint8_t>(17, 7), bin_);
  expect_open_error(p, {"code 7 (float32)", "integer token type"});
  // int32 code with a uint16-sized .bin: pointers no longer match.
  p = make("dtype4", patched<uint8_t>(17, 4), bin_);
  expect_open_error(p, {"'pointers[1]' is 6, expected 12"});

  p = make("count", patched<uint64_t>(18, 4), bin_);
  expect_open_error(p, {p + ".idx", "file size is 102 bytes, expected 114"});
  p = make("hugecount", patched<uint64_t>(18, ~0ull), bin_);
  expect_open_error(p, {"'sequence count' is 18446744073709551615"});
  p = make("hugedocs", patched<uint64_t>(26, 1ull << 62), bin_);
  expect_open_error(p, {"'document count'"});
}

TEST_F(CorruptIndex, InconsistentArrays) {
  const size_t sizes = 34, pointers = 34 + 12, docs = 34 + 36;
  std::string p = make("negsize", patched<int32_t>(sizes + 4, -4), bin_);
  expect_open_error(p, {"'sizes[1]' is -4"});
  p = make("ptr", patched<int64_t>(pointers + 8, 1000), bin_);
  expect_open_error(p, {p + ".idx", "'pointers[1]' is 1000, expected 6"});
  p = make("ptr0", patched<int64_t>(pointers, 2), bin_);
  expect_open_error(p, {"'pointers[0]' is 2, expected 0"});
  p = make("bigsize", patched<int32_t>(sizes + 8, 1000), bin_);
  expect_open_error(p, {"past the end of", p + ".bin"});
  p = make("doc0", patched<int64_t>(docs, 1), bin_);
  expect_open_error(p, {"'document_indices[0]' is 1, expected 0"});
  p = make("docdown", patched<int64_t>(docs + 16, 0), bin_);
  expect_open_error(p, {"'document_indices[2]' is 0, expected >= 1"});
  p = make("doclast", patched<int64_t>(docs + 24, 2), bin_);
  expect_open_error(p, {"'document_indices[3]' (the last) is 2, expected 3"});
}

TEST_F(CorruptIndex, BinSizeMismatchAndMissingFiles) {
  std::string p = make("short", idx_, bin_.substr(0, bin_.size() - 2));
  expect_open_error(p, {p + ".bin", "past the end"});
  p = make("empty_bin", idx_, "");
  expect_open_error(p, {p + ".bin"});
  p = make("longbin", idx_, bin_ + "zz");
  expect_open_error(p, {p + ".bin", "size is 18 bytes, expected 16", "do not belong together"});

  std::string only_idx = dir_ / "only_idx";
  write_file(only_idx + ".idx", idx_);
  expect_open_error(only_idx, {only_idx + ".bin", "cannot open"});
  expect_open_error(dir_ / "nothing", {dir_ / "nothing.idx", "cannot open", "without the extension"});

  std::string multimodal = idx_ + std::string(3, '\0');  // + sequence_modes[S]
  p = make("multimodal", multimodal, bin_);
  expect_open_error(p, {"multimodal"});
}

TEST_F(CorruptIndex, ParseIndexInMemoryMatchesFileChecks) {
  IndexView v =
      parse_index(reinterpret_cast<const uint8_t*>(idx_.data()), idx_.size(), "mem.idx", bin_.size(), "mem.bin");
  EXPECT_EQ(v.num_sequences, 3u);
  EXPECT_EQ(v.num_doc_indices, 4u);
  EXPECT_EQ(v.num_tokens, 8u);
  EXPECT_THROW(
      parse_index(reinterpret_cast<const uint8_t*>(idx_.data()), idx_.size(), "mem.idx", bin_.size() + 2, "mem.bin"),
      Error);
}

}  // namespace
}  // namespace llamatrain::data
