// core/memory: the available-memory probe reads something sensible on Linux, and check_memory_fits
// refuses a job larger than that with a message naming the job, the sizes and a hint; `llamatrain
// bench` and `generate` on a model far too large for the machine stop with that message before
// allocating.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include <unistd.h>

#include "test_util.h"
#include "core/error.h"
#include "core/memory.h"

namespace llamatrain {
namespace {

// Runs `llamatrain ARGS`; returns (exit status, stderr followed by stdout).
std::pair<int, std::string> run_llamatrain(const std::vector<std::string>& args) {
  const auto r = testing::run_cli(args);
  return {r.exited ? r.code : 128 + r.signal, r.err + r.out};
}

TEST(Memory, AvailableIsPositiveOnLinux) {
  const int64_t avail = available_memory_bytes();
  EXPECT_GT(avail, int64_t(16) << 20);  // any machine that runs the tests has more than 16 MB free
}

TEST(Memory, CheckRefusesTooLargeWithSizesAndHint) {
  EXPECT_NO_THROW(check_memory_fits(1024, "tiny job", "1 KB", "none needed"));
  const int64_t avail = available_memory_bytes();
  try {
    check_memory_fits(avail + (int64_t(100) << 30), "huge job", "weights 100 GB", "use less");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("memory: huge job needs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("weights 100 GB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GB is available"), std::string::npos) << msg;
    EXPECT_NE(msg.find("hint: use less"), std::string::npos) << msg;
  }
}

TEST(Memory, BenchOfAModelTooLargeForTheMachineIsAClearError) {
  // llama2-7b at batch 64 x seq 4096 needs ~2 TB: refused up front, no allocation, no crash
  const auto [status, out] =
      run_llamatrain({"bench", "--model", "llama2-7b", "--seq", "4096", "--batch", "64", "--steps", "1"});
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("error: memory: llama2-7b in bf16-mixed at batch 64 x seq 4096 needs"), std::string::npos) << out;
  EXPECT_NE(out.find("hint:"), std::string::npos) << out;
}

TEST(Memory, GenerateWithAModelTooLargeForTheMachineIsAClearError) {
  // A config of ~1.7T parameters (no weights needed: the check runs before loading them).
  const auto dir = std::filesystem::temp_directory_path() / ("llamatrain_memory_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/golden/tiny_hf/tokenizer.model",
                             dir / "tokenizer.model", std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "config.json")
      << R"({"hidden_size": 32768, "intermediate_size": 131072, "num_attention_heads": 256,
             "num_key_value_heads": 256, "num_hidden_layers": 128, "rms_norm_eps": 1e-5, "vocab_size": 32000,
             "max_position_embeddings": 4096, "bos_token_id": 1, "eos_token_id": 2})";
  const auto [status, out] = run_llamatrain({"generate", dir.string(), "--prompt", "hi"});
  std::filesystem::remove_all(dir);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("error: memory: "), std::string::npos) << out;
  EXPECT_NE(out.find("parameters at 4 bytes each"), std::string::npos) << out;
}

}  // namespace
}  // namespace llamatrain
