// `tokenizer merge`: appends the pieces of one SentencePiece model (ADD) that another (BASE) lacks,
// keeping every BASE piece at its id with its score and type, and BASE's trainer and normalizer
// specs byte for byte. Scores of the new pieces (docs/tokenizer.md derives the rule):
//   kBelow (default): below every BASE score, in ADD's order, so BPE runs all of BASE's merges
//     before any new one and new pieces keep ADD's relative priority;
//   kZero: 0 for every new piece (Chinese-LLaMA's merge script), above Llama's negative scores.
// Unless all_pieces, an ADD NORMAL piece made only of characters BASE has as pieces of their own is
// left out: such a piece could form in text BASE already covers and change its encoding. ADD's
// USER_DEFINED pieces are always added (they match wherever their text occurs, as intended).
// Padding: UNUSED pieces "<unused_K>" up to a multiple; text can never form one (checked).
#pragma once

#include <string>

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
  int added = 0, already_in_base = 0, skipped_base_chars = 0, padding = 0;
  int total = 0;
  float lowest_base_score = 0, lowest_new_score = 0;
};

// The merged model's serialized ModelProto; throws Error naming the file for an unreadable or
// malformed model.
std::string merge_tokenizers(const TokenizerMergeOptions& opt, TokenizerMergeResult* result);
// merge_tokenizers, then checks that SentencePiece loads the result and writes it to opt.output.
TokenizerMergeResult run_tokenizer_merge(const TokenizerMergeOptions& opt);

}  // namespace llamatrain::data
