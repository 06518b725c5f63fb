// `tokenizer merge`: appends the pieces of one SentencePiece model (ADD) that another (BASE) lacks,
// keeping every BASE piece at its id with its score and type, and BASE's trainer and normalizer
// specs byte for byte. Scores of the new pieces (docs/tokenizer.md derives the rule):
//   kBelow (default): below every BASE score, in ADD's order, each a distinct float32 (below Llama
//     2's -1e9 a step of 1 would round away), so BPE runs all of BASE's merges before any new one
//     and new pieces keep ADD's relative priority;
//   kZero: 0 for every new piece (Chinese-LLaMA's merge script), above Llama's negative scores.
// Unless all_pieces, an ADD NORMAL piece is added only when it holds a letter of a script new to
// BASE (one that at most 1% of BASE's multi-character pieces hold: Han for Llama 2, which has 700
// Han characters but no Han piece of two) or a visible character BASE has no piece for; the others
// (BASE's letters, digits and punctuation only, or line breaks, tabs and spaces BASE spells in bytes)
// could form in text BASE already encodes and change its encoding, so they are left out. ADD's
// USER_DEFINED pieces are always added (they match wherever their text occurs, as intended).
// Padding: UNUSED pieces "<unused_K>" up to a multiple; text can never form one (checked).
#pragma once

#include <string>
#include <vector>

namespace llamatrain::data {

enum class NewScores { kBelow, kZero };

struct TokenizerMergeOptions {
  std::string base, add, output;
  NewScores new_scores = NewScores::kBelow;
  bool all_pieces = false;
  int pad_to_multiple = 0;  // 0 or 1: no padding
};

struct TokenizerMergeResult {
  int base_pieces = 0, add_candidates = 0;  // ADD's NORMAL and USER_DEFINED pieces
  int added = 0, already_in_base = 0, padding = 0;
  int skipped_base_chars = 0;  // BASE's letters (of its own scripts), digits and punctuation only
  int skipped_whitespace = 0;  // a line break, tab, other control character or ASCII space BASE has no piece for
  std::vector<std::string> new_scripts;  // the scripts (ICU names) that count as new to BASE
  int total = 0;
  float lowest_base_score = 0, lowest_new_score = 0;
};

// The merged model's serialized ModelProto; throws Error naming the file for an unreadable or
// malformed model.
std::string merge_tokenizers(const TokenizerMergeOptions& opt, TokenizerMergeResult* result);
// merge_tokenizers, then checks that SentencePiece loads the result and writes it to opt.output.
TokenizerMergeResult run_tokenizer_merge(const TokenizerMergeOptions& opt);

}  // namespace llamatrain::data
