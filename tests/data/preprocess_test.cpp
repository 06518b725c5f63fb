// Preprocess pipeline: byte-identical output with the goldens of the independent Python writer
// (with/without --append-eod, --bos, text input, several keys; 1, 2 and 3 workers; tiny batches),
// skip counts and file:line locations, --strict, .gz/.zst inputs (multi-member/frame, truncated),
// folder and glob expansion, --need-pad-id, inputs without documents, the line reader's edge cases, and that a
// killed run leaves only temporary (.tmp-XXXXXX) files.
#include "data/preprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace llamatrain::data {
namespace {

using llamatrain::testing::exists;
using llamatrain::testing::fixture;
using llamatrain::testing::golden;
using llamatrain::testing::read_file;
using llamatrain::testing::TempDir;
using llamatrain::testing::write_file;

PreprocessOptions base_options(const std::string& input, const std::string& prefix) {
  PreprocessOptions o;
  o.inputs = {input};
  o.tokenizer_model = fixture("tokenizer.model");
  o.output_prefix = prefix;
  o.progress = ProgressMode::kOff;
  return o;
}

void expect_same_dataset(const std::string& got_prefix, const std::string& golden_prefix) {
  EXPECT_EQ(read_file(got_prefix + ".bin"), read_file(golden_prefix + ".bin")) << got_prefix << ".bin";
  EXPECT_EQ(read_file(got_prefix + ".idx"), read_file(golden_prefix + ".idx")) << got_prefix << ".idx";
}

std::string gzip_bytes(const std::string& data) {
  uLongf cap = compressBound(data.size()) + 64;
  std::string out(cap + 18, '\0');
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);  // +16: gzip wrapper
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string zstd_bytes(const std::string& data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

struct GoldenCase {
  std::string name;
  bool eod, bos;
  int workers, batch_lines;
};

class PreprocessGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(PreprocessGolden, ByteIdenticalToPythonWriter) {
  const auto& c = GetParam();
  TempDir dir;
  auto o = base_options(fixture("corpus.jsonl"), dir / "out");
  o.append_eod = c.eod;
  o.bos = c.bos;
  o.workers = c.workers;
  o.batch_lines = c.batch_lines;
  auto st = run_preprocess(o);
  EXPECT_EQ(st.outputs.at(0).documents, 25);
  std::string g = c.bos ? "fixture_bos_eod" : c.eod ? "fixture_eod" : "fixture_noeod";
  expect_same_dataset(dir / "out_text_document", golden(g + "_text_document"));
  EXPECT_TRUE(llamatrain::testing::temporaries(dir.path()).empty());
  EXPECT_TRUE(exists(dir / "out.stats.json"));
}

INSTANTIATE_TEST_SUITE_P(Cases, PreprocessGolden,
                         ::testing::Values(GoldenCase{"eod_w1", true, false, 1, 4096},
                                           GoldenCase{"eod_w2", true, false, 2, 4096},
                                           GoldenCase{"noeod_w1", false, false, 1, 4096},
                                           GoldenCase{"noeod_w2", false, false, 2, 4096},
                                           GoldenCase{"eod_w2_tiny_batches", true, false, 2, 3},
                                           GoldenCase{"eod_w3_one_line_batches", true, false, 3, 1},
                                           GoldenCase{"bos_eod_w2", true, true, 2, 5}),
                         [](const auto& info) { return info.param.name; });

// The committed goldens are exactly what the reference writer produces today (no drift).
TEST(Preprocess, GoldensAreReproducibleByTheReferenceWriter) {
  if (auto why = llamatrain::testing::python_missing({"numpy", "sentencepiece"}); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string w = std::string(SYSTEM_PYTHON) + " " +
                        llamatrain::testing::source_path("tools/reference/megatron_writer.py") +
                        " preprocess --tokenizer-model " + fixture("tokenizer.model");
  struct Case {
    std::string name, args;
  };
  for (const Case& c :
       {Case{"fixture_eod", "--input " + fixture("corpus.jsonl") + " --append-eod"},
        Case{"fixture_noeod", "--input " + fixture("corpus.jsonl")},
        Case{"fixture_txt", "--input " + fixture("corpus.txt") + " --input-format text --append-eod"}}) {
    std::string out;
    ASSERT_EQ(llamatrain::testing::run_capture(w + " --output-prefix " + (dir / c.name) + " " + c.args, &out), 0)
        << out;
    expect_same_dataset(dir / (c.name + "_text_document"), golden(c.name + "_text_document"));
  }
}

TEST(Preprocess, TextInputFormatMatchesGolden) {
  TempDir dir;
  auto o = base_options(fixture("corpus.txt"), dir / "txt");
  o.input_format = InputFormat::kText;
  o.append_eod = true;
  o.workers = 2;
  auto st = run_preprocess(o);
  expect_same_dataset(dir / "txt_text_document", golden("fixture_txt_text_document"));
  EXPECT_EQ(st.skipped[static_cast<int>(LineStatus::kEmptyDocument)], 1);
}

TEST(Preprocess, SeveralJsonKeysGiveOneDatasetEach) {
  TempDir dir;
  auto o = base_options(fixture("corpus.jsonl"), dir / "keys");
  o.json_keys = {"text", "title"};
  o.append_eod = true;
  run_preprocess(o);
  expect_same_dataset(dir / "keys_text_document", golden("fixture_keys_text_document"));
  expect_same_dataset(dir / "keys_title_document", golden("fixture_keys_title_document"));
}

TEST(Preprocess, SkipCountsAndLocations) {
  TempDir dir;
  auto o = base_options(fixture("corpus.jsonl"), dir / "s");
  o.append_eod = true;
  o.workers = 2;
  o.batch_lines = 4;
  auto st = run_preprocess(o);
  const std::string f = fixture("corpus.jsonl");
  auto at = [&](std::initializer_list<int> lines) {
    std::vector<std::string> v;
    for (int l : lines) v.push_back(f + ":" + std::to_string(l));
    return v;
  };
  auto idx = [](LineStatus s) { return static_cast<int>(s); };
  EXPECT_EQ(st.lines, 35);
  EXPECT_EQ(st.skipped[idx(LineStatus::kEmptyDocument)], 1);
  EXPECT_EQ(st.locations[idx(LineStatus::kEmptyDocument)], at({3}));
  EXPECT_EQ(st.skipped[idx(LineStatus::kInvalidJson)], 2);
  EXPECT_EQ(st.locations[idx(LineStatus::kInvalidJson)], at({7, 28}));
  EXPECT_EQ(st.locations[idx(LineStatus::kMissingKey)], at({10}));
  EXPECT_EQ(st.skipped[idx(LineStatus::kNonString)], 3);
  EXPECT_EQ(st.locations[idx(LineStatus::kNonString)], at({13, 25, 31}));
  EXPECT_EQ(st.locations[idx(LineStatus::kBlankLine)], at({16}));
  EXPECT_EQ(st.locations[idx(LineStatus::kInvalidUtf8)], at({19}));
  EXPECT_EQ(st.locations[idx(LineStatus::kNotObject)], at({22}));

  auto j = nlohmann::json::parse(read_file(dir / "s.stats.json"));
  EXPECT_EQ(j["documents"], 25);
  EXPECT_EQ(j["skipped_total"], 10);
  EXPECT_EQ(j["skipped"]["non_string"]["count"], 3);
  EXPECT_EQ(j["skipped"]["invalid_json"]["first"][1], f + ":28");
  EXPECT_EQ(j["workers"], 2);
  EXPECT_EQ(j["dtype"], "uint16");
  IndexedDataset ds(dir / "s_text_document");
  EXPECT_EQ(j["tokens"], ds.num_tokens());
  int64_t mn = 1 << 30, mx = 0;
  for (int64_t i = 0; i < ds.num_sequences(); ++i)
    mn = std::min<int64_t>(mn, ds.sequence_length(i)), mx = std::max<int64_t>(mx, ds.sequence_length(i));
  EXPECT_EQ(j["tokens_per_document"]["min"], mn);
  EXPECT_EQ(j["tokens_per_document"]["max"], mx);
  EXPECT_DOUBLE_EQ(j["tokens_per_document"]["mean"].get<double>(), static_cast<double>(ds.num_tokens()) / 25);
  EXPECT_EQ(j["conventions"]["bos"], false);
  EXPECT_EQ(j["conventions"]["append_eod"], true);

  std::string summary = format_summary(st, o);
  EXPECT_NE(summary.find("invalid_json"), std::string::npos);
  EXPECT_NE(summary.find(f + ":28"), std::string::npos);
}

TEST(Preprocess, StrictStopsAtFirstMalformedLineAndLeavesNoOutput) {
  TempDir dir;
  auto o = base_options(fixture("corpus.jsonl"), dir / "strict");
  o.strict = true;
  o.workers = 2;
  o.batch_lines = 2;
  try {
    run_preprocess(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(fixture("corpus.jsonl") + ":3:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("empty document"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--strict"), std::string::npos) << msg;
  }
  for (const char* ext : {".bin", ".idx"})
    EXPECT_FALSE(exists(dir / (std::string("strict_text_document") + ext))) << ext;
  EXPECT_TRUE(llamatrain::testing::temporaries(dir.path()).empty());
  EXPECT_FALSE(exists(dir / "strict.stats.json"));

  // A clean corpus passes --strict.
  write_file(dir / "clean.jsonl", "{\"text\": \"hello world\"}\n{\"text\": \"again\"}\n");
  auto c = base_options(dir / "clean.jsonl", dir / "clean");
  c.strict = true;
  EXPECT_EQ(run_preprocess(c).outputs[0].documents, 2);
}

TEST(Preprocess, GzipAndZstdInputsGiveIdenticalOutput) {
  TempDir dir;
  std::string text = read_file(fixture("corpus.jsonl"));
  const size_t half = text.size() / 2;  // split mid-line: the members/frames join seamlessly
  write_file(dir / "c.jsonl.gz", gzip_bytes(text.substr(0, half)) + gzip_bytes(text.substr(half)));
  write_file(dir / "c.jsonl.zst", zstd_bytes(text.substr(0, half)) + zstd_bytes(text.substr(half)));
  write_file(dir / "nosuffix", zstd_bytes(text));  // detected by magic bytes, not the name
  for (std::string in : {"c.jsonl.gz", "c.jsonl.zst", "nosuffix"}) {
    SCOPED_TRACE(in);
    auto o = base_options(dir / in, dir / ("o_" + in));
    o.append_eod = true;
    o.workers = 2;
    auto st = run_preprocess(o);
    expect_same_dataset(dir / ("o_" + in + "_text_document"), golden("fixture_eod_text_document"));
    EXPECT_EQ(st.text_bytes, text.size());
    EXPECT_EQ(st.input_bytes, read_file(dir / in).size());
    // Locations count decompressed lines.
    EXPECT_EQ(st.locations[static_cast<int>(LineStatus::kInvalidJson)].at(1), dir / in + ":28");
  }
}

TEST(Preprocess, AByteOrderMarkIsNoTextAndIsSaid) {
  // A file saved with a UTF-8 BOM (Windows editors) gives the same dataset as without, in JSONL (its
  // first row is no "invalid JSON") and text format (no U+FEFF token), plain and compressed, and the
  // summary and stats.json name it.
  TempDir dir;
  const std::string text = read_file(fixture("corpus.jsonl"));
  const std::string bom = "\xEF\xBB\xBF";
  std::string lines;
  for (const char* l : {"First line of a text file.", "Second line, and more words."}) lines += std::string(l) + "\n";
  write_file(dir / "bom.jsonl", bom + text);
  write_file(dir / "bom.jsonl.gz", gzip_bytes(bom + text));
  write_file(dir / "plain.txt", lines);
  write_file(dir / "bom.txt", bom + lines);
  for (std::string in : {"bom.jsonl", "bom.jsonl.gz"}) {
    SCOPED_TRACE(in);
    auto o = base_options(dir / in, dir / ("o_" + in));
    o.append_eod = true;
    auto st = run_preprocess(o);
    expect_same_dataset(dir / ("o_" + in + "_text_document"), golden("fixture_eod_text_document"));
    EXPECT_EQ(st.byte_order_mark_files, std::vector<std::string>{dir / in});
    EXPECT_NE(format_summary(st, o).find("byte-order mark"), std::string::npos) << format_summary(st, o);
    EXPECT_NE(read_file(dir / ("o_" + in + ".stats.json")).find(dir / in), std::string::npos);
  }
  for (std::string in : {"plain.txt", "bom.txt"}) {
    auto o = base_options(dir / in, dir / ("o_" + in));
    o.input_format = InputFormat::kText;
    const auto st = run_preprocess(o);
    EXPECT_EQ(st.byte_order_mark_files.size(), in == "bom.txt" ? 1u : 0u);
  }
  expect_same_dataset(dir / "o_bom.txt_text_document", dir / "o_plain.txt_text_document");
}

TEST(Preprocess, TruncatedCompressedInputIsAClearError) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "{\"text\": \"line " + std::to_string(i) + " of a longer corpus\"}\n";
  std::string gz = gzip_bytes(text), zs = zstd_bytes(text);
  write_file(dir / "t.jsonl.gz", gz.substr(0, gz.size() / 2));
  write_file(dir / "t.jsonl.zst", zs.substr(0, zs.size() / 2));
  for (std::string in : {"t.jsonl.gz", "t.jsonl.zst"}) {
    auto o = base_options(dir / in, dir / "t");
    o.workers = 2;
    o.batch_lines = 50;
    try {
      run_preprocess(o);
      FAIL() << in << ": no error";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(dir / in), std::string::npos) << msg;
      EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    }
    EXPECT_FALSE(exists(dir / "t_text_document.idx"));
    EXPECT_TRUE(llamatrain::testing::temporaries(dir.path()).empty());
  }
}

TEST(Preprocess, FolderAndGlobExpansionInSortedOrder) {
  TempDir dir;
  std::string text = read_file(fixture("corpus.jsonl"));
  // Three parts at line boundaries, named so that sorted order is input order; plus files to ignore.
  std::vector<size_t> cuts{0};
  size_t pos = 0;
  for (int part = 0; part < 2; ++part) {
    for (int l = 0; l < 12; ++l) pos = text.find('\n', pos) + 1;
    cuts.push_back(pos);
  }
  cuts.push_back(text.size());
  std::filesystem::create_directories(dir / "corpus/sub");
  write_file(dir / "corpus/a.jsonl", text.substr(cuts[0], cuts[1] - cuts[0]));
  write_file(dir / "corpus/b.jsonl.gz", gzip_bytes(text.substr(cuts[1], cuts[2] - cuts[1])));
  write_file(dir / "corpus/sub/c.jsonl.zst", zstd_bytes(text.substr(cuts[2])));
  write_file(dir / "corpus/README.md", "not a corpus\n");
  write_file(dir / "corpus/other.csv", "a,b\n");

  auto o = base_options(dir / "corpus", dir / "folder");
  o.append_eod = true;
  auto st = run_preprocess(o);
  ASSERT_EQ(st.files.size(), 3u);
  EXPECT_EQ(st.files[0], dir / "corpus/a.jsonl");
  EXPECT_EQ(st.files[2], dir / "corpus/sub/c.jsonl.zst");
  expect_same_dataset(dir / "folder_text_document", golden("fixture_eod_text_document"));
  // Locations name the part and its own line numbers: line 28 of the corpus is line 4 of part 3.
  EXPECT_EQ(st.locations[static_cast<int>(LineStatus::kInvalidJson)].at(1), dir / "corpus/sub/c.jsonl.zst:4");

  auto g = base_options(dir / "corpus/*.jsonl*", dir / "glob");
  g.inputs.push_back(dir / "corpus/sub/*.zst");
  g.append_eod = true;
  g.workers = 2;
  run_preprocess(g);
  expect_same_dataset(dir / "glob_text_document", golden("fixture_eod_text_document"));

  EXPECT_EQ(expand_inputs({dir / "corpus/[ab].*"}, InputFormat::kJsonl),
            (std::vector<std::string>{dir / "corpus/a.jsonl", dir / "corpus/b.jsonl.gz"}));
  EXPECT_THROW(expand_inputs({dir / "corpus/*.parquet"}, InputFormat::kJsonl), Error);
  EXPECT_THROW(expand_inputs({dir / "missing.jsonl"}, InputFormat::kJsonl), Error);
  EXPECT_THROW(expand_inputs({dir / "corpus"}, InputFormat::kText), Error);  // no .txt files there
}

TEST(Preprocess, NeedPadIdChangesOnlyTheVocabSize) {
  TempDir dir;
  auto o = base_options(fixture("corpus.jsonl"), dir / "pad");
  o.append_eod = true;
  o.need_pad_id = true;
  auto st = run_preprocess(o);
  EXPECT_EQ(st.vocab_size, 501);  // the fixture tokenizer has pad_id -1, like Llama 2
  EXPECT_EQ(st.dtype, TokenDtype::kUint16);
  expect_same_dataset(dir / "pad_text_document", golden("fixture_eod_text_document"));
  auto j = nlohmann::json::parse(read_file(dir / "pad.stats.json"));
  EXPECT_EQ(j["vocab_size"], 501);
  EXPECT_EQ(j["conventions"]["need_pad_id"], true);
}

// An input that gives no document is an error saying what it held, and writes nothing (the
// empty dataset it used to write looked like success).
TEST(Preprocess, InputWithoutDocumentsIsAnErrorAndWritesNothing) {
  TempDir dir;
  write_file(dir / "empty.jsonl", "");
  write_file(dir / "keys.jsonl", "{\"body\": \"a\", \"id\": 1}\n");
  for (auto [input, expect] : std::vector<std::pair<std::string, std::string>>{
           {"empty.jsonl", "the input is empty (0 lines)"}, {"keys.jsonl", "the objects have keys: body, id"}}) {
    auto o = base_options(dir / input, dir / "e");
    try {
      run_preprocess(o);
      ADD_FAILURE() << input << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
    EXPECT_FALSE(exists(dir / "e_text_document.bin"));
    EXPECT_FALSE(exists(dir / "e_text_document.idx"));
    EXPECT_FALSE(exists(dir / "e.stats.json"));
    EXPECT_TRUE(llamatrain::testing::temporaries(dir.path()).empty());
  }
}

// Linux file names are bytes: one that is not UTF-8 still gives a valid stats.json.
TEST(Preprocess, NonUtf8FileNameGivesValidStats) {
  TempDir dir;
  const std::string input = dir / "corpus\xff.jsonl";
  write_file(input, read_file(fixture("corpus.jsonl")));
  auto o = base_options(input, dir / "u");
  run_preprocess(o);
  auto stats = nlohmann::json::parse(read_file(dir / "u.stats.json"));
  EXPECT_EQ(stats["inputs"][0].get<std::string>(), dir / "corpus\xef\xbf\xbd.jsonl");
}

TEST(Preprocess, ManyBatchesStayInInputOrder) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 3000; ++i) {
    text += "{\"text\": \"document number " + std::to_string(i) + (i % 7 ? " with words" : "") + "\"}\n";
    if (i % 500 == 3) text += "not json\n";
  }
  write_file(dir / "many.jsonl", text);
  std::string first_bin;
  for (int workers : {1, 3}) {
    auto o = base_options(dir / "many.jsonl", dir / ("w" + std::to_string(workers)));
    o.workers = workers;
    o.batch_lines = workers == 1 ? 4096 : 7;
    o.batch_bytes = 300;
    o.append_eod = true;
    auto st = run_preprocess(o);
    EXPECT_EQ(st.outputs[0].documents, 3000);
    EXPECT_EQ(st.skipped[static_cast<int>(LineStatus::kInvalidJson)], 6);
    std::string bin = read_file(dir / ("w" + std::to_string(workers) + "_text_document.bin"));
    if (first_bin.empty()) first_bin = bin;
    EXPECT_EQ(bin, first_bin) << workers << " workers";
  }
}

TEST(Preprocess, BadArgumentsAreClearErrors) {
  TempDir dir;
  auto o = base_options(fixture("corpus.jsonl"), dir / "x");
  o.tokenizer_model = dir / "missing.model";
  EXPECT_THROW(run_preprocess(o), Error);
  o = base_options(fixture("corpus.jsonl"), dir / "no/such/folder/x");
  EXPECT_THROW(run_preprocess(o), Error);
  o = base_options(fixture("corpus.txt"), dir / "x");
  o.input_format = InputFormat::kText;
  o.json_keys = {"body"};
  EXPECT_THROW(run_preprocess(o), Error);
}

TEST(LineReader, LongLinesCrlfAndNoFinalNewline) {
  TempDir dir;
  std::string big(3 << 20, 'x');  // longer than the 1 MiB read buffer
  write_file(dir / "l.txt", "a\r\n" + big + "\n\nlast");
  LineReader r(dir / "l.txt");
  std::string_view line;
  ASSERT_TRUE(r.next(&line));
  EXPECT_EQ(line, "a\r");  // '\r' is left to the caller (JSON whitespace; stripped in text mode)
  ASSERT_TRUE(r.next(&line));
  EXPECT_EQ(line.size(), big.size());
  EXPECT_EQ(r.line_number(), 2);
  ASSERT_TRUE(r.next(&line));
  EXPECT_EQ(line, "");
  ASSERT_TRUE(r.next(&line));
  EXPECT_EQ(line, "last");
  EXPECT_EQ(r.line_number(), 4);
  EXPECT_FALSE(r.next(&line));
  EXPECT_EQ(r.bytes_consumed(), r.file_size());
  EXPECT_STREQ(r.compression(), "none");
}

TEST(LineReader, CompressedBytesConsumedReachFileSize) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + "\n";
  write_file(dir / "x.gz", gzip_bytes(text));
  write_file(dir / "x.zst", zstd_bytes(text));
  for (std::string name : {"x.gz", "x.zst"}) {
    LineReader r(dir / name);
    std::string_view line;
    int64_t n = 0;
    while (r.next(&line)) ASSERT_EQ(line, "line " + std::to_string(n++));
    EXPECT_EQ(n, 20000);
    EXPECT_EQ(r.bytes_consumed(), r.file_size()) << name;
  }
}

TEST(JsonFieldExtractor, EscapesDuplicatesAndErrors) {
  JsonFieldExtractor ex({"text"});
  std::vector<std::string_view> v;
  int detail = 0;
  auto run = [&](std::string line) {
    line.append(kJsonPadding, '\0');
    return ex.extract(line.data(), line.size() - kJsonPadding, &v, &detail);
  };
  EXPECT_EQ(run(R"({"text": "a\nb\u00e9\ud83e\udd99\"\\"})"), LineStatus::kOk);
  EXPECT_EQ(v[0], "a\nb\xc3\xa9\xf0\x9f\xa6\x99\"\\");
  EXPECT_EQ(run(R"({"text": "x", "text": "y"})"), LineStatus::kOk);
  EXPECT_EQ(v[0], "y");
  EXPECT_EQ(run(R"({"text": "x"} {"text": "y"})"), LineStatus::kInvalidJson);
  EXPECT_EQ(run(R"({"text": "x", "other": [1, }")"), LineStatus::kInvalidJson);  // damage after the key
  EXPECT_EQ(run(" \t "), LineStatus::kBlankLine);
  EXPECT_EQ(run("\"just a string\""), LineStatus::kNotObject);
  EXPECT_EQ(run(R"({"text": {"nested": "x"}})"), LineStatus::kNonString);
  EXPECT_EQ(run("{\"text\": \"\xc3\x28\"}"), LineStatus::kInvalidUtf8);
}

// A killed run (SIGKILL while waiting for more input from a FIFO) leaves only temporaries (.tmp-XXXXXX).
TEST(Preprocess, KilledRunLeavesOnlyTmpFiles) {
  TempDir dir;
  std::string fifo = dir / "in.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string bin = llamatrain::testing::llamatrain_bin();
  std::string prefix = dir / "killed";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string model = fixture("tokenizer.model");
    ::execl(bin.c_str(), bin.c_str(), "preprocess", "--input", fifo.c_str(), "--tokenizer-model", model.c_str(),
            "--output-prefix", prefix.c_str(), "--quiet", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::FILE* w = std::fopen(fifo.c_str(), "w");  // blocks until the child opens it for reading
  ASSERT_NE(w, nullptr);
  for (int i = 0; i < 2000; ++i) std::fprintf(w, "{\"text\": \"document %d\"}\n", i);
  std::fflush(w);
  for (int i = 0; i < 100 && llamatrain::testing::temporaries(dir.path()).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::fclose(w);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_FALSE(llamatrain::testing::temporaries(dir.path()).empty());  // SIGKILL: no chance to clean up
  EXPECT_FALSE(exists(prefix + "_text_document.bin"));
  EXPECT_FALSE(exists(prefix + "_text_document.idx"));
  EXPECT_FALSE(exists(prefix + ".stats.json"));
}

}  // namespace
}  // namespace llamatrain::data
