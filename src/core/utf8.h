// UTF-8 byte rules, once for every reader of text (the tokenizers, the piece lengths, the decoder's
// stream, the chat templates): what a byte starts, whether a sequence is valid (RFC 3629: no overlongs,
// no surrogates, nothing past U+10FFFF), the code point at a position, the characters of a text, which
// code points are white space, and the lossy repair that replaces each maximal
// invalid subpart with U+FFFD as Python's and Rust's decoders do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llamatrain {

// A byte that continues a sequence (10xxxxxx).
inline bool utf8_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Length of the sequence a byte starts: 1..4; 0 for a continuation byte; -1 for a byte that never
// starts one (C0, C1, F5..FF).
inline int utf8_start_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b < 0xC0) return 0;
  if (b < 0xC2) return -1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  if (b < 0xF5) return 4;
  return -1;
}

// The length of the character that b leads, by its bits: 1..4, and 1 for a byte that leads none (a
// continuation byte, F8..FF), so that a walk over any bytes advances. In valid text, the character's length.
inline size_t utf8_char_length(unsigned char b) {
  return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF8 ? 4 : 1;
}

// Length of the valid sequence at p (n bytes available): 1..4, or 0 with *bad set to the length of the
// maximal invalid subpart there (>= 1).
size_t utf8_sequence(const unsigned char* p, size_t n, size_t* bad);

// The code point of the character starting at s[i]: its utf8_char_length bytes, or those s has left.
uint32_t utf8_decode_at(std::string_view s, size_t i);

// s cut into characters of utf8_char_length bytes each (the last one cut at the end of s).
std::vector<std::string_view> utf8_chars(std::string_view s);

// Unicode's White_Space property (Python's str.isspace() less U+001C..U+001F).
bool unicode_white_space(uint32_t cp);

bool utf8_valid(std::string_view s);
// s with every maximal invalid subpart replaced by U+FFFD (s itself when valid).
std::string utf8_lossy(std::string_view s);

}  // namespace llamatrain
