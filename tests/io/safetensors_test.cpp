// safetensors reader/writer tests: the reference crate's two test vectors byte for byte, the
// reference write order, round trips of every dtype (scalars, zero-size tensors), HF sharding,
// exact bf16/f16 conversion, and one test per kind of bad input asserting that the Error names the
// file and the problem (never a crash).
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/f16.h"
#include "test_util.h"

namespace llamatrain::io {
namespace {

namespace fs = std::filesystem;

using llamatrain::testing::read_file;
using llamatrain::testing::write_file;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint8_t(v >> (8 * i)));
  return s;
}

// A raw file: 8-byte length of `header`, the header as given, then `data`.
std::string raw_file(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

std::string as_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "st_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Writes `bytes` to a file, opens it and returns the Error message (fails if it opens).
  std::string open_error(const std::string& bytes, const std::string& name = "bad.safetensors") {
    const std::string p = path(name);
    write_file(p, bytes);
    try {
      SafetensorsFile f(p);
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << "message does not name the file: " << msg;
      EXPECT_NE(msg.find("hint:"), std::string::npos) << "message has no hint: " << msg;
      return msg;
    }
    ADD_FAILURE() << "opening " << p << " succeeded, expected an Error";
    return "";
  }

  std::string dir_;
};

#define EXPECT_HAS(msg, sub) \
  EXPECT_NE((msg).find(sub), std::string::npos) << "missing \"" << (sub) << "\" in: " << (msg)

// ---- reference test vectors (docs/formats.md 3.3) ----

TEST_F(SafetensorsTest, EmptyDictMatchesReferenceBytes) {
  const std::string expected = le64(8) + "{}      ";
  EXPECT_EQ(as_string(serialize_safetensors({}, {})), expected);
  write_safetensors(path("empty.safetensors"), {}, {});
  EXPECT_EQ(read_file(path("empty.safetensors")), expected);
  SafetensorsFile f(path("empty.safetensors"));
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST_F(SafetensorsTest, OneF32TensorMatchesReferenceBytes) {
  float v[6] = {0, 1, 2, 3, 4, 5};
  std::vector<TensorToWrite> t = {{"attn.0", DType::F32, {1, 2, 3}, v}};
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  const std::string expected = le64(64) + header + std::string(reinterpret_cast<const char*>(v), 24);
  EXPECT_EQ(as_string(serialize_safetensors(t, {})), expected);
  write_safetensors(path("one.safetensors"), t, {});
  EXPECT_EQ(read_file(path("one.safetensors")), expected);
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().filename().string(), "one.safetensors");
}

TEST_F(SafetensorsTest, WriterOrdersByDtypeDescendingThenNameAndPutsMetadataFirst) {
  uint8_t buf[64] = {};
  std::vector<TensorToWrite> t = {
      {"b", DType::U8, {1}, buf},  {"a", DType::F16, {1}, buf},  {"z", DType::BF16, {1}, buf},
      {"c", DType::F32, {1}, buf}, {"y", DType::I64, {1}, buf},  {"x", DType::U64, {1}, buf},
      {"w", DType::F64, {1}, buf}, {"a2", DType::F32, {1}, buf}, {"v", DType::BOOL, {1}, buf},
  };
  const std::string bytes = as_string(serialize_safetensors(t, {{"format", "pt"}}));
  const std::string header = bytes.substr(8, size_t(uint8_t(bytes[0])) | size_t(uint8_t(bytes[1])) << 8);
  const std::string expected = R"({"__metadata__":{"format":"pt"},)"
                               R"("x":{"dtype":"U64","shape":[1],"data_offsets":[0,8]},)"
                               R"("y":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},)"
                               R"("w":{"dtype":"F64","shape":[1],"data_offsets":[16,24]},)"
                               R"("a2":{"dtype":"F32","shape":[1],"data_offsets":[24,28]},)"
                               R"("c":{"dtype":"F32","shape":[1],"data_offsets":[28,32]},)"
                               R"("z":{"dtype":"BF16","shape":[1],"data_offsets":[32,34]},)"
                               R"("a":{"dtype":"F16","shape":[1],"data_offsets":[34,36]},)"
                               R"("b":{"dtype":"U8","shape":[1],"data_offsets":[36,37]},)"
                               R"("v":{"dtype":"BOOL","shape":[1],"data_offsets":[37,38]}})";
  EXPECT_EQ(header.substr(0, expected.size()), expected);
  EXPECT_EQ(header.size() % 8, 0u);
  EXPECT_EQ(header.find_first_not_of(' ', expected.size()), std::string::npos);
}

TEST_F(SafetensorsTest, WriterEscapesNamesAndRejectsBadInput) {
  uint8_t buf[4] = {1, 2, 3, 4};
  write_safetensors(path("esc.safetensors"), {{"a\"b\\c\n\x01", DType::U8, {4}, buf}}, {});
  SafetensorsFile f(path("esc.safetensors"));
  ASSERT_NE(f.find("a\"b\\c\n\x01"), nullptr);
  EXPECT_NE(read_file(path("esc.safetensors")).find(R"("a\"b\\c\n\u0001")"), std::string::npos);
  EXPECT_THROW(serialize_safetensors({{"x", DType::U8, {1}, buf}, {"x", DType::U8, {1}, buf}}, {}), Error);
  EXPECT_THROW(serialize_safetensors({{"__metadata__", DType::U8, {1}, buf}}, {}), Error);
  EXPECT_THROW(serialize_safetensors({{"x", DType::U8, {-1}, buf}}, {}), Error);
  EXPECT_THROW(serialize_safetensors({{"bad\xff", DType::U8, {1}, buf}}, {}), Error);
}

// ---- round trips ----

TEST_F(SafetensorsTest, RoundTripsEveryDtypeScalarsAndZeroSizeTensors) {
  const DType all[] = {DType::F64, DType::F32, DType::F16,  DType::BF16, DType::I64, DType::I32, DType::I16,
                       DType::I8,  DType::U8,  DType::BOOL, DType::U16,  DType::U32, DType::U64};
  std::mt19937 rng(7);
  std::vector<std::vector<uint8_t>> storage;
  std::vector<TensorToWrite> tensors;
  const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {}, {0}, {3, 0, 2}, {5}};
  for (DType d : all) {
    for (size_t s = 0; s < shapes.size(); ++s) {
      int64_t numel = 1;
      for (int64_t x : shapes[s]) numel *= x;
      storage.emplace_back(size_t(numel) * size_t(dtype_size(d)));
      for (auto& b : storage.back()) b = uint8_t(rng());
      if (d == DType::BOOL)
        for (auto& b : storage.back()) b &= 1;
      tensors.push_back({std::string(dtype_name(d)) + "." + std::to_string(s), d, shapes[s], storage.back().data()});
    }
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "üñí\"code\""}};
  write_safetensors(path("all.safetensors"), tensors, meta);
  SafetensorsFile f(path("all.safetensors"));
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView* v = f.find(tensors[i].name);
    ASSERT_NE(v, nullptr) << tensors[i].name;
    EXPECT_EQ(v->dtype, tensors[i].dtype);
    EXPECT_EQ(v->shape, tensors[i].shape);
    EXPECT_EQ(v->nbytes, storage[i].size());
    EXPECT_EQ(int64_t(v->nbytes), v->numel() * dtype_size(v->dtype));
    if (!storage[i].empty()) {
      EXPECT_EQ(std::memcmp(v->data, storage[i].data(), v->nbytes), 0) << tensors[i].name;
    }
  }
  // Offsets are in file order and contiguous.
  for (size_t i = 1; i < f.tensors().size(); ++i)
    EXPECT_EQ(f.tensors()[i].data, f.tensors()[i - 1].data + f.tensors()[i - 1].nbytes);
  // Rewriting what was read gives the same bytes.
  std::vector<TensorToWrite> again;
  for (const TensorView& v : f.tensors()) again.push_back({v.name, v.dtype, v.shape, v.data});
  EXPECT_EQ(as_string(serialize_safetensors(again, meta)), read_file(path("all.safetensors")));
}

TEST_F(SafetensorsTest, ReadsLegacyUnpaddedHeaderInAnyKeyOrder) {
  // Header not padded, keys out of order, tensor data not aligned: readers must accept it.
  const std::string header =
      R"({"b":{"shape":[2],"data_offsets":[3,7],"dtype":"BF16"},"a":{"data_offsets":[0,3],"dtype":"U8","shape":[3]}})";
  ASSERT_NE(header.size() % 8, 0u);
  uint16_t bf[2] = {0x3f80, 0xc000};  // 1.0, -2.0
  std::string data = "xyz" + std::string(reinterpret_cast<const char*>(bf), 4);
  write_file(path("legacy.safetensors"), raw_file(header, data));
  SafetensorsCheckpoint ck(path("legacy.safetensors"));
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b"}));
  float out[2];
  ck.read_f32("b", {2}, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ck.get("a").data), 3), "xyz");
}

// ---- sharding ----

TEST_F(SafetensorsTest, ShardedWriteFollowsHfRulesAndReadsBack) {
  // Sizes 40, 40, 40, 200 (over the limit), 8, 100 with max 100:
  // HF: [a,b] full at 80 -> c starts shard; big gets its own shard (appended first); e joins c;
  // f would overflow c+e=48+100 -> new shard.
  std::vector<std::vector<float>> data = {std::vector<float>(10, 1), std::vector<float>(10, 2),
                                          std::vector<float>(10, 3), std::vector<float>(50, 4),
                                          std::vector<float>(2, 5),  std::vector<float>(25, 6)};
  const char* names[] = {"a", "b", "c", "big", "e", "f"};
  std::vector<TensorToWrite> t;
  for (size_t i = 0; i < data.size(); ++i)
    t.push_back({names[i], DType::F32, {int64_t(data[i].size())}, data[i].data()});
  const std::string d = path("sharded");
  write_safetensors_sharded(d, t, 100);
  const std::string idx = read_file(d + "/model.safetensors.index.json");
  const std::string expected_index = R"({
  "metadata": {
    "total_size": 428
  },
  "weight_map": {
    "a": "model-00001-of-00004.safetensors",
    "b": "model-00001-of-00004.safetensors",
    "big": "model-00002-of-00004.safetensors",
    "c": "model-00003-of-00004.safetensors",
    "e": "model-00003-of-00004.safetensors",
    "f": "model-00004-of-00004.safetensors"
  }
}
)";
  EXPECT_EQ(idx, expected_index);
  SafetensorsFile s1(d + "/model-00001-of-00004.safetensors");
  EXPECT_EQ(s1.metadata().at("format"), "pt");
  EXPECT_EQ(s1.tensors().size(), 2u);
  SafetensorsCheckpoint ck(d);
  EXPECT_EQ(ck.names().size(), 6u);
  for (size_t i = 0; i < data.size(); ++i) {
    std::vector<float> out(data[i].size());
    ck.read_f32(names[i], {int64_t(out.size())}, out.data());
    EXPECT_EQ(out, data[i]) << names[i];
  }
  // Also through the index file path directly.
  SafetensorsCheckpoint ck2(d + "/model.safetensors.index.json");
  EXPECT_EQ(ck2.names(), ck.names());
  EXPECT_THROW(ck.get("missing"), Error);
}

TEST_F(SafetensorsTest, ShardedWriteWithOneShardWritesModelSafetensors) {
  float v[4] = {1, 2, 3, 4};
  const std::string d = path("single");
  fs::create_directories(d);
  write_file(d + "/model.safetensors.index.json", "{}");  // stale index must not shadow the file
  write_safetensors_sharded(d, {{"w", DType::F32, {2, 2}, v}}, int64_t(5) * 1000 * 1000 * 1000);
  EXPECT_TRUE(fs::exists(d + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(d + "/model.safetensors.index.json"));
  SafetensorsCheckpoint ck(d);
  float out[4];
  ck.read_f32("w", {2, 2}, out);
  EXPECT_EQ(std::memcmp(out, v, 16), 0);
}

TEST_F(SafetensorsTest, ReadF32ConvertsBf16AndF16Exactly) {
  const uint16_t f16[] = {0x3c00, 0x0001, 0x03ff, 0x8400, 0x7c00, 0xfc00, 0x7e01, 0x8000, 0x7bff};
  std::vector<uint16_t> bf16;
  std::vector<float> f32 = {1.0f, -3.5f, 1e-40f, -INFINITY, 3.1415927f, 1e38f};
  for (float f : f32) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    bf16.push_back(uint16_t(u >> 16));
  }
  write_safetensors(path("conv.safetensors"),
                    {{"h", DType::F16, {3, 3}, f16},
                     {"b", DType::BF16, {int64_t(bf16.size())}, bf16.data()},
                     {"f", DType::F32, {2, 3}, f32.data()}},
                    {{"format", "pt"}});
  SafetensorsCheckpoint ck(path("conv.safetensors"));
  float out[9];
  ck.read_f32("h", {3, 3}, out);
  for (int i = 0; i < 9; ++i) {
    if (f16[i] == 0x7e01) {
      EXPECT_TRUE(std::isnan(out[i]));
      continue;
    }
    EXPECT_EQ(out[i], f16_to_float(f16[i])) << i;
  }
  EXPECT_EQ(out[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(out[3], -std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::isinf(out[4]));
  std::vector<float> ob(bf16.size());
  ck.read_f32("b", {int64_t(bf16.size())}, ob.data());
  for (size_t i = 0; i < bf16.size(); ++i) {
    uint32_t u = uint32_t(bf16[i]) << 16, g;
    std::memcpy(&g, &ob[i], 4);
    EXPECT_EQ(g, u) << i;
  }
  float of[6];
  ck.read_f32("f", {2, 3}, of);
  EXPECT_EQ(std::memcmp(of, f32.data(), 24), 0);
}

// ---- bad input: each must be an Error naming the file and the problem ----

TEST_F(SafetensorsTest, EveryTruncationIsAnError) {
  float v[6] = {0, 1, 2, 3, 4, 5};
  const std::string full = as_string(
      serialize_safetensors({{"attn.0", DType::F32, {1, 2, 3}, v}, {"s", DType::U8, {}, v}}, {{"format", "pt"}}));
  for (size_t n = 0; n < full.size(); ++n) {
    std::string msg = open_error(full.substr(0, n));
    EXPECT_FALSE(msg.empty()) << "prefix " << n;
  }
  write_file(path("full.safetensors"), full);
  EXPECT_NO_THROW(SafetensorsFile f(path("full.safetensors")));
}

TEST_F(SafetensorsTest, HeaderLengthAbsurd) {
  std::string msg = open_error(le64(uint64_t(1) << 63) + "{}      ");
  EXPECT_HAS(msg, "9223372036854775808");
  EXPECT_HAS(msg, "100000000");
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFile) {
  std::string msg = open_error(le64(1000) + "{}      ");
  EXPECT_HAS(msg, "header length is 1000");
  EXPECT_HAS(msg, "file size 16");
}

TEST_F(SafetensorsTest, HeaderNotJson) {
  EXPECT_HAS(open_error(raw_file(R"({"a":{"dtype":"F32",)", "")), "not valid JSON");
  EXPECT_HAS(open_error(raw_file("{\"a\xff\":1}", "")), "not valid JSON");  // invalid UTF-8
  EXPECT_HAS(open_error(raw_file(std::string("{}\0\0\0\0\0\0", 8), "")), "NUL byte at offset 2");
  EXPECT_HAS(open_error(raw_file(std::string("{}\0 garbage", 11), "")), "NUL byte");
}

TEST_F(SafetensorsTest, HeaderNotAnObject) {
  EXPECT_HAS(open_error(raw_file("[1,2,3] ", "")), "expected a JSON object");
  EXPECT_HAS(open_error(raw_file(" {}     ", "")), "expected a JSON object");
  EXPECT_HAS(open_error(raw_file(R"({"a":[1,2]})", "")), "expected an object with dtype");
}

TEST_F(SafetensorsTest, OffsetsOverlap) {
  std::string msg = open_error(raw_file(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      std::string(12, 'x')));
  EXPECT_HAS(msg, "\"b\"");
  EXPECT_HAS(msg, "overlaps");
  EXPECT_HAS(msg, "start at 4, expected 8");
}

TEST_F(SafetensorsTest, OffsetsWithHole) {
  std::string msg = open_error(raw_file(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
      std::string(20, 'x')));
  EXPECT_HAS(msg, "hole");
  EXPECT_HAS(msg, "start at 12, expected 8");
  EXPECT_HAS(open_error(raw_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", "xyz")),
             "start at 1, expected 0");
}

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  std::string msg =
      open_error(raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, 'x')));
  EXPECT_HAS(msg, "cover 16 data bytes");
  EXPECT_HAS(msg, "has 8 bytes");
  EXPECT_HAS(msg, "out of range");
  EXPECT_HAS(open_error(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[5,1]}})", "x")), "begin <= end");
  EXPECT_HAS(open_error(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "x")), "non-negative");
  EXPECT_HAS(open_error(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "x")), "[begin, end]");
}

TEST_F(SafetensorsTest, DataSizeMismatch) {
  std::string msg =
      open_error(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", std::string(12, 'x')));
  EXPECT_HAS(msg, "\"w\"");
  EXPECT_HAS(msg, "hold 12 bytes, expected 8");
  EXPECT_HAS(msg, "[2]");
}

TEST_F(SafetensorsTest, BadShapes) {
  EXPECT_HAS(open_error(raw_file(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", "")),
             "non-negative integer");
  EXPECT_HAS(open_error(raw_file(R"({"w":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})", "x")),
             "non-negative integer");
  EXPECT_HAS(open_error(raw_file(R"({"w":{"dtype":"U8","shape":"1","data_offsets":[0,1]}})", "x")), "array");
  EXPECT_HAS(open_error(raw_file(
                 R"({"w":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,1]}})", "x")),
             "2^64");
  EXPECT_HAS(open_error(raw_file(R"({"w":{"dtype":"F64","shape":[4294967296,1073741824],"data_offsets":[0,1]}})", "x")),
             "overflows 2^63 bytes");
  EXPECT_HAS(open_error(raw_file(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", "x")), "no \"shape\"");
}

TEST_F(SafetensorsTest, UnknownDtype) {
  std::string msg = open_error(raw_file(R"({"w":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})", "xxxx"));
  EXPECT_HAS(msg, "unknown dtype \"F17\"");
  EXPECT_HAS(msg, "BF16");
  EXPECT_HAS(open_error(raw_file(R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "x")), "cannot read");
  EXPECT_HAS(open_error(raw_file(R"({"w":{"dtype":3,"shape":[1],"data_offsets":[0,1]}})", "x")), "expected a string");
}

TEST_F(SafetensorsTest, DuplicateKey) {
  std::string msg = open_error(raw_file(
      R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
      "xy"));
  EXPECT_HAS(msg, "duplicate key \"w\"");
  EXPECT_HAS(open_error(raw_file(R"({"w":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x")),
             "duplicate key \"dtype\"");
}

TEST_F(SafetensorsTest, TrailingBytes) {
  std::string msg = open_error(raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "xy"));
  EXPECT_HAS(msg, "trailing bytes");
  EXPECT_HAS(msg, "cover 1 data bytes but the file has 2");
}

TEST_F(SafetensorsTest, MetadataNotStringToString) {
  EXPECT_HAS(open_error(raw_file(R"({"__metadata__":{"format":1}})", "")), "expected a string");
  EXPECT_HAS(open_error(raw_file(R"({"__metadata__":{"format":null}})", "")), "expected a string");
  EXPECT_HAS(open_error(raw_file(R"({"__metadata__":["pt"]})", "")), "__metadata__");
  EXPECT_HAS(open_error(raw_file(R"({"__metadata__":"pt"})", "")), "__metadata__");
}

TEST_F(SafetensorsTest, DeepNestingIsAnErrorNotAStackOverflow) {
  std::string deep = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":)" + std::string(100000, '[') +
                     std::string(100000, ']') + "}}";
  EXPECT_HAS(open_error(raw_file(deep, "x")), "nests");
}

TEST_F(SafetensorsTest, DirectoryWithoutCheckpointAndMissingPath) {
  fs::create_directories(path("emptydir"));
  try {
    SafetensorsCheckpoint ck(path("emptydir"));
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), path("emptydir"));
    EXPECT_HAS(std::string(e.what()), "model.safetensors");
  }
  EXPECT_THROW(SafetensorsCheckpoint(path("nope")), Error);
  EXPECT_THROW(SafetensorsFile(path("nope.safetensors")), Error);
}

class ShardedBadTest : public SafetensorsTest {
 protected:
  void SetUp() override {
    SafetensorsTest::SetUp();
    std::vector<TensorToWrite> t = {{"a", DType::F32, {4}, v_}, {"b", DType::F32, {4}, v_ + 4}};
    d_ = path("ck");
    write_safetensors_sharded(d_, t, 16);
    ASSERT_TRUE(fs::exists(d_ + "/model-00002-of-00002.safetensors"));
  }
  std::string error_with_index(const std::string& index) {
    write_file(d_ + "/model.safetensors.index.json", index);
    try {
      SafetensorsCheckpoint ck(d_);
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_HAS(msg, "model.safetensors.index.json");
      return msg;
    }
    ADD_FAILURE() << "expected an Error for index " << index;
    return "";
  }
  float v_[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  std::string d_;
};

TEST_F(ShardedBadTest, MissingShardFile) {
  fs::remove(d_ + "/model-00002-of-00002.safetensors");
  std::string msg = error_with_index(read_file(d_ + "/model.safetensors.index.json"));
  EXPECT_HAS(msg, "model-00002-of-00002.safetensors");
  EXPECT_HAS(msg, "does not exist");
  EXPECT_HAS(msg, "\"b\"");
}

TEST_F(ShardedBadTest, TensorNotInItsShard) {
  std::string msg = error_with_index(
      R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors"}})");
  EXPECT_HAS(msg, "does not contain");
  EXPECT_HAS(msg, "\"b\"");
}

TEST_F(ShardedBadTest, MalformedIndex) {
  EXPECT_HAS(error_with_index("{\"weight_map\":"), "not valid JSON");
  EXPECT_HAS(error_with_index(R"({"metadata":{}})"), "weight_map");
  EXPECT_HAS(error_with_index(R"({"weight_map":{"a":3}})"), "shard file name");
  EXPECT_HAS(error_with_index(R"({"weight_map":{"a":"../model-00001-of-00002.safetensors"}})"), "same folder");
  EXPECT_HAS(error_with_index(
                 R"({"weight_map":{"a":"model-00001-of-00002.safetensors","a":"model-00001-of-00002.safetensors"}})"),
             "duplicate key");
}

TEST_F(ShardedBadTest, CorruptShardNamesTheShard) {
  const std::string shard = d_ + "/model-00002-of-00002.safetensors";
  std::string bytes = read_file(shard);
  write_file(shard, bytes.substr(0, bytes.size() - 1));
  try {
    SafetensorsCheckpoint ck(d_);
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), shard);
  }
}

TEST_F(SafetensorsTest, ReadF32ShapeMismatchAndWrongDtype) {
  float v[6] = {};
  int32_t iv[2] = {1, 2};
  write_safetensors(path("m.safetensors"), {{"w", DType::F32, {2, 3}, v}, {"i", DType::I32, {2}, iv}}, {});
  SafetensorsCheckpoint ck(path("m.safetensors"));
  float out[6];
  try {
    ck.read_f32("w", {3, 2}, out);
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_HAS(msg, path("m.safetensors"));
    EXPECT_HAS(msg, "\"w\"");
    EXPECT_HAS(msg, "shape [2, 3], expected [3, 2]");
  }
  try {
    ck.read_f32("i", {2}, out);
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "dtype I32");
  }
  try {
    ck.read_f32("nope", {2}, out);
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "\"nope\" not found");
  }
}

// ---- write failures ----

TEST_F(SafetensorsTest, WriteIntoMissingFolderNamesThePath) {
  try {
    write_safetensors(path("no/such/dir/x.safetensors"), {}, {});
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), path("no/such/dir/x.safetensors"));
  }
}

TEST_F(SafetensorsTest, DiskFullIsAnErrorAndLeavesNoFile) {
  // Simulate a full disk with a file-size limit: write() then fails with EFBIG.
  std::vector<float> big(1 << 16, 1.0f);
  std::string msg;
  {
    const llamatrain::testing::FileSizeLimit limit(4096);
    try {
      write_safetensors(path("full.safetensors"), {{"w", DType::F32, {int64_t(big.size())}, big.data()}}, {});
    } catch (const Error& e) {
      msg = e.what();
    }
  }
  EXPECT_HAS(msg, path("full.safetensors"));
  EXPECT_HAS(msg, "failed");
  EXPECT_FALSE(fs::exists(path("full.safetensors")));
  EXPECT_TRUE(fs::is_empty(dir_)) << "a temporary was left";
}

}  // namespace
}  // namespace llamatrain::io
