// tokenizer.json reader and encoder; see hf_tokenizer.h. The pipeline per text, as in `tokenizers`:
// split out added tokens (leftmost-longest, in the raw text), normalize each remaining section, split
// out the normalized added tokens, pre-tokenize, then BPE each pre-token. In a byte-level file
// (a ByteLevel pre-tokenizer) the model works on raw bytes: the vocabulary and merges are mapped back
// through GPT-2's byte-to-unicode table at load, so a pre-token is never rewritten into that alphabet.
#include "data/hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/bytestream.h>
#include <unicode/casemap.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/file.h"

namespace llamatrain::data {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// UTF-8

namespace {

// The byte of a "<0xXX>" piece, -1 for any other string.
int byte_piece_value(std::string_view p) {
  if (p.size() != 6 || !p.starts_with("<0x") || p[5] != '>') return -1;
  auto hex = [](char ch) {
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                    : -1;
  };
  const int hi = hex(p[3]), lo = hex(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string_view trim_end_space(std::string_view s) {
  while (!s.empty()) {
    size_t i = s.size() - 1;
    while (i > 0 && utf8_continuation(static_cast<unsigned char>(s[i]))) --i;
    if (!unicode_white_space(utf8_decode_at(s, i))) break;
    s = s.substr(0, i);
  }
  return s;
}

std::string_view trim_start_space(std::string_view s) {
  while (!s.empty() && unicode_white_space(utf8_decode_at(s, 0)))
    s.remove_prefix(utf8_char_length(static_cast<unsigned char>(s[0])));
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Components

namespace {

// GPT-2's byte-to-unicode table: printable Latin-1 bytes stand for themselves, the others for 256+n.
struct ByteTable {
  uint32_t byte_to_cp[256];
  int cp_to_byte[512];
  ByteTable() {
    std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), -1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_cp[b] = printable ? uint32_t(b) : uint32_t(256 + n++);
      cp_to_byte[byte_to_cp[b]] = b;
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

// A token string in the byte-level alphabet back to raw bytes; false if a character is outside it.
bool byte_level_to_bytes(std::string_view s, std::string* out) {
  out->clear();
  if (!utf8_valid(s)) return false;
  for (size_t i = 0; i < s.size(); i += utf8_char_length(static_cast<unsigned char>(s[i]))) {
    const uint32_t cp = utf8_decode_at(s, i);
    const int b = cp < 512 ? byte_table().cp_to_byte[cp] : -1;
    if (b < 0) return false;
    out->push_back(char(b));
  }
  return true;
}

// A compiled PCRE2 pattern (UTF, Unicode properties, JIT when the library has it).
class Regex {
 public:
  Regex(const std::string& pattern, bool literal, const std::string& where) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail("{}: regex {} does not compile at offset {} ({})\nhint: the pattern must be a valid Oniguruma/PCRE "
           "regex",
           where, json(pattern).dump(), off, reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is absent
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // f(begin, end) for each non-overlapping match of valid UTF-8 `s`, left to right.
  template <class F>
  void for_each_match(std::string_view s, F&& f) const {
    thread_local struct Md {
      pcre2_match_data* md = pcre2_match_data_create(32, nullptr);
      ~Md() { pcre2_match_data_free(md); }
    } md;
    size_t at = 0;
    while (at <= s.size()) {
      const int rc =
          pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), at, PCRE2_NO_UTF_CHECK, md.md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {  // a match or depth limit: a pattern that backtracks without end on this text
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fail("tokenizer regex: matching failed ({}) on a text of {} bytes\nhint: the tokenizer.json's pattern "
             "backtracks too much; simplify it",
             reinterpret_cast<const char*>(msg), s.size());
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.md);
      const size_t b = ov[0], e = ov[1];
      if (e > b) f(b, e);
      at = e > b ? e : e + (e < s.size() ? utf8_char_length(static_cast<unsigned char>(s[e])) : 1);
    }
  }

 private:
  pcre2_code* code_ = nullptr;
};

// A piece of text on its way through the pre-tokenizers; begin: its offset in the original text
// (of the whole section when !exact, the text then differing from the original bytes).
struct Piece {
  std::string text;
  uint32_t begin = 0;
  bool exact = true;
};

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Splits p by the matches of re as `tokenizers`' NormalizedString::split does.
void split_piece(const Piece& p, const Regex& re, Behavior behavior, bool invert, std::vector<Piece>* out) {
  struct Seg {
    size_t b, e;
    bool match;
  };
  std::vector<Seg> segs;
  size_t prev = 0;
  re.for_each_match(p.text, [&](size_t b, size_t e) {
    if (b > prev) segs.push_back({prev, b, false});
    segs.push_back({b, e, true});
    prev = e;
  });
  if (prev < p.text.size()) segs.push_back({prev, p.text.size(), false});
  if (invert)
    for (auto& s : segs) s.match = !s.match;
  std::vector<Seg> res;
  switch (behavior) {
    case Behavior::Removed:
      for (const auto& s : segs)
        if (!s.match) res.push_back(s);
      break;
    case Behavior::Isolated: res = segs; break;
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const auto& s : segs) {
        if (s.match && !prev_match && !res.empty())
          res.back().e = s.e;
        else
          res.push_back(s);
        prev_match = s.match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->match && !prev_match && !res.empty())
          res.back().b = it->b;
        else
          res.push_back(*it);
        prev_match = it->match;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case Behavior::Contiguous:
      for (const auto& s : segs) {
        if (!res.empty() && res.back().match == s.match)
          res.back().e = s.e;
        else
          res.push_back(s);
      }
      break;
  }
  for (const auto& s : res) {
    if (s.e <= s.b) continue;
    out->push_back({p.text.substr(s.b, s.e - s.b), p.exact ? uint32_t(p.begin + s.b) : p.begin, p.exact});
  }
}

std::string replace_all(std::string_view s, const Regex& re, std::string_view with) {
  std::string out;
  size_t prev = 0;
  re.for_each_match(s, [&](size_t b, size_t e) {
    out.append(s.substr(prev, b - prev));
    out.append(with);
    prev = e;
  });
  out.append(s.substr(prev));
  return out;
}

const char* kSupported =
    "supported: normalizers NFC NFD NFKC NFKD Lowercase Strip Prepend Replace Sequence; pre-tokenizers Split "
    "ByteLevel Metaspace Digits Sequence; model BPE; post-processors TemplateProcessing ByteLevel RobertaProcessing "
    "BertProcessing Sequence; decoders ByteLevel Metaspace ByteFallback Fuse Strip Replace Sequence";

}  // namespace

// ---------------------------------------------------------------------------------------------
// The tokenizer

struct Normalizer {
  enum Kind { NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace } kind;
  std::string text;  // Prepend's text, Replace's content
  std::shared_ptr<Regex> re;
  bool left = false, right = false;
};

struct PreTokenizer {
  enum Kind { Split, ByteLevel, Metaspace } kind;
  std::shared_ptr<Regex> re;  // Split's pattern; ByteLevel's when use_regex
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;
  std::string replacement;  // Metaspace
  int prepend = 0;          // Metaspace: 0 never, 1 first, 2 always
  bool split = true;        // Metaspace
};

struct Decoder {
  enum Kind { ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace } kind;
  std::string text;  // Metaspace's replacement, Strip's content, Replace's content
  std::shared_ptr<Regex> re;
  int prepend = 0;
  int start = 0, stop = 0;
};

struct AddedToken {
  std::string content;
  int id = 0;
  bool special = false, normalized = false, lstrip = false, rstrip = false;
};

// Added tokens of one kind (raw or normalized), found leftmost-longest.
struct AddedMatcher {
  std::vector<int> tokens;  // indices into Impl::added, longest content first
  bool first_byte[256] = {};
  // The leftmost-longest match in s at or after `from`: its token index, or -1.
  int find(std::string_view s, size_t from, size_t* at, const std::vector<AddedToken>& added) const {
    if (tokens.empty()) return -1;
    for (size_t i = from; i < s.size(); ++i) {
      if (!first_byte[static_cast<unsigned char>(s[i])]) continue;
      for (int t : tokens) {
        const std::string& c = added[t].content;
        if (s.compare(i, c.size(), c) == 0) {
          *at = i;
          return t;
        }
      }
    }
    return -1;
  }
};

struct HfTokenizer::Impl {
  std::string name;
  uint64_t serial = 0;                            // tells the thread-local caches of two tokenizers apart
  std::vector<std::string> pieces;                // by id, as written in the file
  std::vector<std::string> model_bytes;           // by id: the model-space string (raw bytes in a byte-level file)
  std::vector<signed char> kind;                  // by id: 0 none, 1 vocabulary, 2 added
  std::unordered_map<std::string, int> vocab;     // model space -> id
  std::unordered_map<std::string, int> by_piece;  // the file's strings (added tokens first) -> id
  struct Merge {
    int rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges;  // (left id << 32 | right id) -> rank and merged id
  int byte_sym[256];                           // byte-level: the id of each single byte
  int byte_fallback[256];                      // the <0xXX> pieces, -1 where missing
  bool byte_level = false, ignore_merges = false, use_byte_fallback = false, fuse_unk = false;
  int unk = -1;
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pretokenizers;
  std::vector<Decoder> decoders;
  bool has_decoder = false;
  std::vector<AddedToken> added;
  std::vector<int> added_index;  // by id: index into added, -1
  AddedMatcher raw_added, normalized_added;

  // The id of a string as the file writes it (added tokens first), -1 when none.
  int piece_id(const std::string& piece) const {
    auto it = by_piece.find(piece);
    return it == by_piece.end() ? -1 : it->second;
  }
  bool special(int id) const {
    return id >= 0 && id < int(added_index.size()) && added_index[id] >= 0 && added[added_index[id]].special;
  }
  // Makes room for id in the tables by id.
  void grow(int id) {
    if (id < int(pieces.size())) return;
    pieces.resize(id + 1);
    model_bytes.resize(id + 1);
    kind.resize(id + 1, 0);
  }
  void normalize(std::string* s) const;
  void pre_tokenize(Piece section, bool first, std::vector<Piece>* out) const;
  void bpe(std::string_view word, std::vector<int>* out) const;
  // The symbols BPE starts from: bytes (byte-level) or characters; an unknown one becomes its <0xXX>
  // pieces (byte_fallback) or the unknown token (fused with a preceding one under fuse_unk), or is dropped.
  std::vector<int> initial_symbols(std::string_view word) const;
  int merge_rank(int a, int b, int* merged) const;  // INT_MAX when the pair does not merge
  void merge_short(std::vector<int>* sym) const;    // for words of up to 128 symbols
  void merge_long(std::vector<int> sym, std::vector<int>* out) const;
  void model_encode(std::string_view word, std::vector<int>* out) const;
  uint32_t id_bytes(int id) const;  // how many text bytes a byte-level id stands for
};

namespace {

std::atomic<uint64_t> next_serial{1};

struct Ctx {
  const std::string& name;
  [[noreturn]] void bad(const std::string& where, const std::string& what) const {
    fail("tokenizer {}: {} {}\nhint: pass a tokenizer.json written by Hugging Face tokenizers", name, where, what);
  }
  const json& obj(const json& j, const std::string& where) const {
    if (!j.is_object()) bad(where, fmt::format("is {}, expected an object", j.type_name()));
    return j;
  }
  std::string str(const json& j, const char* key, const std::string& where, const char* dflt = nullptr) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (dflt) return dflt;
      bad(where + "." + key, "is missing, expected a string");
    }
    if (!it->is_string()) bad(where + "." + key, fmt::format("is {}, expected a string", it->type_name()));
    return it->get<std::string>();
  }
  bool boolean(const json& j, const char* key, const std::string& where, bool dflt) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) bad(where + "." + key, fmt::format("is {}, expected true or false", it->type_name()));
    return it->get<bool>();
  }
  int integer(const json& j, const char* key, const std::string& where, int dflt, int lo, int hi) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (dflt != INT_MIN) return dflt;
      bad(where + "." + key, "is missing, expected an integer");
    }
    if (!it->is_number_integer()) bad(where + "." + key, fmt::format("is {}, expected an integer", it->type_name()));
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) bad(where + "." + key, fmt::format("is {}, expected {}..{}", v, lo, hi));
    return int(v);
  }
  const json& arr(const json& j, const char* key, const std::string& where) const {
    auto it = j.find(key);
    if (it == j.end() || !it->is_array()) bad(where + "." + key, "is missing or not a list");
    return *it;
  }
  [[noreturn]] void unsupported(const std::string& where, const std::string& type) const {
    fail("tokenizer {}: {} has type {}, which llamatrain does not read\nhint: {}", name, where, json(type).dump(),
         kSupported);
  }
  // A {"String": s} or {"Regex": r} pattern.
  std::shared_ptr<Regex> pattern(const json& j, const std::string& where) const {
    auto it = j.find("pattern");
    if (it == j.end() || !it->is_object())
      bad(where + ".pattern", "is missing, expected {\"String\": ..} or {\"Regex\": ..}");
    if (auto s = it->find("String"); s != it->end() && s->is_string())
      return std::make_shared<Regex>(s->get<std::string>(), true, "tokenizer " + name + " " + where);
    if (auto r = it->find("Regex"); r != it->end() && r->is_string())
      return std::make_shared<Regex>(r->get<std::string>(), false, "tokenizer " + name + " " + where);
    bad(where + ".pattern", "is neither {\"String\": ..} nor {\"Regex\": ..}");
  }
  int prepend_scheme(const json& j, const std::string& where) const {
    if (auto it = j.find("prepend_scheme"); it != j.end() && !it->is_null()) {
      const std::string s = str(j, "prepend_scheme", where);
      if (s == "always") return 2;
      if (s == "first") return 1;
      if (s == "never") return 0;
      bad(where + ".prepend_scheme", fmt::format("is {}, expected always, first or never", json(s).dump()));
    }
    return boolean(j, "add_prefix_space", where, true) ? 2 : 0;
  }
};

std::string type_of(const Ctx& c, const json& j, const std::string& where) {
  c.obj(j, where);
  return c.str(j, "type", where);
}

// A section's type; for a "Sequence", nullopt after read(element, its where) of each element of
// j[list_key].
template <class F>
std::optional<std::string> type_or_sequence(const Ctx& c, const json& j, const std::string& where, const char* list_key,
                                            F&& read) {
  std::string t = type_of(c, j, where);
  if (t != "Sequence") return t;
  const json& list = c.arr(j, list_key, where);
  for (size_t i = 0; i < list.size(); ++i) read(list[i], fmt::format("{}.{}[{}]", where, list_key, i));
  return std::nullopt;
}

// A Replace normalizer's or decoder's pattern and content.
void read_replace(const Ctx& c, const json& j, const std::string& where, std::shared_ptr<Regex>* re,
                  std::string* content) {
  *re = c.pattern(j, where);
  *content = c.str(j, "content", where);
}

void read_normalizer(const Ctx& c, const json& j, const std::string& where, std::vector<Normalizer>* out) {
  if (j.is_null()) return;
  const auto t = type_or_sequence(c, j, where, "normalizers",
                                  [&](const json& e, const std::string& w) { read_normalizer(c, e, w, out); });
  if (!t) return;
  Normalizer n{};
  if (*t == "NFC")
    n.kind = Normalizer::NFC;
  else if (*t == "NFD")
    n.kind = Normalizer::NFD;
  else if (*t == "NFKC")
    n.kind = Normalizer::NFKC;
  else if (*t == "NFKD")
    n.kind = Normalizer::NFKD;
  else if (*t == "Lowercase")
    n.kind = Normalizer::Lowercase;
  else if (*t == "Strip") {
    n.kind = Normalizer::Strip;
    n.left = c.boolean(j, "strip_left", where, true);
    n.right = c.boolean(j, "strip_right", where, true);
  } else if (*t == "Prepend") {
    n.kind = Normalizer::Prepend;
    n.text = c.str(j, "prepend", where);
  } else if (*t == "Replace") {
    n.kind = Normalizer::Replace;
    read_replace(c, j, where, &n.re, &n.text);
  } else {
    c.unsupported(where, *t);
  }
  out->push_back(std::move(n));
}

const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Behavior read_behavior(const Ctx& c, const json& j, const std::string& where) {
  const std::string b = c.str(j, "behavior", where, "Isolated");
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  c.bad(where + ".behavior", fmt::format("is {}, expected Removed, Isolated, MergedWithPrevious, "
                                         "MergedWithNext or Contiguous",
                                         json(b).dump()));
}

void read_pretokenizer(const Ctx& c, const json& j, const std::string& where, std::vector<PreTokenizer>* out,
                       bool* byte_level) {
  if (j.is_null()) return;
  const auto t = type_or_sequence(c, j, where, "pretokenizers", [&](const json& e, const std::string& w) {
    read_pretokenizer(c, e, w, out, byte_level);
  });
  if (!t) return;
  PreTokenizer p{};
  if (*t == "Split") {
    p.kind = PreTokenizer::Split;
    p.re = c.pattern(j, where);
    p.invert = c.boolean(j, "invert", where, false);
    p.behavior = read_behavior(c, j, where);
  } else if (*t == "ByteLevel") {
    p.kind = PreTokenizer::ByteLevel;
    p.add_prefix_space = c.boolean(j, "add_prefix_space", where, true);
    if (c.boolean(j, "use_regex", where, true)) p.re = std::make_shared<Regex>(kGpt2Regex, false, "ByteLevel");
    *byte_level = true;
  } else if (*t == "Metaspace") {
    p.kind = PreTokenizer::Metaspace;
    p.replacement = c.str(j, "replacement", where, "\u2581");
    p.prepend = c.prepend_scheme(j, where);
    p.split = c.boolean(j, "split", where, true);
    p.re = std::make_shared<Regex>(p.replacement, true, "Metaspace");
  } else if (*t == "Digits") {
    p.kind = PreTokenizer::Split;
    const bool individual = c.boolean(j, "individual_digits", where, false);
    p.re = std::make_shared<Regex>("\\p{N}", false, "Digits");
    p.behavior = individual ? Behavior::Isolated : Behavior::Contiguous;
  } else {
    c.unsupported(where, *t);
  }
  out->push_back(std::move(p));
}

void read_decoder(const Ctx& c, const json& j, const std::string& where, std::vector<Decoder>* out) {
  const auto t = type_or_sequence(c, j, where, "decoders",
                                  [&](const json& e, const std::string& w) { read_decoder(c, e, w, out); });
  if (!t) return;
  Decoder d{};
  if (*t == "ByteLevel")
    d.kind = Decoder::ByteLevel;
  else if (*t == "ByteFallback")
    d.kind = Decoder::ByteFallback;
  else if (*t == "Fuse")
    d.kind = Decoder::Fuse;
  else if (*t == "Metaspace") {
    d.kind = Decoder::Metaspace;
    d.text = c.str(j, "replacement", where, "\u2581");
    d.prepend = c.prepend_scheme(j, where);
  } else if (*t == "Strip") {
    d.kind = Decoder::Strip;
    d.text = c.str(j, "content", where, " ");
    d.start = c.integer(j, "start", where, 0, 0, 1 << 20);
    d.stop = c.integer(j, "stop", where, 0, 0, 1 << 20);
  } else if (*t == "Replace") {
    d.kind = Decoder::Replace;
    read_replace(c, j, where, &d.re, &d.text);
  } else {
    c.unsupported(where, *t);
  }
  out->push_back(std::move(d));
}

// The ids of a TemplateProcessing's single-sequence item `item` (a SpecialToken; one named in
// special_tokens may stand for several ids).
std::vector<int> template_token_ids(const Ctx& c, const json& item, const json& specials, const std::string& w,
                                    const std::string& where, const HfTokenizer::Impl& impl) {
  auto st = item.find("SpecialToken");
  if (st == item.end() || !st->is_object()) c.bad(w, "is neither a Sequence nor a SpecialToken");
  const std::string name = c.str(*st, "id", w + ".SpecialToken");
  std::vector<int> ids;
  if (auto sp = specials.find(name);
      sp != specials.end() && sp->is_object() && sp->contains("ids") && (*sp)["ids"].is_array()) {
    for (const auto& v : (*sp)["ids"]) {
      if (!v.is_number_integer()) c.bad(where + ".special_tokens", "has an id that is not an integer");
      ids.push_back(v.get<int>());
    }
  } else if (const int id = impl.piece_id(name); id >= 0) {
    ids.push_back(id);
  } else {
    c.bad(w, fmt::format("names special token {}, which the file does not define", json(name).dump()));
  }
  return ids;
}

// TemplateProcessing's "single": the special tokens before the sequence ($A) go to prefix, those
// after it to suffix.
void read_template(const Ctx& c, const json& j, const std::string& where, const HfTokenizer::Impl& impl,
                   std::vector<int>* prefix, std::vector<int>* suffix) {
  const json& single = c.arr(j, "single", where);
  const json specials = j.value("special_tokens", json::object());
  bool seen_a = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string w = fmt::format("{}.single[{}]", where, i);
    c.obj(single[i], w);
    if (single[i].contains("Sequence")) {
      seen_a = true;
      continue;
    }
    const std::vector<int> ids = template_token_ids(c, single[i], specials, w, where, impl);
    std::vector<int>* side = seen_a ? suffix : prefix;
    side->insert(side->end(), ids.begin(), ids.end());
  }
}

// The ids a post-processor adds around a single sequence.
void read_post(const Ctx& c, const json& j, const std::string& where, const HfTokenizer::Impl& impl,
               std::vector<int>* prefix, std::vector<int>* suffix) {
  if (j.is_null()) return;
  const auto t = type_or_sequence(c, j, where, "processors", [&](const json& e, const std::string& w) {
    read_post(c, e, w, impl, prefix, suffix);
  });
  if (!t) return;
  auto token_id = [&](const json& pair, const std::string& w) {  // ["<s>", 1]
    if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer()) c.bad(w, "is not [token, id]");
    return pair[1].get<int>();
  };
  if (*t == "ByteLevel") return;  // adds no ids
  if (*t == "RobertaProcessing" || *t == "BertProcessing") {
    prefix->push_back(token_id(j.value("cls", json()), where + ".cls"));
    suffix->push_back(token_id(j.value("sep", json()), where + ".sep"));
  } else if (*t == "TemplateProcessing") {
    read_template(c, j, where, impl, prefix, suffix);
  } else {
    c.unsupported(where, *t);
  }
}

// tokenizer_config.json's "bos_token" and the like: a string, {"content": s} or null.
std::optional<std::optional<std::string>> config_token(const json& cfg, const char* key) {
  if (!cfg.is_object()) return std::nullopt;
  auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return std::optional<std::string>((*it)["content"].get<std::string>());
  return std::optional<std::string>();
}

constexpr int kMaxId = (1 << 24) - 1;

// tokenizer.json and tokenizer_config.json ("" when there is none: null) as JSON.
std::pair<json, json> parse_documents(std::string_view tokenizer_json, std::string_view config_json,
                                      const std::string& name) {
  std::pair<json, json> out;
  try {
    out.first = json::parse(tokenizer_json);
  } catch (const json::exception& e) {
    fail("tokenizer {}: not valid JSON ({})\nhint: pass a tokenizer.json written by Hugging Face tokenizers", name,
         e.what());
  }
  if (config_json.empty()) return out;
  try {
    out.second = json::parse(config_json);
  } catch (const json::exception& e) {
    fail("tokenizer {}: tokenizer_config.json beside it is not valid JSON ({})\nhint: fix or remove it", name,
         e.what());
  }
  return out;
}

// The "model" section's kind (BPE only) and options; returns the section.
const json& read_model_options(const Ctx& c, const json& j, HfTokenizer::Impl* im) {
  c.obj(j, "(top level)");
  if (!j.contains("model")) c.bad("model", "is missing, expected the BPE model");
  const json& m = c.obj(j["model"], "model");
  const std::string mtype = c.str(m, "type", "model", "BPE");
  if (mtype != "BPE") c.unsupported("model", mtype);
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0)
    c.bad("model.dropout", "is set, expected null (BPE dropout is for training, not for encoding)");
  if (!c.str(m, "continuing_subword_prefix", "model", "").empty() ||
      !c.str(m, "end_of_word_suffix", "model", "").empty())
    c.bad("model", "has a continuing_subword_prefix or end_of_word_suffix, which llamatrain does not read "
                   "(byte-level and SentencePiece-style BPE have none)");
  im->ignore_merges = c.boolean(m, "ignore_merges", "model", false);
  im->use_byte_fallback = c.boolean(m, "byte_fallback", "model", false);
  im->fuse_unk = c.boolean(m, "fuse_unk", "model", false);
  return m;
}

// The text pipeline around the model: normalizer, pre-tokenizer and decoder.
void read_pipeline(const Ctx& c, const json& j, HfTokenizer::Impl* im) {
  if (j.contains("normalizer")) read_normalizer(c, j["normalizer"], "normalizer", &im->normalizers);
  if (j.contains("pre_tokenizer"))
    read_pretokenizer(c, j["pre_tokenizer"], "pre_tokenizer", &im->pretokenizers, &im->byte_level);
  if (j.contains("decoder") && !j["decoder"].is_null()) {
    read_decoder(c, j["decoder"], "decoder", &im->decoders);
    im->has_decoder = true;
  }
}

// model.vocab, in model space (raw bytes in a byte-level file).
void read_vocab(const Ctx& c, const json& m, HfTokenizer::Impl* im) {
  auto vit = m.find("vocab");
  if (vit == m.end() || !vit->is_object()) c.bad("model.vocab", "is missing or not an object");
  std::string bytes;
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxId)
      c.bad("model.vocab",
            fmt::format("gives {} the id {}, expected an integer 0..{}", json(it.key()).dump(), it->dump(), kMaxId));
    const int id = it->get<int>();
    im->grow(id);
    im->pieces[id] = it.key();
    im->kind[id] = 1;
    std::string key = it.key();
    if (im->byte_level && byte_level_to_bytes(key, &bytes)) key = bytes;
    im->model_bytes[id] = key;
    im->vocab[key] = id;
  }
  for (int id = 0; id < int(im->pieces.size()); ++id)
    if (im->kind[id] == 1) im->by_piece.emplace(im->pieces[id], id);
}

// One merge, "a b" or ["a", "b"], as its two pieces.
std::pair<std::string, std::string> merge_pair(const Ctx& c, const json& merge, size_t r) {
  if (merge.is_string()) {
    const std::string s = merge.get<std::string>();
    const size_t sp = s.find(' ');
    if (sp == std::string::npos)
      c.bad(fmt::format("model.merges[{}]", r), fmt::format("is {}, expected \"a b\"", json(s).dump()));
    return {s.substr(0, sp), s.substr(sp + 1)};
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string())
    return {merge[0].get<std::string>(), merge[1].get<std::string>()};
  c.bad(fmt::format("model.merges[{}]", r), "is neither \"a b\" nor [\"a\", \"b\"]");
}

// model.merges: each pair of vocabulary ids to its rank and merged id.
void read_merges(const Ctx& c, const json& m, HfTokenizer::Impl* im) {
  if (!m.contains("merges") || m["merges"].is_null()) return;
  const json& merges = m["merges"];
  if (!merges.is_array()) c.bad("model.merges", "is not a list");
  im->merges.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto [a, b] = merge_pair(c, merges[r], r);
    const int ia = im->piece_id(a), ib = im->piece_id(b), merged = im->piece_id(a + b);
    if (ia < 0 || ib < 0 || merged < 0)
      c.bad(fmt::format("model.merges[{}]", r),
            fmt::format("merges {} and {}, but {} is not in the vocabulary", json(a).dump(), json(b).dump(),
                        json(ia < 0   ? a
                             : ib < 0 ? b
                                      : a + b)
                            .dump()));
    im->merges.emplace((uint64_t(uint32_t(ia)) << 32) | uint32_t(ib), HfTokenizer::Impl::Merge{int(r), merged});
  }
}

// model.unk_token, and the ids of the single bytes and of the <0xXX> pieces.
void read_unknown_and_bytes(const Ctx& c, const json& m, HfTokenizer::Impl* im) {
  const std::string unk = c.str(m, "unk_token", "model", "");
  if (!unk.empty()) {
    im->unk = im->piece_id(unk);
    if (im->unk < 0) c.bad("model.unk_token", fmt::format("is {}, which is not in the vocabulary", json(unk).dump()));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = im->vocab.find(std::string(1, char(b)));
    im->byte_sym[b] = it == im->vocab.end() ? -1 : it->second;
    im->byte_fallback[b] = im->piece_id(fmt::format("<0x{:02X}>", b));
  }
}

// added_tokens: they take their id's place (and may add ids past the vocabulary).
void read_added_tokens(const Ctx& c, const json& j, HfTokenizer::Impl* im) {
  if (!j.contains("added_tokens") || j["added_tokens"].is_null()) return;
  const json& list = j["added_tokens"];
  if (!list.is_array()) c.bad("added_tokens", "is not a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string w = fmt::format("added_tokens[{}]", i);
    c.obj(list[i], w);
    AddedToken a;
    a.id = c.integer(list[i], "id", w, INT_MIN, 0, kMaxId);
    a.content = c.str(list[i], "content", w);
    if (a.content.empty()) c.bad(w + ".content", "is empty");
    a.special = c.boolean(list[i], "special", w, false);
    a.normalized = c.boolean(list[i], "normalized", w, !a.special) && !im->normalizers.empty();
    a.lstrip = c.boolean(list[i], "lstrip", w, false);
    a.rstrip = c.boolean(list[i], "rstrip", w, false);
    im->grow(a.id);
    if (im->kind[a.id] != 1) {
      im->pieces[a.id] = a.content;
      im->model_bytes[a.id] = a.content;
      im->kind[a.id] = 2;
    }
    im->by_piece[a.content] = a.id;
    im->added.push_back(std::move(a));
  }
}

// The added tokens by id, and the two matchers (a normalized token matches its normalized content).
void index_added_tokens(HfTokenizer::Impl* im) {
  im->added_index.assign(im->pieces.size(), -1);
  for (int i = 0; i < int(im->added.size()); ++i) {
    AddedToken& a = im->added[i];
    im->added_index[a.id] = i;
    if (a.normalized) {
      std::string n = a.content;
      im->normalize(&n);
      if (n.empty()) continue;
      a.content = n;
    }
    AddedMatcher& matcher = a.normalized ? im->normalized_added : im->raw_added;
    matcher.tokens.push_back(i);
    matcher.first_byte[static_cast<unsigned char>(a.content[0])] = true;
  }
  for (AddedMatcher* matcher : {&im->raw_added, &im->normalized_added})
    std::stable_sort(matcher->tokens.begin(), matcher->tokens.end(),
                     [&](int x, int y) { return im->added[x].content.size() > im->added[y].content.size(); });
}

// post_processor: the ids it adds before and after a single sequence, each inside the vocabulary.
void read_post_processor(const Ctx& c, const json& j, const HfTokenizer::Impl& im, std::vector<int>* prefix,
                         std::vector<int>* suffix) {
  if (j.contains("post_processor")) read_post(c, j["post_processor"], "post_processor", im, prefix, suffix);
  for (const std::vector<int>* ids : {prefix, suffix})
    for (int id : *ids)
      if (id < 0 || id >= int(im.pieces.size()))
        c.bad("post_processor", fmt::format("adds id {}, outside the vocabulary", id));
}

struct SpecialIds {
  int bos = -1, eos = -1, pad = -1;
};

// BOS, EOS and pad: tokenizer_config.json's when it names them, else the post-processor's (EOS: else
// a special token of a well-known name).
SpecialIds special_ids(const HfTokenizer::Impl& im, const json& cfg, const std::vector<int>& prefix,
                       const std::vector<int>& suffix) {
  auto id_of = [&](const std::optional<std::string>& s, const char* key) {
    if (!s) return -1;
    const int id = im.piece_id(*s);
    if (id < 0)
      fail("tokenizer {}: tokenizer_config.json's {} {} is not a token of the tokenizer\nhint: fix {} in "
           "tokenizer_config.json",
           im.name, key, json(*s).dump(), key);
    return id;
  };
  const auto bos = config_token(cfg, "bos_token"), eos = config_token(cfg, "eos_token"),
             pad = config_token(cfg, "pad_token");
  SpecialIds out;
  out.bos = bos ? id_of(*bos, "bos_token") : prefix.empty() ? -1 : prefix.front();
  if (eos) {
    out.eos = id_of(*eos, "eos_token");
  } else if (!suffix.empty()) {
    out.eos = suffix.back();
  } else {
    for (const char* known : {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>", "<|im_end|>"})
      if (const int id = im.piece_id(known); id >= 0 && im.special(id)) {
        out.eos = id;
        break;
      }
  }
  out.pad = pad ? id_of(*pad, "pad_token") : -1;
  return out;
}

}  // namespace

HfTokenizer::HfTokenizer() : impl_(std::make_unique<Impl>()) {}
HfTokenizer::~HfTokenizer() = default;

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  if (!is_regular_file(path)) fail("tokenizer {}: file not found\nhint: pass the model folder's tokenizer.json", path);
  const std::string text = read_small_file(path, size_t(1) << 31, "tokenizer");
  const fs::path cfg = fs::path(path).parent_path() / "tokenizer_config.json";
  std::string cfg_text;
  if (is_regular_file(cfg.string())) cfg_text = read_small_file(cfg.string(), size_t(1) << 28, "tokenizer config");
  return parse(text, cfg_text, path);
}

std::unique_ptr<HfTokenizer> HfTokenizer::parse(std::string_view tokenizer_json, std::string_view config_json,
                                                const std::string& name) {
  std::unique_ptr<HfTokenizer> tok(new HfTokenizer());
  Impl& im = *tok->impl_;
  im.name = name;
  im.serial = next_serial++;
  const Ctx c{name};
  const auto [j, cfg] = parse_documents(tokenizer_json, config_json, name);
  try {
    const json& m = read_model_options(c, j, &im);
    read_pipeline(c, j, &im);
    read_vocab(c, m, &im);
    read_merges(c, m, &im);
    read_unknown_and_bytes(c, m, &im);
    read_added_tokens(c, j, &im);
    index_added_tokens(&im);
    read_post_processor(c, j, im, &tok->prefix_ids_, &tok->suffix_ids_);
    const SpecialIds ids = special_ids(im, cfg, tok->prefix_ids_, tok->suffix_ids_);
    tok->unk_id_ = im.unk;
    tok->bos_id_ = ids.bos;
    tok->eos_id_ = ids.eos;
    tok->pad_id_ = ids.pad;
  } catch (const json::exception& e) {
    fail("tokenizer {}: unexpected structure ({})\nhint: pass a tokenizer.json written by Hugging Face tokenizers",
         name, e.what());
  }
  return tok;
}

// ---------------------------------------------------------------------------------------------
// Encoding

void HfTokenizer::Impl::normalize(std::string* s) const {
  for (const Normalizer& n : normalizers) {
    switch (n.kind) {
      case Normalizer::NFC:
      case Normalizer::NFD:
      case Normalizer::NFKC:
      case Normalizer::NFKD: {
        if (std::all_of(s->begin(), s->end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; })) break;
        UErrorCode err = U_ZERO_ERROR;
        const icu::Normalizer2* norm = n.kind == Normalizer::NFC    ? icu::Normalizer2::getNFCInstance(err)
                                       : n.kind == Normalizer::NFD  ? icu::Normalizer2::getNFDInstance(err)
                                       : n.kind == Normalizer::NFKC ? icu::Normalizer2::getNFKCInstance(err)
                                                                    : icu::Normalizer2::getNFKDInstance(err);
        CHECK(U_SUCCESS(err), "ICU normalizer: {}", u_errorName(err));
        if (norm->isNormalizedUTF8(icu::StringPiece(s->data(), int32_t(s->size())), err) && U_SUCCESS(err)) break;
        err = U_ZERO_ERROR;
        std::string out;
        icu::StringByteSink<std::string> sink(&out);
        norm->normalizeUTF8(0, icu::StringPiece(s->data(), int32_t(s->size())), sink, nullptr, err);
        CHECK(U_SUCCESS(err), "ICU normalize: {}", u_errorName(err));
        *s = std::move(out);
        break;
      }
      case Normalizer::Lowercase: {
        UErrorCode err = U_ZERO_ERROR;
        std::string out;
        icu::StringByteSink<std::string> sink(&out);
        icu::CaseMap::utf8ToLower("", 0, icu::StringPiece(s->data(), int32_t(s->size())), sink, nullptr, err);
        CHECK(U_SUCCESS(err), "ICU lowercase: {}", u_errorName(err));
        *s = std::move(out);
        break;
      }
      case Normalizer::Strip: {
        std::string_view v(*s);
        if (n.left) v = trim_start_space(v);
        if (n.right) v = trim_end_space(v);
        *s = std::string(v);
        break;
      }
      case Normalizer::Prepend:
        if (!s->empty()) *s = n.text + *s;
        break;
      case Normalizer::Replace: *s = replace_all(*s, *n.re, n.text); break;
    }
  }
}

void HfTokenizer::Impl::pre_tokenize(Piece section, bool first, std::vector<Piece>* out) const {
  std::vector<Piece> cur, next;
  cur.push_back(std::move(section));
  for (const PreTokenizer& p : pretokenizers) {
    next.clear();
    for (Piece& piece : cur) {
      switch (p.kind) {
        case PreTokenizer::Split: split_piece(piece, *p.re, p.behavior, p.invert, &next); break;
        case PreTokenizer::ByteLevel:
          if (p.add_prefix_space && !piece.text.starts_with(' ')) {
            piece.text = " " + piece.text;
            piece.exact = false;
          }
          if (p.re)
            split_piece(piece, *p.re, Behavior::Isolated, false, &next);
          else
            next.push_back(std::move(piece));
          break;
        case PreTokenizer::Metaspace: {
          const bool at_start = first && piece.begin == 0;
          std::string text;
          for (char ch : piece.text) {
            if (ch == ' ')
              text += p.replacement;
            else
              text.push_back(ch);
          }
          if ((p.prepend == 2 || (p.prepend == 1 && at_start)) && !text.starts_with(p.replacement))
            text = p.replacement + text;
          const bool same = text == piece.text;
          Piece np{std::move(text), piece.begin, piece.exact && same};
          if (p.split)
            split_piece(np, *p.re, Behavior::MergedWithNext, false, &next);
          else
            next.push_back(std::move(np));
          break;
        }
      }
    }
    std::swap(cur, next);
  }
  for (Piece& p : cur) out->push_back(std::move(p));
}

namespace {

// The thread's cache of pre-token encodings, for one tokenizer at a time.
struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int>> map;
};
thread_local WordCache word_cache;
constexpr size_t kCacheEntries = 1 << 16;
constexpr size_t kCacheWordBytes = 64;

}  // namespace

void HfTokenizer::Impl::model_encode(std::string_view word, std::vector<int>* out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (auto it = vocab.find(std::string(word)); it != vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (word.size() <= kCacheWordBytes) {
    WordCache& cache = word_cache;
    if (cache.owner != serial || cache.map.size() >= kCacheEntries) {
      cache.map.clear();
      cache.owner = serial;
    }
    std::string key(word);
    auto it = cache.map.find(key);
    if (it == cache.map.end()) {
      std::vector<int> ids;
      bpe(word, &ids);
      it = cache.map.emplace(std::move(key), std::move(ids)).first;
    }
    out->insert(out->end(), it->second.begin(), it->second.end());
    return;
  }
  bpe(word, out);
}

std::vector<int> HfTokenizer::Impl::initial_symbols(std::string_view word) const {
  std::vector<int> sym;
  sym.reserve(word.size());
  bool prev_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t len = byte_level ? 1 : utf8_char_length(static_cast<unsigned char>(word[i]));
    int id = -1;
    if (byte_level)
      id = byte_sym[static_cast<unsigned char>(word[i])];
    else if (auto it = vocab.find(std::string(word.substr(i, len))); it != vocab.end())
      id = it->second;
    if (id >= 0) {
      sym.push_back(id);
      prev_unk = false;
    } else {
      bool fell_back = use_byte_fallback;
      for (size_t k = 0; k < len && fell_back; ++k)
        fell_back = byte_fallback[static_cast<unsigned char>(word[i + k])] >= 0;
      if (fell_back) {
        for (size_t k = 0; k < len; ++k) sym.push_back(byte_fallback[static_cast<unsigned char>(word[i + k])]);
        prev_unk = false;
      } else if (unk >= 0) {
        if (!(fuse_unk && prev_unk)) sym.push_back(unk);
        prev_unk = true;
      }
    }
    i += len;
  }
  return sym;
}

int HfTokenizer::Impl::merge_rank(int a, int b, int* merged) const {
  auto it = merges.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
  if (it == merges.end()) return INT_MAX;
  *merged = it->second.id;
  return it->second.rank;
}

void HfTokenizer::Impl::merge_short(std::vector<int>* symbols) const {
  // The ranks of adjacent pairs in an array; merge the lowest (leftmost on ties).
  std::vector<int>& sym = *symbols;
  const size_t n = sym.size();
  std::vector<int> rank(n - 1), merged(n - 1);
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = merge_rank(sym[i], sym[i + 1], &merged[i]);
  for (;;) {
    size_t best = 0;
    for (size_t i = 1; i < rank.size(); ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank.empty() || rank[best] == INT_MAX) break;
    sym[best] = merged[best];
    sym.erase(sym.begin() + best + 1);
    rank.erase(rank.begin() + best);
    merged.erase(merged.begin() + best);
    if (best < rank.size()) rank[best] = merge_rank(sym[best], sym[best + 1], &merged[best]);
    if (best > 0) rank[best - 1] = merge_rank(sym[best - 1], sym[best], &merged[best - 1]);
  }
}

void HfTokenizer::Impl::merge_long(std::vector<int> sym, std::vector<int>* out) const {
  // A linked list and a priority queue of candidate merges (rank, then position); a queued merge is
  // stale when its left symbol changed or its right neighbour is another one.
  const size_t n = sym.size();
  std::vector<int> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = int(i) - 1;
    next[i] = i + 1 < n ? int(i + 1) : -1;
  }
  struct Cand {
    int rank, pos, left, right;
  };
  auto later = [](const Cand& a, const Cand& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  std::priority_queue<Cand, std::vector<Cand>, decltype(later)> queue(later);
  auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    int m = 0;
    const int r = merge_rank(sym[pos], sym[next[pos]], &m);
    if (r != INT_MAX) queue.push({r, pos, sym[pos], sym[next[pos]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int(i));
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    if (sym[c.pos] != c.left || next[c.pos] < 0 || sym[next[c.pos]] != c.right) continue;
    int m = 0;
    merge_rank(c.left, c.right, &m);
    const int r = next[c.pos];
    sym[c.pos] = m;
    sym[r] = -1;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = next[i]) out->push_back(sym[i]);
}

void HfTokenizer::Impl::bpe(std::string_view word, std::vector<int>* out) const {
  std::vector<int> sym = initial_symbols(word);
  if (sym.size() > 128) return merge_long(std::move(sym), out);
  if (sym.size() >= 2) merge_short(&sym);
  out->insert(out->end(), sym.begin(), sym.end());
}

uint32_t HfTokenizer::Impl::id_bytes(int id) const {
  return id >= 0 && id < int(model_bytes.size()) ? uint32_t(model_bytes[id].size()) : 0;
}

namespace {

// A stretch of the input between added tokens, or one added token (added: its index).
struct Section {
  std::string_view text;
  uint32_t begin;
  int added;
};

// Where each id came from, when the caller asks: offsets in the (repaired) text, or the whole input
// when the input was not UTF-8.
struct SpanSink {
  std::vector<std::pair<uint32_t, uint32_t>>* spans;
  bool exact;
  uint32_t input_size;
  void add(uint32_t b, uint32_t e) const {
    if (spans) spans->emplace_back(exact ? b : 0, exact ? e : input_size);
  }
};

// The sections between the raw added tokens of text; lstrip/rstrip eat the whitespace beside them.
std::vector<Section> split_raw_added(const HfTokenizer::Impl& im, std::string_view text) {
  std::vector<Section> sections;
  for (size_t from = 0;;) {
    size_t at = 0;
    const int t = im.raw_added.find(text, from, &at, im.added);
    if (t < 0) {
      if (from < text.size()) sections.push_back({text.substr(from), uint32_t(from), -1});
      break;
    }
    if (at > from) sections.push_back({text.substr(from, at - from), uint32_t(from), -1});
    sections.push_back({text.substr(at, im.added[t].content.size()), uint32_t(at), t});
    from = at + im.added[t].content.size();
  }
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].added < 0) continue;
    const AddedToken& a = im.added[sections[i].added];
    if (a.lstrip && i > 0 && sections[i - 1].added < 0) sections[i - 1].text = trim_end_space(sections[i - 1].text);
    if (a.rstrip && i + 1 < sections.size() && sections[i + 1].added < 0) {
      const std::string_view t = trim_start_space(sections[i + 1].text);
      sections[i + 1].begin += uint32_t(sections[i + 1].text.size() - t.size());
      sections[i + 1].text = t;
    }
  }
  return sections;
}

// A normalized section as text parts and normalized added tokens (-1, or the token's index).
std::vector<std::pair<std::string, int>> split_normalized_added(const HfTokenizer::Impl& im, const std::string& norm) {
  std::vector<std::pair<std::string, int>> parts;
  for (size_t from = 0;;) {
    size_t at = 0;
    const int t = im.normalized_added.find(norm, from, &at, im.added);
    if (t < 0) {
      if (from < norm.size()) parts.emplace_back(norm.substr(from), -1);
      break;
    }
    if (at > from) parts.emplace_back(norm.substr(from, at - from), -1);
    parts.emplace_back(std::string(), t);
    from = at + im.added[t].content.size();
  }
  return parts;
}

// The model's ids for each pre-token of a text part, with their spans: a byte-level id covers its bytes
// when the pre-token's offsets are exact, else the whole section [s_begin, s_end).
void encode_pieces(const HfTokenizer::Impl& im, const std::vector<Piece>& pieces, uint32_t s_begin, uint32_t s_end,
                   const SpanSink& sink, std::vector<int>* ids) {
  std::vector<int> word_ids;
  for (const Piece& p : pieces) {
    word_ids.clear();
    im.model_encode(p.text, &word_ids);
    ids->insert(ids->end(), word_ids.begin(), word_ids.end());
    if (!sink.spans) continue;
    uint32_t at = p.begin;
    for (int id : word_ids) {
      if (p.exact && im.byte_level) {
        const uint32_t len = std::min(im.id_bytes(id), s_end - std::min(at, s_end));
        sink.add(at, at + len);
        at += len;
      } else {
        sink.add(s_begin, s_end);
      }
    }
  }
}

// One section between raw added tokens: 2. normalize, then split out the normalized added tokens;
// 3. pre-tokenize and 4. run the model on each pre-token.
void encode_section(const HfTokenizer::Impl& im, const Section& s, const SpanSink& sink, std::vector<int>* ids) {
  std::string norm(s.text);
  im.normalize(&norm);
  const bool exact = sink.exact && norm == s.text;
  std::vector<std::pair<std::string, int>> parts = split_normalized_added(im, norm);
  const uint32_t s_end = s.begin + uint32_t(s.text.size());
  uint32_t offset = s.begin;
  std::vector<Piece> pieces;
  for (auto& [part, t] : parts) {
    if (t >= 0) {
      ids->push_back(im.added[t].id);
      sink.add(s.begin, s_end);
      continue;
    }
    pieces.clear();
    const size_t part_size = part.size();
    im.pre_tokenize(Piece{std::move(part), offset, exact && parts.size() == 1}, true, &pieces);
    if (exact && parts.size() == 1) offset += uint32_t(part_size);
    encode_pieces(im, pieces, s.begin, s_end, sink, ids);
  }
}

}  // namespace

void HfTokenizer::encode(std::string_view input, std::vector<int>* ids,
                         std::vector<std::pair<uint32_t, uint32_t>>* spans) const {
  const Impl& im = *impl_;
  ids->clear();
  if (spans) spans->clear();
  const std::string lossy = utf8_valid(input) ? std::string() : utf8_lossy(input);
  const std::string_view text = lossy.empty() ? input : std::string_view(lossy);
  const SpanSink sink{spans, lossy.empty(), uint32_t(input.size())};
  // 1. Split out the added tokens of the raw text; then encode each section between them.
  for (const Section& s : split_raw_added(im, text)) {
    if (s.added >= 0) {
      ids->push_back(im.added[s.added].id);
      sink.add(s.begin, s.begin + uint32_t(s.text.size()));
    } else if (!s.text.empty()) {
      encode_section(im, s, sink, ids);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Decoding

namespace {

// Decoded tokens where runs of raw bytes are joined and read as UTF-8 (lossy); other tokens pass
// as they are.
class ByteRuns {
 public:
  void bytes(std::string_view b) { bytes_ += b; }
  void token(const std::string& t) {
    flush();
    out_.push_back(t);
  }
  std::vector<std::string> finish() {
    flush();
    return std::move(out_);
  }

 private:
  void flush() {
    if (!bytes_.empty()) out_.push_back(utf8_lossy(bytes_));
    bytes_.clear();
  }
  std::string bytes_;
  std::vector<std::string> out_;
};

// ByteLevel: byte-level tokens become bytes; added tokens (known while per_id) pass as they are.
std::vector<std::string> decode_byte_level(const std::vector<std::string>& toks, const std::vector<char>& added,
                                           bool per_id) {
  ByteRuns runs;
  std::string raw;
  for (size_t i = 0; i < toks.size(); ++i) {
    if (per_id && added[i])
      runs.token(toks[i]);
    else if (byte_level_to_bytes(toks[i], &raw))
      runs.bytes(raw);
    else
      runs.bytes(toks[i]);
  }
  return runs.finish();
}

// ByteFallback: <0xXX> pieces become their bytes.
std::vector<std::string> decode_byte_fallback(const std::vector<std::string>& toks) {
  ByteRuns runs;
  for (const std::string& t : toks) {
    if (const int v = byte_piece_value(t); v >= 0)
      runs.bytes(std::string(1, char(v)));
    else
      runs.token(t);
  }
  return runs.finish();
}

// Metaspace: the replacement back to spaces, less the space it prepended to the first token.
std::vector<std::string> decode_metaspace(const Decoder& d, const std::vector<std::string>& toks) {
  std::vector<std::string> next;
  for (size_t i = 0; i < toks.size(); ++i) {
    std::string t;
    const std::string& s = toks[i];
    for (size_t k = 0; k < s.size();) {
      if (s.compare(k, d.text.size(), d.text) == 0 && !d.text.empty()) {
        t.push_back(' ');
        k += d.text.size();
      } else
        t.push_back(s[k++]);
    }
    if (i == 0 && d.prepend != 0 && t.starts_with(' ')) t = t.substr(1);
    next.push_back(std::move(t));
  }
  return next;
}

// One decoder over the tokens; added: per token whether it is an added one (meaningful while per_id).
std::vector<std::string> apply_decoder(const Decoder& d, const std::vector<std::string>& toks,
                                       const std::vector<char>& added, bool per_id) {
  std::vector<std::string> next;
  switch (d.kind) {
    case Decoder::ByteLevel: return decode_byte_level(toks, added, per_id);
    case Decoder::ByteFallback: return decode_byte_fallback(toks);
    case Decoder::Fuse: {
      std::string all;
      for (const std::string& t : toks) all += t;
      next.push_back(std::move(all));
      break;
    }
    case Decoder::Metaspace: return decode_metaspace(d, toks);
    case Decoder::Strip:
      for (const std::string& t : toks) {
        std::string_view v(t);
        for (int k = 0; k < d.start && v.starts_with(d.text); ++k) v.remove_prefix(d.text.size());
        for (int k = 0; k < d.stop && v.ends_with(d.text); ++k) v.remove_suffix(d.text.size());
        next.emplace_back(v);
      }
      break;
    case Decoder::Replace:
      for (const std::string& t : toks) next.push_back(replace_all(t, *d.re, d.text));
      break;
  }
  return next;
}

}  // namespace

std::string HfTokenizer::decode(const std::vector<int>& ids, bool skip_special) const {
  const Impl& im = *impl_;
  std::vector<std::string> toks;
  std::vector<char> added;  // parallel to toks while each is still one id
  for (int id : ids) {
    if (id < 0 || id >= int(im.pieces.size()) || im.kind[id] == 0) continue;
    if (skip_special && is_special(id)) continue;
    toks.push_back(im.pieces[id]);
    added.push_back(im.kind[id] == 2 || im.added_index[id] >= 0);
  }
  if (!im.has_decoder) {
    std::string out;
    for (size_t i = 0; i < toks.size(); ++i) out += (i ? " " : "") + toks[i];
    return out;
  }
  for (const Decoder& d : im.decoders) {
    std::vector<std::string> next = apply_decoder(d, toks, added, added.size() == toks.size());
    if (next.size() != toks.size() || d.kind == Decoder::ByteLevel || d.kind == Decoder::ByteFallback ||
        d.kind == Decoder::Fuse)
      added.clear();
    toks = std::move(next);
  }
  std::string out;
  for (const std::string& t : toks) out += t;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Queries

int HfTokenizer::vocab_size() const { return int(impl_->pieces.size()); }

std::string HfTokenizer::id_to_piece(int id) const {
  return id >= 0 && id < int(impl_->pieces.size()) ? impl_->pieces[id] : std::string();
}

int HfTokenizer::piece_to_id(std::string_view piece) const { return impl_->piece_id(std::string(piece)); }

bool HfTokenizer::is_added(int id) const {
  return id >= 0 && id < int(impl_->added_index.size()) && impl_->added_index[id] >= 0;
}

bool HfTokenizer::is_special(int id) const { return impl_->special(id); }

bool HfTokenizer::is_byte(int id) const {
  if (id < 0 || id >= int(impl_->pieces.size())) return false;
  const int b = byte_piece_value(impl_->pieces[id]);
  return b >= 0 && impl_->byte_fallback[b] == id;
}

bool HfTokenizer::raw_bytes(int id, std::string* bytes) const {
  const Impl& im = *impl_;
  if (id < 0 || id >= int(im.pieces.size()) || im.kind[id] != 1 || is_added(id)) return false;
  if (is_byte(id)) {
    *bytes = std::string(1, char(byte_piece_value(im.pieces[id])));
    return true;
  }
  if (!im.byte_level) return false;
  *bytes = im.model_bytes[id];
  return true;
}

}  // namespace llamatrain::data
