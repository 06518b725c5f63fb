// `tokenizer stats`: several SentencePiece models side by side on the same documents: tokens,
// characters and bytes, overall and by script (Han, Latin, other), byte-fallback and unknown shares,
// and how many documents encode to other ids than under the first model.
// Scripts are Unicode blocks (script_of). A token counts toward the characters it covers, in equal
// shares (a token covering "▁中" is half Latin, half Han); a token covering no character (the dummy
// prefix "▁", every byte piece of a character but its last) counts toward the character at its
// position, so the byte pieces of a character all count toward that character's script.
// docs/tokenizer.md has the table this prints.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace llamatrain::data {

enum class Script : int { kHan = 0, kLatin = 1, kOther = 2 };
inline constexpr int kNumScripts = 3;
const char* script_name(Script s);  // "han", "latin", "other"
// Han: CJK ideographs (U+3400-4DBF, 4E00-9FFF, F900-FAFF, 20000-3FFFF), radicals (2E80-2FDF),
// CJK symbols and punctuation (3000-303F), CJK compatibility forms (FE30-FE4F) and halfwidth and
// fullwidth forms (FF00-FFEF); Latin: U+0000-024F (ASCII with its digits, punctuation and space,
// Latin-1, Extended A and B) and 1E00-1EFF; other: everything else.
Script script_of(char32_t cp);

struct ScriptStats {
  double tokens = 0;  // fractional: see the rule above
  int64_t chars = 0, bytes = 0;
};

struct TokenizerStats {
  std::string model;
  int vocab_size = 0;
  int64_t tokens = 0, chars = 0, bytes = 0;
  std::array<ScriptStats, kNumScripts> scripts{};
  int64_t byte_tokens = 0, unknown_tokens = 0;
  int64_t documents = 0;
  int64_t latin_documents = 0;      // documents all of whose characters are Latin
  int64_t documents_differing = 0;  // ids differ from the first model's
  int64_t latin_documents_differing = 0;
};

struct TokenizerStatsOptions {
  std::vector<std::string> models;
  std::vector<std::string> inputs;
  std::vector<std::string> json_keys = {"text"};
  int format = 0;  // TrainInputFormat
};

// Throws Error naming a model that does not load, or an input without documents.
std::vector<TokenizerStats> run_tokenizer_stats(const TokenizerStatsOptions& opt);
std::string format_stats_table(const std::vector<TokenizerStats>& stats);
nlohmann::json stats_json(const std::vector<TokenizerStats>& stats);

}  // namespace llamatrain::data
