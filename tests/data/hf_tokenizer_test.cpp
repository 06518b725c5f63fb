// The tokenizer.json tokenizer on small files written here: BPE merge order and ignore_merges, added
// tokens (leftmost-longest, lstrip/rstrip, specials), BOS/EOS rules, Metaspace and byte fallback,
// decoders, DecodeStream over byte-level tokens, the facade's file and folder rules, and clear
// errors for unknown components, hostile and truncated files. The real Llama 3 / Qwen2.5 / Llama 2
// files are compared with the JavaScript reference in hf_tokenizer_reference_test.cpp.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "core/error.h"
#include "data/hf_tokenizer.h"
#include "data/piece_lengths.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace {

using llamatrain::Error;
using llamatrain::data::DecodeStream;
using llamatrain::data::HfTokenizer;
using llamatrain::data::Tokenizer;
using llamatrain::data::TokenizerLibrary;
using nlohmann::json;
namespace t = llamatrain::testing;

// GPT-2's byte-level character of a byte.
std::string byte_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80)
    s.push_back(char(cp));
  else {
    s.push_back(char(0xC0 | (cp >> 6)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  }
  return s;
}

// A byte-level BPE file: the 256 bytes, then the merges' results in order.
json byte_level(const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  json m = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    m.push_back(a + " " + b);
  }
  return json{{"version", "1.0"},
              {"normalizer", nullptr},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"},
                   {"pattern", {{"Regex", R"( ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+|\s+)"}}},
                   {"behavior", "Isolated"},
                   {"invert", false}},
                  {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
              {"post_processor", {{"type", "ByteLevel"}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"added_tokens", json::array()},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"ignore_merges", ignore_merges}}}};
}

json added(int id, const std::string& content, bool special = true, bool lstrip = false, bool rstrip = false) {
  return {{"id", id},         {"content", content}, {"special", special},  {"normalized", false},
          {"lstrip", lstrip}, {"rstrip", rstrip},   {"single_word", false}};
}

std::unique_ptr<HfTokenizer> parse(const json& j, const json& cfg = json()) {
  return HfTokenizer::parse(j.dump(), cfg.is_null() ? "" : cfg.dump(), "test/tokenizer.json");
}

std::vector<int> encode(const HfTokenizer& tok, const std::string& text) {
  std::vector<int> ids;
  tok.encode(text, &ids);
  return ids;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(HfTokenizer, MergesApplyLowestRankFirstAndIgnoreMergesEmitsWholeWords) {
  // "h e" then "l l" then "he ll" ... ; "hello" ends as one token. Ranks decide: with "l o" ranked before
  // "l l", "llo" cannot form from "ll"+"o" and the word ends as "he", "l", "lo".
  const auto a = parse(byte_level({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}}));
  EXPECT_EQ(encode(*a, "hello"), (std::vector<int>{a->piece_to_id("hello")}));
  const auto b = parse(byte_level({{"h", "e"}, {"l", "o"}, {"l", "l"}}));
  EXPECT_EQ(encode(*b, "hello"), (std::vector<int>{b->piece_to_id("he"), 'l', b->piece_to_id("lo")}));
  // ignore_merges: a pre-token in the vocabulary is emitted whole even where no merge path leads to it.
  json j = byte_level({{"h", "e"}});
  j["model"]["vocab"]["hex"] = 300;
  EXPECT_EQ(encode(*parse(j), "hex"), (std::vector<int>{257 - 1, 'x'}));  // "he" + x
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(encode(*parse(j), "hex"), (std::vector<int>{300}));
  // A long word (the priority-queue path) merges as the short-word path does.
  const std::string word(300, 'l');
  std::vector<int> want(150, b->piece_to_id("ll"));
  EXPECT_EQ(encode(*b, word), want);
  // Byte-level: any bytes, Chinese and invalid UTF-8 (read as U+FFFD) included, round-trip or decode lossy.
  EXPECT_EQ(a->decode(encode(*a, "中文 hello\n")), "中文 hello\n");
  EXPECT_EQ(a->decode(encode(*a, "a\xff"
                                 "b")),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(encode(*a, "\xff"), encode(*a, "\xEF\xBF\xBD"));
}

TEST(HfTokenizer, AddedTokensSplitLeftmostLongestAndStripWhitespace) {
  json j = byte_level({{"h", "i"}});
  j["added_tokens"] = {added(400, "<|a|>"), added(401, "<|a|>x"), added(402, "<|im_start|>"),
                       added(403, "<eot>", true, true, true), added(404, "<tool>", false)};
  json cfg = {{"bos_token", nullptr}, {"eos_token", "<eot>"}};
  const auto tok = parse(j, cfg);
  EXPECT_EQ(encode(*tok, "hi<|a|>xhi<|a|>"), (std::vector<int>{256, 401, 256, 400}));
  EXPECT_EQ(encode(*tok, "hi  <eot>  hi"), (std::vector<int>{256, 403, 256}));
  const std::vector<int> partial = encode(*tok, "<|im_start|");  // incomplete: plain text, byte by byte
  EXPECT_EQ(partial.size(), 11u);
  EXPECT_EQ(std::count(partial.begin(), partial.end(), 402), 0);
  EXPECT_EQ(tok->piece_to_id("<|im_start|>"), 402);
  EXPECT_EQ(tok->piece_to_id("no such piece"), -1);
  EXPECT_TRUE(tok->is_special(402));
  EXPECT_FALSE(tok->is_special(404));
  EXPECT_TRUE(tok->is_added(404));
  EXPECT_EQ(tok->bos_id(), -1);  // bos_token: null (Qwen)
  EXPECT_EQ(tok->eos_id(), 403);
  EXPECT_EQ(tok->vocab_size(), 405);
  // Special tokens decode to their text (Hugging Face's default), or to nothing when skipped.
  EXPECT_EQ(tok->decode({256, 402, 256}), "hi<|im_start|>hi");
  EXPECT_EQ(tok->decode({256, 402, 256}, true), "hihi");
  EXPECT_EQ(tok->decode({256, 404}, true), "hi<tool>");
}

TEST(HfTokenizer, BosAndEosComeFromThePostProcessorWithoutTokenizerConfig) {
  json j = byte_level({});
  j["added_tokens"] = {added(256, "<|begin_of_text|>"), added(257, "<|end_of_text|>")};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single",
                          {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"special_tokens", {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {256}}}}}}};
  const auto tok = parse(j);
  EXPECT_EQ(tok->prefix_ids(), (std::vector<int>{256}));
  EXPECT_TRUE(tok->suffix_ids().empty());
  EXPECT_EQ(tok->bos_id(), 256);
  EXPECT_EQ(tok->eos_id(), 257);                          // a known end token among the specials
  EXPECT_EQ(encode(*tok, "a"), (std::vector<int>{'a'}));  // encode() adds nothing
  j["post_processor"] = {
      {"type", "RobertaProcessing"}, {"cls", {"<|begin_of_text|>", 256}}, {"sep", {"<|end_of_text|>", 257}}};
  EXPECT_EQ(parse(j)->suffix_ids(), (std::vector<int>{257}));
}

TEST(HfTokenizer, MetaspaceByteFallbackAndTheirDecoders) {
  // SentencePiece-style BPE as tokenizer.json: Metaspace pre-tokenizer (prepend first), byte fallback.
  json vocab = {{"<unk>", 0}, {"\u2581", 1}, {"a", 2}, {"b", 3}, {"\u2581a", 4}, {"\u2581b", 5}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 6 + b;
  json decoders = json::array();
  decoders.push_back({{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}});
  decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  json merges = json::array();
  merges.push_back(json::array({"\u2581", "a"}));  // the pair form of newer files
  merges.push_back(json::array({"\u2581", "b"}));
  json j = json::object();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", true}};
  j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  j["added_tokens"] = json::array({added(0, "<unk>"), added(262, "<s>")});
  j["model"] = {{"type", "BPE"},         {"vocab", vocab},       {"merges", merges},
                {"byte_fallback", true}, {"unk_token", "<unk>"}, {"fuse_unk", true}};
  const auto tok = parse(j);
  EXPECT_EQ(encode(*tok, "a b"), (std::vector<int>{4, 5}));
  EXPECT_EQ(encode(*tok, "ab"), (std::vector<int>{4, 3}));
  // "<s>" splits first; the text after it is not at the start, so no prefix is prepended.
  EXPECT_EQ(encode(*tok, "<s>a"), (std::vector<int>{262, 2}));
  // é is not in the vocabulary: its two UTF-8 bytes as <0xC3><0xA9>.
  EXPECT_EQ(encode(*tok, "aé"), (std::vector<int>{4, 6 + 0xC3, 6 + 0xA9}));
  EXPECT_TRUE(tok->is_byte(6 + 0xC3));
  EXPECT_EQ(tok->decode(encode(*tok, "a béb")), "a béb");
  EXPECT_EQ(tok->decode({6 + 0xC3}), "\xEF\xBF\xBD");  // an unfinished byte run decodes lossy
  EXPECT_EQ(tok->unk_id(), 0);
}

TEST(HfTokenizer, DecodeStreamHoldsBackUnfinishedBytesOfByteLevelTokens) {
  t::TempDir tmp;
  t::write_file(tmp / "tokenizer.json", byte_level({{byte_char(0xE4), byte_char(0xB8)}}).dump());
  const Tokenizer tok(tmp / "tokenizer.json");
  ASSERT_TRUE(tok.is_huggingface());
  const std::vector<int> ids = tok.encode("中a");  // E4B8 (merged), AD, 'a'
  ASSERT_EQ(ids.size(), 3u);
  DecodeStream stream(tok);
  EXPECT_EQ(stream.push(ids[0]), "");
  EXPECT_EQ(stream.push(ids[1]), "中");
  EXPECT_EQ(stream.push(ids[2]), "a");
  EXPECT_EQ(stream.finish(), "");
}

TEST(HfTokenizer, PieceLengthsCountTheBytesAndCharactersOfByteLevelTokens) {
  t::TempDir tmp;
  json j = byte_level({{byte_char(0xE4), byte_char(0xB8)}, {"h", "e"}});
  j["added_tokens"] = {added(300, "<|eot_id|>")};
  t::write_file(tmp / "tokenizer.json", j.dump());
  const Tokenizer tok(tmp / "tokenizer.json");
  const std::string text = "中文 hello<|eot_id|>";
  const std::vector<int> ids = tok.encode(text);
  const auto lengths = llamatrain::data::piece_lengths(tok);
  const auto sums = lengths.sum(ids.data(), int64_t(ids.size()));
  EXPECT_EQ(sums.bytes, int64_t(text.size() - std::string("<|eot_id|>").size()));  // the special counts 0
  EXPECT_EQ(sums.chars, 8);                                                        // 中 文 ' ' h e l l o
  EXPECT_EQ(lengths.bytes[256], 2);  // E4 B8: two bytes, one character start
  EXPECT_EQ(lengths.chars[256], 1);
}

TEST(HfTokenizer, FacadePicksTheImplementationByFileAndFolder) {
  t::TempDir dir;
  const std::string spm = t::fixture("tokenizer.model");
  std::filesystem::create_directories(dir / "both");
  std::filesystem::create_directories(dir / "json");
  std::filesystem::copy_file(spm, dir / "both/tokenizer.model");
  json j = byte_level({});
  j["added_tokens"] = {added(256, "</s>")};
  t::write_file(dir / "both/tokenizer.json", j.dump());
  t::write_file(dir / "json/tokenizer.json", j.dump());
  EXPECT_FALSE(Tokenizer(dir / "both", TokenizerLibrary::kAuto).is_huggingface());
  EXPECT_TRUE(Tokenizer(dir / "both", TokenizerLibrary::kHuggingFace).is_huggingface());
  EXPECT_FALSE(Tokenizer(dir / "both", TokenizerLibrary::kSentencePiece).is_huggingface());
  EXPECT_TRUE(Tokenizer(dir / "json", TokenizerLibrary::kAuto).is_huggingface());
  const Tokenizer hf(dir / "json/tokenizer.json");
  EXPECT_EQ(hf.eos_id(), 256);
  EXPECT_EQ(hf.bos_id(), -1);
  EXPECT_TRUE(hf.is_control(256));
  // A named folder (kFile) is refused with the file to pass.
  EXPECT_NE(error_of([&] { Tokenizer x(dir / "json"); }).find(dir / "json/tokenizer.json"), std::string::npos);
  // SentencePiece-only operations say what they need.
  const std::string e = error_of([&] { (void)hf.literal(); });
  EXPECT_NE(e.find("needs a SentencePiece model"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { (void)hf.serialized_model_proto(); }).find("SentencePiece"), std::string::npos);
  EXPECT_NE(error_of([&] {
              Tokenizer x(dir / "json/tokenizer.json", TokenizerLibrary::kSentencePiece);
            }).find("library is sentencepiece"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              (void)llamatrain::data::parse_tokenizer_library("tiktoken", "model.tokenizer.library");
            }).find("tiktoken"),
            std::string::npos);
}

TEST(HfTokenizer, UnknownComponentsAndHostileFilesAreClearErrors) {
  json j = byte_level({});
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  std::string e = error_of([&] { parse(j); });
  EXPECT_NE(e.find("test/tokenizer.json"), std::string::npos) << e;
  EXPECT_NE(e.find("\"Precompiled\""), std::string::npos) << e;
  EXPECT_NE(e.find("supported: normalizers NFC"), std::string::npos) << e;
  j = byte_level({});
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(error_of([&] { parse(j); }).find("\"WordPiece\""), std::string::npos);
  j = byte_level({});
  j["decoder"] = {{"type", "CTC"}};
  EXPECT_NE(error_of([&] { parse(j); }).find("\"CTC\""), std::string::npos);
  j = byte_level({});
  j["model"]["merges"] = {"a zz"};
  EXPECT_NE(error_of([&] { parse(j); }).find("not in the vocabulary"), std::string::npos);
  j = byte_level({});
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  EXPECT_NE(error_of([&] { parse(j); }).find("does not compile"), std::string::npos);
  j = byte_level({});
  j["model"]["vocab"]["x"] = -5;
  EXPECT_NE(error_of([&] { parse(j); }).find("expected an integer"), std::string::npos);
  j = byte_level({});
  j["added_tokens"] = {{{"id", "seven"}, {"content", "<x>"}}};
  EXPECT_NE(error_of([&] { parse(j); }).find("added_tokens[0].id"), std::string::npos);
  const std::string text = byte_level({{"a", "b"}}).dump();
  for (size_t cut : {size_t(0), size_t(1), text.size() / 3, text.size() - 1}) {
    e = error_of([&] { HfTokenizer::parse(text.substr(0, cut), "", "cut.json"); });
    EXPECT_NE(e.find("cut.json"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { HfTokenizer::parse("[1, 2]", "", "list.json"); }).find("expected an object"),
            std::string::npos);
  EXPECT_NE(error_of([&] { HfTokenizer::parse(text, "{\"eos_token\": \"<nope>\"}", "c.json"); }).find("<nope>"),
            std::string::npos);
}

}  // namespace
