// Vocabulary merge at the ModelProto wire level; see tokenizer_merge.h and docs/tokenizer.md.
#include "data/tokenizer_merge.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_set>

#include <unicode/uscript.h>

#include "core/error.h"
#include "core/file.h"
#include "core/utf8.h"
#include "data/model_proto.h"
#include "data/tokenizer.h"

namespace llamatrain::data {

namespace {

ModelProtoFile load_model(const std::string& path, const char* role) {
  if (!path_exists(path)) fail("{} model {}: file not found\nhint: pass a SentencePiece .model file", role, path);
  if (!is_regular_file(path))
    fail("{} model {}: not a regular file\nhint: pass a SentencePiece .model file", role, path);
  const std::string bytes = read_small_file(path, size_t{1} << 31, std::string(role) + " model");
  ModelProtoFile m = parse_model_proto(bytes, path);
  // The library must accept it too (it checks what the wire reader does not: duplicate pieces, ...).
  (void)Tokenizer::from_file_bytes(bytes, path);
  return m;
}

bool mergeable(PieceType t) { return t == PieceType::kNormal || t == PieceType::kUserDefined; }

// The code point of a UTF-8 character (utf8_chars' element); -1 for an invalid one.
UChar32 code_point(std::string_view c) {
  size_t bad = 0;
  if (c.empty() || utf8_sequence(reinterpret_cast<const unsigned char*>(c.data()), c.size(), &bad) != c.size())
    return -1;
  return UChar32(utf8_decode_at(c, 0));
}

// A letter's script (Latin, Han, Cyrillic, ...); USCRIPT_COMMON for digits, punctuation, symbols and
// spaces, USCRIPT_INHERITED for combining marks.
UScriptCode script_of(UChar32 cp) {
  UErrorCode e = U_ZERO_ERROR;
  const UScriptCode s = cp < 0 ? USCRIPT_UNKNOWN : uscript_getScript(cp, &e);
  return U_FAILURE(e) ? USCRIPT_UNKNOWN : s;
}

bool is_letter_script(UScriptCode s) { return s != USCRIPT_COMMON && s != USCRIPT_INHERITED && s != USCRIPT_UNKNOWN; }

// The line breaks, tabs and other control characters that documents of any script hold (ASCII's, and
// Unicode's line and paragraph separators); SentencePiece's ▁ is a symbol, not one. A script's own
// spaces (U+3000, the ideographic space) are its text, not every document's.
bool is_space_or_control(UChar32 cp) {
  return (cp >= 0 && cp < 0x20) || cp == 0x7F || cp == 0x85 || cp == 0x2028 || cp == 0x2029 || cp == ' ';
}

// The scripts BASE merges: those of the letters of BASE's pieces of two or more characters (▁ aside),
// each piece counted once per script. A script that more than 1% of those pieces hold is BASE's own.
std::set<UScriptCode> own_scripts(const ModelProtoFile& base) {
  std::map<UScriptCode, int> pieces_with;
  int multi = 0;
  for (const auto& p : base.pieces) {
    if (!mergeable(p.type)) continue;
    std::set<UScriptCode> scripts;
    int chars = 0;
    for (std::string_view c : utf8_chars(p.piece)) {
      if (c == "\u2581") continue;
      chars++;
      if (const UScriptCode s = script_of(code_point(c)); is_letter_script(s)) scripts.insert(s);
    }
    if (chars < 2) continue;
    multi++;
    for (UScriptCode s : scripts) pieces_with[s]++;
  }
  std::set<UScriptCode> own;
  for (const auto& [s, n] : pieces_with)
    if (n * 100 > multi) own.insert(s);
  return own;
}

// True when BPE could form `text` by merging two adjacent symbols: some split into a left and a
// right part each of which is a single character or a piece.
bool formable(std::string_view text, const std::unordered_set<std::string>& pieces) {
  const auto cps = utf8_chars(text);
  size_t offset = 0;
  for (size_t i = 0; i + 1 < cps.size(); ++i) {
    offset += cps[i].size();
    const std::string left(text.substr(0, offset)), right(text.substr(offset));
    const bool l = i == 0 || pieces.count(left);
    const bool r = i + 2 == cps.size() || pieces.count(right);
    if (l && r) return true;
  }
  return cps.size() == 1;
}

}  // namespace

std::string merge_tokenizers(const TokenizerMergeOptions& opt, TokenizerMergeResult* res) {
  ModelProtoFile base = load_model(opt.base, "base");
  const ModelProtoFile add = load_model(opt.add, "addition");
  *res = {};
  res->base_pieces = static_cast<int>(base.pieces.size());

  std::unordered_set<std::string> have;        // every BASE piece's text
  std::unordered_set<std::string> base_chars;  // BASE's single-character NORMAL / USER_DEFINED pieces
  float lowest = 0.0f;
  for (const auto& p : base.pieces) {
    have.insert(p.piece);
    if (mergeable(p.type)) {
      lowest = std::min(lowest, p.score);
      if (utf8_chars(p.piece).size() == 1) base_chars.insert(p.piece);
    }
  }
  res->lowest_base_score = lowest;
  const std::set<UScriptCode> own = own_scripts(base);
  std::set<std::string> new_scripts;

  // New pieces in ADD's id order (its BPE merge order), scored by the chosen rule: each below the
  // last by 1, or by one float32 step where 1 rounds away (below -2^24).
  float next_below = std::min(lowest - 1.0f, std::nextafter(lowest, -INFINITY));
  for (const auto& p : add.pieces) {
    if (!mergeable(p.type)) continue;  // ADD's unknown, control and byte pieces are never taken
    ++res->add_candidates;
    if (have.count(p.piece)) {
      ++res->already_in_base;
      continue;
    }
    if (!opt.all_pieces && p.type == PieceType::kNormal) {  // user-defined symbols are always wanted
      // Wanted: a piece that only text of a new script, or text BASE spells in bytes, can hold.
      bool wanted = false, space = false;
      for (std::string_view c : utf8_chars(p.piece)) {
        if (c == "\u2581") continue;
        const UChar32 cp = code_point(c);
        const UScriptCode s = script_of(cp);
        if (is_letter_script(s) && !own.count(s)) {
          wanted = true;
          new_scripts.insert(uscript_getName(s));
        }
        const bool in_base = base_chars.count(std::string(c)) > 0;
        if (!in_base && is_space_or_control(cp)) space = true;
        if (!in_base && !is_space_or_control(cp)) wanted = true;
      }
      if (space) {  // a line break or tab: every document of BASE's text has them
        ++res->skipped_whitespace;
        continue;
      }
      if (!wanted) {
        ++res->skipped_base_chars;
        continue;
      }
    }
    ModelPiece n;
    n.piece = p.piece;
    n.type = p.type;
    n.score = opt.new_scores == NewScores::kZero ? 0.0f : next_below;
    next_below = std::min(next_below - 1.0f, std::nextafter(next_below, -INFINITY));
    res->lowest_new_score = n.score;
    have.insert(n.piece);
    base.pieces.push_back(std::move(n));
    ++res->added;
  }

  if (opt.pad_to_multiple > 1) {
    const int m = opt.pad_to_multiple;
    const int target = (static_cast<int>(base.pieces.size()) + m - 1) / m * m;
    for (int k = 0; static_cast<int>(base.pieces.size()) < target; ++k) {
      ModelPiece n;
      n.piece = "<unused_" + std::to_string(k) + ">";
      if (have.count(n.piece))
        fail("--pad-to-multiple: the merged vocabulary already has a piece {}, expected the padding names to be "
             "free\nhint: pad the vocabulary before it gains such pieces, or drop --pad-to-multiple",
             n.piece);
      n.type = PieceType::kUnused;
      n.score = 0.0f;
      have.insert(n.piece);
      base.pieces.push_back(std::move(n));
      ++res->padding;
    }
    // An UNUSED piece that BPE could form would be merged and then split again, which can still
    // change the merges around it; these names cannot form from any two symbols.
    for (size_t i = base.pieces.size() - res->padding; i < base.pieces.size(); ++i)
      if (formable(base.pieces[i].piece, have))
        fail("--pad-to-multiple: the padding piece {} could be formed by BPE from two pieces of the merged "
             "vocabulary, expected padding that no text encodes to\nhint: drop --pad-to-multiple and pad the model "
             "vocabulary with model.make_vocab_size_divisible_by instead",
             base.pieces[i].piece);
  }
  res->total = static_cast<int>(base.pieces.size());
  res->new_scripts.assign(new_scripts.begin(), new_scripts.end());
  return serialize_model_proto(base);
}

TokenizerMergeResult run_tokenizer_merge(const TokenizerMergeOptions& opt) {
  if (opt.output.empty()) fail("tokenizer merge: -o OUT.model is required\nhint: e.g. -o merged.model");
  check_output_file(opt.output, "-o");
  TokenizerMergeResult res;
  const std::string bytes = merge_tokenizers(opt, &res);
  (void)Tokenizer::from_file_bytes(bytes, opt.output);  // the library accepts what we wrote
  write_file_atomic(opt.output, bytes);
  return res;
}

}  // namespace llamatrain::data
