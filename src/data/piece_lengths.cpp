// Bytes and characters per token id; see piece_lengths.h for the definition.
#include "data/piece_lengths.h"

#include <cstdio>
#include <string_view>

#include "core/error.h"
#include "core/utf8.h"

namespace llamatrain::data {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

}  // namespace

std::string piece_text(const std::string& piece) {
  std::string out;
  const std::string_view s(piece);
  for (size_t i = 0; i < s.size();) {
    if (s.substr(i, kSpaceMark.size()) == kSpaceMark) {
      out.push_back(' ');
      i += kSpaceMark.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

void piece_text_lengths(const std::string& piece, int32_t* bytes, int32_t* chars) {
  const std::string text = piece_text(piece);
  *bytes = int32_t(text.size()), *chars = 0;
  for (const char c : text) *chars += !utf8_continuation(static_cast<unsigned char>(c));
}

PieceLengths piece_lengths(const Tokenizer& tok) {
  const int V = tok.vocab_size();
  PieceLengths out;
  out.bytes.assign(size_t(V), 0);
  out.chars.assign(size_t(V), 0);
  for (int id = 0; id < V; id++) {
    if (tok.is_control(id) || tok.is_unknown(id)) continue;  // 0 and 0
    const std::string piece = tok.id_to_piece(id);
    if (tok.is_byte(id)) {
      unsigned value = 0;
      CHECK(std::sscanf(piece.c_str(), "<0x%2X>", &value) == 1, "byte piece {} of {}", piece, tok.path());
      out.bytes[size_t(id)] = 1;
      out.chars[size_t(id)] = !utf8_continuation(static_cast<unsigned char>(value));
      continue;
    }
    std::string raw;
    if (tok.is_huggingface() && tok.raw_bytes(id, &raw)) {  // a byte-level token: the bytes it stands for
      out.bytes[size_t(id)] = int32_t(raw.size());
      for (const char c : raw) out.chars[size_t(id)] += !utf8_continuation(static_cast<unsigned char>(c));
      continue;
    }
    piece_text_lengths(piece, &out.bytes[size_t(id)], &out.chars[size_t(id)]);
  }
  return out;
}

TextSums PieceLengths::sum(const int32_t* ids, int64_t n, const char* what) const {
  TextSums s;
  const int V = vocab_size();
  for (int64_t i = 0; i < n; i++) {
    const int32_t id = ids[i];
    if (id < 0) continue;
    if (id >= V)
      fail("token id {} is past the {} pieces of {}, expected ids below {}\nhint: use the tokenizer the data was "
           "made with",
           id, V, what, V);
    s.tokens++;
    s.bytes += bytes[size_t(id)];
    s.chars += chars[size_t(id)];
  }
  return s;
}

}  // namespace llamatrain::data
