// core/utf8.h: what each byte starts, RFC 3629's validity (overlongs, surrogates, past U+10FFFF,
// truncated sequences), code points, the characters of any bytes, white space, and the lossy repair,
// whose expected strings are what Python's bytes.decode("utf-8", errors="replace") gives for the same
// bytes (one U+FFFD per maximal invalid subpart).
#include "core/utf8.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llamatrain {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

TEST(Utf8, WhatEachByteStarts) {
  EXPECT_EQ(utf8_start_length(0x00), 1);
  EXPECT_EQ(utf8_start_length('A'), 1);
  EXPECT_EQ(utf8_start_length(0x80), 0);
  EXPECT_EQ(utf8_start_length(0xBF), 0);
  EXPECT_EQ(utf8_start_length(0xC0), -1);
  EXPECT_EQ(utf8_start_length(0xC1), -1);
  EXPECT_EQ(utf8_start_length(0xC2), 2);
  EXPECT_EQ(utf8_start_length(0xE4), 3);
  EXPECT_EQ(utf8_start_length(0xF4), 4);
  EXPECT_EQ(utf8_start_length(0xF5), -1);
  EXPECT_EQ(utf8_start_length(0xFF), -1);
  for (int b = 0; b < 256; b++) EXPECT_EQ(utf8_continuation(uint8_t(b)), b >= 0x80 && b < 0xC0) << b;
}

TEST(Utf8, ValidityAndCodePoints) {
  EXPECT_TRUE(utf8_valid(""));
  EXPECT_TRUE(utf8_valid("abc"));
  EXPECT_TRUE(utf8_valid("\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"));  // é 中 😀
  for (const char* bad : {"\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE4\xB8", "a\xFF"})
    EXPECT_FALSE(utf8_valid(bad)) << bad;
  const std::string s = "A\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";
  EXPECT_EQ(utf8_decode_at(s, 0), 0x41u);
  EXPECT_EQ(utf8_decode_at(s, 1), 0xE9u);
  EXPECT_EQ(utf8_decode_at(s, 3), 0x4E2Du);
  EXPECT_EQ(utf8_decode_at(s, 6), 0x1F600u);
  EXPECT_EQ(utf8_char_length(0xF0), 4u);
}

TEST(Utf8, CharactersOfAnyBytes) {
  // A byte that leads no character (continuation, F8..FF) is one on its own; a cut one ends at the end.
  EXPECT_EQ(utf8_char_length(0x80), 1u);
  EXPECT_EQ(utf8_char_length(0xC3), 2u);
  EXPECT_EQ(utf8_char_length(0xF7), 4u);
  EXPECT_EQ(utf8_char_length(0xF8), 1u);
  const std::vector<std::string_view> want = {"A",    "\xC3\xA9",         "\xE4\xB8\xAD", "\x80",
                                              "\xFF", "\xF0\x9F\x98\x80", "\xE4\xB8"};
  EXPECT_EQ(utf8_chars("A\xC3\xA9\xE4\xB8\xAD\x80\xFF\xF0\x9F\x98\x80\xE4\xB8"), want);
  EXPECT_TRUE(utf8_chars("").empty());
  EXPECT_EQ(utf8_decode_at("x\xE4\xB8", 1), (0x4u << 6) | 0x38u);  // cut: the bytes that are there
  EXPECT_EQ(utf8_decode_at("\xE4", 0), 0xE4u);
}

TEST(Utf8, WhiteSpaceAsUnicode) {
  for (uint32_t cp :
       {0x09u, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u})
    EXPECT_TRUE(unicode_white_space(cp)) << cp;
  for (uint32_t cp : {0x08u, 0x0Eu, 0x1Cu, 0x41u, 0x200Bu, 0x2581u, 0xFEFFu})
    EXPECT_FALSE(unicode_white_space(cp)) << cp;
}

TEST(Utf8, LossyRepairAsPythonsDecoder) {
  const std::string R = kReplacement;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"abc", "abc"},
      {"\xC3\xA9", "\xC3\xA9"},
      {"\xC0\xAF", R + R},
      {"\xE0\x80\xAF", R + R + R},
      {"\xED\xA0\x80", R + R + R},
      {"\xF4\x90\x80\x80", R + R + R + R},
      {"\xF0\x80\x80"
       "A",
       R + R + R + "A"},
      {"\xE4\xB8", R},
      {"a\xFF"
       "b",
       "a" + R + "b"},
      {"\xE4\xB8"
       "A\x80",
       R + "A" + R},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(utf8_lossy(in), want) << in;
}

}  // namespace
}  // namespace llamatrain
