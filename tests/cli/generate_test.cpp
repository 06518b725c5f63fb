// `llamatrain generate` end to end on the tiny HF folder written by tools/reference/make_tiny_hf.py:
// the prompt tokenizes to the reference's ids (BOS + SentencePiece), and greedy decoding with the
// KV cache reproduces the reference's greedy tokens (full recompute in float64) exactly; --chat renders
// the prompt with the model's own chat template as training renders conversations, and that text is
// Hugging Face's Jinja rendering of the template (@huggingface/jinja, skipped without node).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "data/chat.h"
#include "data/tokenizer.h"

namespace llamatrain {
namespace {

const std::string kTiny = std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/golden/tiny_hf";

using testing::run_cli;

std::vector<nlohmann::json> cases() {
  std::ifstream f(kTiny + "/expected.json");
  nlohmann::json j = nlohmann::json::parse(f);
  if (j.is_array()) return std::vector<nlohmann::json>(j.begin(), j.end());
  std::vector<nlohmann::json> out = {j};
  if (j.contains("more"))
    for (auto& x : j["more"]) out.push_back(x);
  return out;
}

TEST(Generate, PromptIdsMatchReference) {
  data::Tokenizer tok(kTiny + "/tokenizer.model");
  for (const auto& c : cases()) {
    std::vector<int> ids = {1};
    for (int id : tok.encode(c["prompt"].get<std::string>())) ids.push_back(id);
    EXPECT_EQ(ids, c["prompt_ids"].get<std::vector<int>>()) << c["prompt"];
  }
}

TEST(Generate, GreedyMatchesReferenceExactly) {
  for (const auto& c : cases()) {
    const auto want = c["greedy_ids"].get<std::vector<int>>();
    const auto r = run_cli({"generate", kTiny, "--prompt", c["prompt"].get<std::string>(), "--temperature", "0",
                            "--max-new-tokens", std::to_string(want.size()), "--print-ids"});
    ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
    std::vector<int> got;
    std::istringstream in(r.out);
    for (int id; in >> id;) got.push_back(id);
    // The reference does not stop at EOS; llamatrain does: compare up to and including the first EOS.
    std::vector<int> expect;
    for (int id : want) {
      expect.push_back(id);
      if (id == 2) break;
    }
    EXPECT_EQ(got, expect) << "prompt: " << c["prompt"];
  }
}

TEST(Generate, SamplingIsReproducibleBySeed) {
  const std::vector<std::string> base = {"generate", kTiny,         "--prompt",      "The", "--max-new-tokens",
                                         "12",       "--print-ids", "--temperature", "1.0", "--top-p",
                                         "0.95",     "--seed"};
  auto with_seed = [&](const char* seed) {
    auto args = base;
    args.push_back(seed);
    return run_cli(args);
  };
  const auto a = with_seed("5"), b = with_seed("5"), c = with_seed("6");
  ASSERT_TRUE(a.exited && a.code == 0) << testing::describe(a);
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out) << "different seeds gave the same 12 tokens";
}

TEST(Generate, ChatPromptsAreTheModelsTemplateRendered) {
  const std::string golden = std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/golden/";
  struct Case {
    std::string folder, tokenizer, template_name;  // template_name "": the folder's own (auto)
  };
  const std::vector<Case> cases = {{"tiny_qwen2", "tokenizer.json", ""},
                                   {"tiny_llama3", "tokenizer.json", ""},
                                   {"tiny_hf", "tokenizer.model", "llama2"}};
  const std::vector<data::ChatMessage> messages = {{"system", "Be brief."}, {"user", "What is 2 + 2?"}};
  // Hugging Face's rendering of the folders' own templates, where node and the references are.
  std::string js;
  const int rc =
      testing::run_capture("bash " + testing::source_path("tools/reference/js/install.sh") + " 2>/dev/null", &js);
  while (!js.empty() && js.back() == '\n') js.pop_back();
  nlohmann::json hf;
  if (rc == 0) {
    testing::TempDir d;
    nlohmann::json spec = {
        {"configs",
         {{"tiny_qwen2", golden + "tiny_qwen2/tokenizer_config.json"},
          {"tiny_llama3", golden + "tiny_llama3/tokenizer_config.json"}}},
        {"conversations",
         {{{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "What is 2 + 2?"}}}}}};
    testing::write_file(d / "cases.json", spec.dump());
    std::string out;
    ASSERT_EQ(testing::run_capture("NODE_PATH=" + js + "/node_modules node " +
                                       testing::source_path("tools/reference/js/chat_templates.mjs") + " " +
                                       (d / "cases.json"),
                                   &out),
              0)
        << out;
    hf = nlohmann::json::parse(out);
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.folder);
    const std::string dir = golden + c.folder;
    std::vector<std::string> args = {"generate",          dir, "--system", "Be brief.", "--prompt", "What is 2 + 2?",
                                     "--print-prompt-ids"};
    if (c.template_name.empty()) {
      args.push_back("--chat");
    } else {
      args.insert(args.end(), {"--template", c.template_name});
    }
    const auto r = run_cli(args);
    ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
    std::vector<int> got;
    std::istringstream in(r.out);
    for (int id; in >> id;) got.push_back(id);
    // What training makes of the same conversation with the assistant header added.
    const data::Tokenizer tok(dir + "/" + c.tokenizer);
    const data::ChatTemplate t = c.template_name.empty()
                                     ? data::load_chat_template("auto", dir + "/tokenizer_config.json")
                                     : data::builtin_chat_template(c.template_name);
    std::vector<data::ChatSegment> segments;
    std::string why;
    ASSERT_TRUE(data::render_chat(t, messages, true, &segments, &why)) << why;
    std::vector<int> want;
    std::vector<uint8_t> in_loss;
    data::encode_chat(segments, tok, &want, &in_loss);
    EXPECT_EQ(got, want);
    if (hf.contains(c.folder)) {
      EXPECT_EQ(data::chat_text(segments), hf[c.folder][0]["generation"].get<std::string>());
    }
  }
  if (rc != 0) GTEST_SKIP() << "rendered ids checked; Hugging Face's Jinja rendering skipped (no node or registry)";
}

TEST(Generate, ChatWithoutATemplateNamesTheOption) {
  const auto r = run_cli({"generate", kTiny, "--chat", "--prompt", "hi"});
  testing::expect_plain_error(r, {"tokenizer_config.json", "--template"});
  const auto s = run_cli({"generate", kTiny, "--system", "x", "--prompt", "hi"});
  testing::expect_plain_error(s, {"--system", "--chat"});
}

// --no-thinking: Qwen3's generation prompt with enable_thinking=False, the ids of the same rendering
// training's code makes; refused by name for a template without reasoning blocks.
TEST(Generate, NoThinkingClosesAnEmptyReasoningBlockAfterTheHeader) {
  const std::string dir = testing::source_path("tests/golden/tiny_qwen2");
  const auto r =
      run_cli({"generate", dir, "--template", "qwen3", "--no-thinking", "--prompt", "Hi", "--print-prompt-ids"});
  ASSERT_TRUE(r.exited && r.code == 0) << testing::describe(r);
  std::vector<int> got;
  std::istringstream in(r.out);
  for (int id; in >> id;) got.push_back(id);
  const data::Tokenizer tok(dir + "/tokenizer.json");
  data::ChatTemplate t = data::builtin_chat_template("qwen3");
  t.enable_thinking = false;
  std::vector<data::ChatSegment> segments;
  std::string why;
  const std::vector<data::ChatMessage> messages = {{"user", "Hi"}};
  ASSERT_TRUE(data::render_chat(t, messages, true, &segments, &why)) << why;
  ASSERT_TRUE(data::chat_text(segments).ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  std::vector<int> want;
  std::vector<uint8_t> in_loss;
  data::encode_chat(segments, tok, &want, &in_loss);
  EXPECT_EQ(got, want);
  testing::expect_plain_error(run_cli({"generate", dir, "--template", "chatml", "--no-thinking", "--prompt", "Hi"}),
                              {"--no-thinking", "no reasoning blocks", "qwen3"});
}

TEST(Generate, MissingFolderIsAClearError) {
  const auto r = run_cli({"generate", "/nonexistent/model", "--prompt", "hi"});
  testing::expect_plain_error(r, {"/nonexistent/model"});
  EXPECT_EQ(r.code, 1);
}

}  // namespace
}  // namespace llamatrain
