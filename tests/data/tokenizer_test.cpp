// data::Tokenizer and DecodeStream: the text streamed while ids arrive is exactly decode(all ids),
// also when byte tokens spell multi-byte characters (emoji, rare CJK) across several steps, checked
// against SentencePiece's decode of the whole sequence on random id streams (the fixture tokenizer
// and the tiny Hugging Face model's); a folder or a damaged file is a clear Error.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace llamatrain::data {
namespace {

using llamatrain::testing::fixture;
using llamatrain::testing::TempDir;

std::string stream_all(const Tokenizer& tok, const std::vector<int>& ids, std::vector<std::string>* steps = nullptr) {
  DecodeStream s(tok);
  std::string out;
  for (int id : ids) {
    std::string piece = s.push(id);
    if (steps) steps->push_back(piece);
    out += piece;
  }
  return out + s.finish();
}

// Byte-token id of byte b (pieces <0xXX>).
int byte_id(const Tokenizer& tok, int b) {
  char name[8];
  std::snprintf(name, sizeof(name), "<0x%02X>", b);
  for (int id = 0; id < tok.vocab_size(); ++id)
    if (tok.id_to_piece(id) == name) return id;
  ADD_FAILURE() << "no byte piece " << name;
  return 0;
}

TEST(DecodeStream, EmojiSpelledAsBytesAfterTextComesOutWhole) {
  Tokenizer tok(fixture("tokenizer.model"));
  // "Hi " then U+1F600 as four byte tokens, then more text: the old printer stopped at the emoji.
  std::vector<int> ids = tok.encode("Hi");
  for (int b : {0xF0, 0x9F, 0x98, 0x80}) ids.push_back(byte_id(tok, b));
  for (int id : tok.encode(" and more text")) ids.push_back(id);
  std::vector<std::string> steps;
  const std::string streamed = stream_all(tok, ids, &steps);
  EXPECT_EQ(streamed, tok.decode(ids));
  EXPECT_NE(streamed.find("\xF0\x9F\x98\x80"), std::string::npos) << streamed;
  EXPECT_NE(streamed.find("more text"), std::string::npos) << streamed;
  // nothing half-made was printed: no replacement character at any step
  for (const auto& s : steps) EXPECT_EQ(s.find("\xEF\xBF\xBD"), std::string::npos) << s;
}

TEST(DecodeStream, BrokenSequencesComeOutAsDecodeSaysWhenTheyCanNoLongerChange) {
  Tokenizer tok(fixture("tokenizer.model"));
  // a lead byte cut by plain text, a lone continuation byte, a lead byte at the very end
  std::vector<int> ids = {byte_id(tok, 0xE4), byte_id(tok, 0xBD)};
  for (int id : tok.encode("x")) ids.push_back(id);
  ids.push_back(byte_id(tok, 0x80));
  ids.push_back(byte_id(tok, 0xE4));
  EXPECT_EQ(stream_all(tok, ids), tok.decode(ids));
}

TEST(DecodeStream, RandomStreamsEqualTheWholeDecode) {
  for (const std::string& model :
       {fixture("tokenizer.model"), std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/golden/tiny_hf/tokenizer.model"}) {
    Tokenizer tok(model);
    std::vector<int> bytes(256);
    for (int b = 0; b < 256; ++b) bytes[b] = byte_id(tok, b);
    std::mt19937 rng(7);
    // Valid multi-byte characters, their prefixes and odd bytes, mixed with ordinary pieces and specials.
    const std::vector<std::vector<int>> chars = {{0xF0, 0x9F, 0x98, 0x80},
                                                 {0xE4, 0xBD, 0xA0},
                                                 {0xC3, 0xA9},
                                                 {0xF0, 0x9F},
                                                 {0xE4},
                                                 {0x80},
                                                 {0xFF},
                                                 {0x41},
                                                 {0xC0, 0x80}};
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<int> ids;
      const int n = 1 + int(rng() % 40);
      for (int i = 0; i < n; ++i) {
        const int kind = int(rng() % 4);
        if (kind == 0) {
          for (int b : chars[rng() % chars.size()]) ids.push_back(bytes[b]);
        } else if (kind == 1) {
          ids.push_back(bytes[rng() % 256]);
        } else {
          ids.push_back(int(rng() % uint32_t(tok.vocab_size())));
        }
      }
      const std::string whole = tok.decode(ids);
      std::string shown;
      DecodeStream s(tok);
      for (int id : ids) {
        shown += s.push(id);
        // what is shown never has to be taken back: it is a prefix of the whole decode at every step
        ASSERT_EQ(whole.compare(0, shown.size(), shown), 0) << model << " trial " << trial;
      }
      shown += s.finish();
      ASSERT_EQ(shown, whole) << model << " trial " << trial;
    }
  }
}

TEST(Tokenizer, FolderMissingFileAndGarbageAreClearErrors) {
  TempDir dir;
  try {
    Tokenizer t(dir.path());
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer(dir / "nope.model"), Error);
  llamatrain::testing::write_file(dir / "junk.model", "not a protobuf at all \xff\xff");
  try {
    Tokenizer t(dir / "junk.model");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a SentencePiece model"), std::string::npos) << e.what();
  }
}

// literal(): the pieces of exactly the characters given, no dummy prefix added and no space removed
// (the split of a piece inside a word), against the full model's encoding of the same text.
TEST(Tokenizer, LiteralSplitsTheGivenCharactersOnly) {
  const Tokenizer tok(llamatrain::testing::source_path("tests/golden/tiny_hf/tokenizer.model"));
  const Tokenizer lit = tok.literal();
  auto pieces = [](const Tokenizer& t, const std::string& text) {
    std::vector<std::string> out;
    for (const int id : t.encode(text)) out.push_back(t.id_to_piece(id));
    return out;
  };
  using V = std::vector<std::string>;
  const std::string sp = "\u2581";
  EXPECT_EQ(pieces(tok, "the"), V({sp + "the"}));
  EXPECT_EQ(pieces(lit, "the"), V({"t", "he"}));
  EXPECT_EQ(pieces(lit, " the"), V({sp + "the"}));
  EXPECT_EQ(pieces(lit, "  a"), V({sp, sp + "a"}));
  EXPECT_EQ(pieces(tok, "here"), V({sp, "he", "re"}));
  EXPECT_EQ(pieces(lit, "here"), V({"he", "re"}));
  EXPECT_EQ(lit.vocab_size(), tok.vocab_size());
  EXPECT_TRUE(tok.is_unknown(0));
  EXPECT_TRUE(tok.is_control(1));
  EXPECT_TRUE(tok.is_byte(3));
  EXPECT_FALSE(tok.is_unused(300));
  EXPECT_EQ(tok.piece_to_id(tok.id_to_piece(300)), 300);
}

}  // namespace
}  // namespace llamatrain::data
