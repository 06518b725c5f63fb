// PyTorch checkpoints (io/torch_checkpoint.h) through io::SafetensorsCheckpoint, against files Debian's
// torch writes at test time (tests/io/make_torch_bins.py): each case reads the same tensors as its
// safetensors twin, bit for bit after conversion to fp32 (fp32, fp16, bf16, shards with an index, tied
// weights sharing one storage, a state dict nested in a dict, slices of a larger storage, pickle protocol
// 4, an nn.Module's Parameters, zip64 records); tiny_hf's weights as pytorch_model.bin load to the same
// model and generate the same text; hostile files (a global such as os.system, an opcode outside the
// set, a compressed or missing entry, a tensor past its storage, a cut at any length) are each a plain
// Error naming the file and the problem, and nothing they hold is run.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "io/torch_checkpoint.h"
#include "model/llama.h"
#include "test_util.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// The fixtures, written once for the whole suite.
class TorchCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_ = new std::string(testing::python_missing({"torch", "numpy"}));
    if (!skip_->empty()) return;
    dir_ = new TempDir;
    const std::string cmd =
        fmt::format("{} {} {} {}", testing::system_python(), testing::source_path("tests/io/make_torch_bins.py"),
                    testing::source_path(""), dir_->path());
    written_ = testing::run_capture(cmd, &log_) == 0;
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete skip_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!skip_->empty()) GTEST_SKIP() << *skip_;
    ASSERT_TRUE(written_) << "make_torch_bins.py failed:\n" << log_;
  }
  static std::string fx(const std::string& rel) { return *dir_ / rel; }

  static inline TempDir* dir_ = nullptr;
  static inline std::string* skip_ = nullptr;
  static inline bool written_ = false;
  static inline std::string log_;
};

std::vector<float> read_all(const io::SafetensorsCheckpoint& ck, const std::string& name) {
  const io::TensorView& t = ck.get(name);
  std::vector<float> out(size_t(t.numel()));
  ck.read_f32(name, t.shape, out.data());
  return out;
}

// Every tensor of `bin` has its twin's name, dtype, shape and fp32 values, bit for bit, and no other.
void expect_same_tensors(const std::string& bin, const std::string& twin) {
  SCOPED_TRACE(bin);
  const io::SafetensorsCheckpoint a(bin), b(twin);
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(a.get(name).dtype, b.get(name).dtype);
    EXPECT_EQ(a.get(name).shape, b.get(name).shape);
    EXPECT_EQ(a.get(name).nbytes, b.get(name).nbytes);
    const std::vector<float> x = read_all(a, name), y = read_all(b, name);
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << "values differ";
  }
}

TEST_F(TorchCheckpoint, EachCaseReadsAsItsSafetensorsTwin) {
  for (const char* c : {"fp32", "fp16", "bf16", "sharded", "tied", "nested", "nested_state_dict", "offset", "protocol4",
                        "module", "zip64"})
    expect_same_tensors(fx(c), fx(c) + "/twin.safetensors");
  EXPECT_EQ(io::SafetensorsCheckpoint(fx("bf16")).get("cube").dtype, io::DType::BF16);
  EXPECT_EQ(io::SafetensorsCheckpoint(fx("fp16")).get("cube").dtype, io::DType::F16);
}

TEST_F(TorchCheckpoint, ViewsPointIntoTheFileAndShareTiedStorage) {
  const io::SafetensorsCheckpoint tied(fx("tied/pytorch_model.bin"));
  EXPECT_EQ(tied.get("lm_head.weight").data, tied.get("model.embed_tokens.weight").data) << "one storage, one view";
  const io::SafetensorsCheckpoint off(fx("offset"));
  EXPECT_EQ(off.get("rows").data, off.get("full").data + 3 * 5 * 4) << "rows 3..6 of the 12 x 5 fp32 storage";
  EXPECT_EQ(off.get("last_row").shape, (std::vector<int64_t>{5}));
  // A rank's part of a tensor: elements [first, first + count) only.
  std::vector<float> part(4), whole = read_all(off, "rows");
  off.read_f32("rows", {4, 5}, 7, 4, part.data());
  EXPECT_EQ(std::memcmp(part.data(), whole.data() + 7, 4 * sizeof(float)), 0);
  EXPECT_EQ(off.file_of("rows"), fx("offset") + "/pytorch_model.bin");
}

TEST_F(TorchCheckpoint, ShardsComeFromTheIndex) {
  const io::SafetensorsCheckpoint ck(fx("sharded"));
  EXPECT_EQ(ck.file_of("cube"), fx("sharded") + "/pytorch_model-00002-of-00002.bin");
  EXPECT_EQ(ck.file_of("model.norm.weight"), fx("sharded") + "/pytorch_model-00001-of-00002.bin");
  const io::SafetensorsCheckpoint direct(fx("sharded/pytorch_model.bin.index.json"));
  EXPECT_EQ(direct.names(), ck.names());
}

TEST_F(TorchCheckpoint, SafetensorsWinWhenAFolderHoldsBoth) {
  TempDir tmp;
  fs::copy_file(fx("fp16/pytorch_model.bin"), tmp / "pytorch_model.bin");
  fs::copy_file(fx("fp32/twin.safetensors"), tmp / "model.safetensors");
  EXPECT_EQ(io::SafetensorsCheckpoint(tmp.path()).file_of("cube"), tmp / "model.safetensors");
  fs::remove(tmp / "model.safetensors");
  EXPECT_EQ(io::SafetensorsCheckpoint(tmp.path()).file_of("cube"), tmp / "pytorch_model.bin");
  fs::remove(tmp / "pytorch_model.bin");
  EXPECT_CONTAINS(error_of([&] { io::SafetensorsCheckpoint c(tmp.path()); }), "pytorch_model.bin.index.json");
}

// tiny_hf (tests/golden) with its weights as pytorch_model.bin only: the same fp32 weights, bit for bit,
// and the same greedy generation.
TEST_F(TorchCheckpoint, ATinyLlamaFolderOfPytorchModelBinLoadsAsItsSafetensors) {
  const std::string tiny_hf = testing::source_path("tests/golden/tiny_hf");
  const auto a = io::load_hf_model(fx("tiny_bin"), model::Precision::fp32);
  const auto b = io::load_hf_model(tiny_hf, model::Precision::fp32);
  ASSERT_EQ(a->num_params(), b->num_params());
  EXPECT_EQ(std::memcmp(a->param_arena(), b->param_arena(), size_t(a->num_params()) * sizeof(float)), 0);
  EXPECT_EQ(io::check_hf_weights(fx("tiny_bin"), a->config()), io::check_hf_weights(tiny_hf, b->config()));

  auto generate = [](const std::string& dir) {
    return testing::run_cli({"generate", dir, "--prompt", "Once upon", "--temperature", "0", "--max-new-tokens", "6"});
  };
  const testing::CliResult x = generate(fx("tiny_bin")), y = generate(tiny_hf);
  ASSERT_EQ(x.code, 0) << testing::describe(x);
  ASSERT_EQ(y.code, 0) << testing::describe(y);
  EXPECT_EQ(x.out, y.out);
}

// A hostile file: Error naming the file and `what`, whether opened alone or in a folder.
void expect_refused(const std::string& file, const std::vector<std::string>& what) {
  SCOPED_TRACE(file);
  const std::string e = error_of([&] { io::SafetensorsCheckpoint c(file); });
  EXPECT_CONTAINS(e, file);
  for (const std::string& w : what) EXPECT_CONTAINS(e, w);
  EXPECT_CONTAINS(e, "hint:");
}

TEST_F(TorchCheckpoint, GlobalsOutsideAStateDictAreRefusedAndNeverRun) {
  expect_refused(fx("hostile/system.bin"), {"holds posix.system, expected only tensors and plain containers"});
  EXPECT_FALSE(fs::exists(fx("hostile/pwned"))) << "the pickle's command ran";
  expect_refused(fx("hostile/numpy.bin"), {"holds numpy.core.multiarray._reconstruct"});
}

TEST_F(TorchCheckpoint, MalformedArchivesAreNamedErrors) {
  expect_refused(fx("hostile/opcode.bin"), {"data.pkl at byte 3", "opcode 0x69 ('i')"});
  expect_refused(fx("hostile/compressed.bin"), {"is compressed (zip method 8)"});
  expect_refused(fx("hostile/missing_storage.bin"), {"lives in storage 1", "has no entry pytorch_model/data/1"});
  expect_refused(fx("hostile/short_storage.bin"), {"storage 0 holds 56 bytes, expected 112 (the 28 elements of F32"});
  expect_refused(fx("hostile/past_storage.bin"),
                 {"tensor model.embed_tokens.weight of size [7, 4] starts at element 20 of storage 0, which holds 28"});
  expect_refused(fx("hostile/transposed.bin"), {"tensor t of size [4, 3] has strides [1, 4], expected row-major"});
  expect_refused(fx("hostile/legacy.bin"), {"legacy format", "re-save it with a current torch"});
  expect_refused(fx("hostile/list.bin"), {"holds a list, expected a dict of tensors"});
  expect_refused(fx("hostile/mixed.bin"), {"entry step is an int, expected a state dict"});
}

// Every prefix of a valid file, and each byte of its directory and pickle flipped: an Error, never a
// crash (the ASan preset makes any stray read fatal).
TEST_F(TorchCheckpoint, CutsAndFlippedBytesAreErrors) {
  TempDir tmp;
  const std::string good = testing::read_file(fx("fp32/pytorch_model.bin"));
  const std::string file = tmp / "cut.bin";
  int refused = 0, cuts = 0;
  for (size_t n = 0; n < good.size(); n += (n < 64 || good.size() - n < 2048) ? 1 : 97) {
    testing::write_file(file, good.substr(0, n));
    ++cuts;
    const std::string e = error_of([&] { io::SafetensorsCheckpoint c(file); });
    refused += e.find(file) != std::string::npos;
  }
  EXPECT_EQ(refused, cuts) << "every cut must be an Error naming the file";
  int read = 0;
  for (size_t i = 0; i < good.size(); i += (i < 1024 || good.size() - i < 2048) ? 1 : 61) {
    std::string bad = good;
    bad[i] = char(bad[i] ^ 0x5a);
    testing::write_file(file, bad);
    try {
      io::SafetensorsCheckpoint c(file);
      for (const std::string& name : c.names()) read_all(c, name);
      ++read;  // a flipped tensor byte, or padding
    } catch (const Error& e) {
      EXPECT_CONTAINS(e.what(), file);
    }
  }
  EXPECT_GT(read, 0);
}

}  // namespace
}  // namespace llamatrain
