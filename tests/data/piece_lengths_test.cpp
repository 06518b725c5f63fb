// data::piece_lengths, the bytes and characters of text each token id stands for (bits per byte and
// per character): pieces with the space mark U+2581, a Chinese character that is a piece, one that
// falls back to its 3 UTF-8 bytes (3 bytes, 1 character), control and unknown pieces (0); sums
// ignore -100 targets and name an id past the tokenizer; and over whole documents of the fixture
// corpus the pieces' bytes and characters are exactly those of the text SentencePiece decodes, plus
// the one space of add_dummy_prefix per document.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/piece_lengths.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace llamatrain::data {
namespace {

using llamatrain::testing::fixture;

int id_of(const Tokenizer& tok, const std::string& piece) {
  for (int id = 0; id < tok.vocab_size(); ++id)
    if (tok.id_to_piece(id) == piece) return id;
  ADD_FAILURE() << "no piece " << piece;
  return 0;
}

// Code points of valid UTF-8.
int64_t utf8_chars(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

TEST(PieceLengths, SpaceMarkBytePiecesAndControlPieces) {
  const Tokenizer tok(fixture("tokenizer.model"));
  const PieceLengths len = piece_lengths(tok);
  ASSERT_EQ(len.vocab_size(), tok.vocab_size());
  auto expect = [&](const std::string& piece, int bytes, int chars) {
    const int id = id_of(tok, piece);
    EXPECT_EQ(len.bytes[size_t(id)], bytes) << piece;
    EXPECT_EQ(len.chars[size_t(id)], chars) << piece;
  };
  expect("▁", 1, 1);  // the space mark alone: one space
  expect("▁a", 2, 2);
  expect("▁and", 4, 4);
  expect("ing", 3, 3);
  expect("你", 3, 1);   // a Chinese character that is a piece
  expect("<s>", 0, 0);  // control pieces decode to nothing
  expect("</s>", 0, 0);
  expect("<unk>", 0, 0);
  expect("<0x41>", 1, 1);  // 'A' as a byte piece
  expect("<0xE9>", 1, 1);  // a lead byte starts a character
  expect("<0x91>", 1, 0);  // continuation bytes do not
  expect("<0xAB>", 1, 0);

  // 鑫 (E9 91 AB) is no piece of this tokenizer: it falls back to its three bytes, which count 3 bytes
  // and one character; with the dummy prefix's space mark 4 and 2.
  const std::vector<int> ids = tok.encode("鑫");
  ASSERT_EQ(ids.size(), 4u) << "expected ▁ and three byte pieces";
  EXPECT_EQ(tok.id_to_piece(ids[0]), "▁");
  for (int i = 1; i < 4; i++) EXPECT_TRUE(tok.is_byte(ids[size_t(i)])) << tok.id_to_piece(ids[size_t(i)]);
  const std::vector<int32_t> targets(ids.begin() + 1, ids.end());
  const TextSums s = len.sum(targets.data(), int64_t(targets.size()));
  EXPECT_EQ(s.tokens, 3);
  EXPECT_EQ(s.bytes, 3);
  EXPECT_EQ(s.chars, 1);

  int32_t bytes = -1, chars = -1;
  piece_text_lengths("▁你好▁x", &bytes, &chars);
  EXPECT_EQ(bytes, 9);
  EXPECT_EQ(chars, 5);
}

TEST(PieceLengths, SumsIgnoreMaskedTargetsAndRejectIdsPastTheTokenizer) {
  const Tokenizer tok(fixture("tokenizer.model"));
  const PieceLengths len = piece_lengths(tok);
  const int32_t a = id_of(tok, "▁and"), eos = tok.eos_id();
  const std::vector<int32_t> targets = {a, -100, eos, a, -100};
  const TextSums s = len.sum(targets.data(), int64_t(targets.size()));
  EXPECT_EQ(s.tokens, 3);  // </s> is scored, with no bytes
  EXPECT_EQ(s.bytes, 8);
  EXPECT_EQ(s.chars, 8);
  const std::vector<int32_t> bad = {a, tok.vocab_size() + 3};
  try {
    len.sum(bad.data(), 2, "tok.model");
    FAIL() << "an id past the tokenizer was counted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 503 is past the 500 pieces of tok.model"), std::string::npos)
        << e.what();
  }
}

TEST(PieceLengths, DocumentsCountTheirDecodedTextPlusTheDummyPrefix) {
  const Tokenizer tok(fixture("tokenizer.model"));
  const PieceLengths len = piece_lengths(tok);
  std::ifstream in(fixture("corpus.jsonl"));
  std::vector<std::string> texts = {"混合 text: 鑫鑫 and 🦙 emoji, ▁ marks", " two  spaces ", "\ttab\nnewline"};
  for (std::string line; std::getline(in, line);) {  // the corpus's hostile lines left out
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("text") && j["text"].is_string()) texts.push_back(j["text"]);
  }
  int64_t byte_pieces = 0, documents = 0;
  for (const auto& text : texts) {
    if (text.empty()) continue;  // encodes to nothing
    const std::vector<int> ids = tok.encode(text);
    const std::vector<int32_t> ids32(ids.begin(), ids.end());
    const TextSums s = len.sum(ids32.data(), int64_t(ids32.size()));
    if (tok.decode(ids) != text) continue;  // invalid UTF-8 (decoded as U+FFFD)
    EXPECT_EQ(s.bytes, int64_t(text.size()) + 1) << text;
    EXPECT_EQ(s.chars, utf8_chars(text) + 1) << text;
    for (int id : ids) byte_pieces += tok.is_byte(id);
    documents++;
  }
  EXPECT_GE(documents, 25);
  EXPECT_GT(byte_pieces, 8) << "the texts should exercise byte fallback";
}

}  // namespace
}  // namespace llamatrain::data
