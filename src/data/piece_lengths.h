// How much text each token id stands for, so that a loss can be given per byte and per character
// of text instead of per token (per-token figures cannot compare two tokenizers; these can).
// For id i: bytes[i] is the number of UTF-8 bytes its piece adds to decoded text and chars[i] the
// number of characters it starts (its bytes that are not UTF-8 continuation bytes 0x80..0xBF):
//   - a byte-fallback piece <0xXX>: 1 byte, and 1 character unless XX is a continuation byte, so
//     the 3 byte pieces of one Chinese character count 3 bytes and 1 character;
//   - control pieces (<s>, </s>, a pad piece) and the unknown piece: 0 and 0 (control pieces decode
//     to nothing; <unk> stands for text the tokenizer did not keep, and never occurs with byte
//     fallback);
//   - a byte-level BPE token of a tokenizer.json (Llama 3, Qwen2.5): the raw bytes it stands for
//     (its characters in GPT-2's byte alphabet mapped back), characters as above; special added
//     tokens count 0 and 0 like control pieces;
//   - every other piece (normal, user-defined, unused): its text's UTF-8 bytes, U+2581 (the
//     SentencePiece space mark) counting as one space byte.
// Each piece is counted alone, so the space mark that add_dummy_prefix puts before a document's
// first piece counts as one byte and one character that the document's text lacks (SentencePiece's
// decode drops it at the start of a sequence); a Llama-style tokenizer counts it in every document,
// so two of them still compare on equal terms.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace llamatrain::data {

struct TextSums {
  int64_t tokens = 0;  // ids counted (>= 0)
  int64_t bytes = 0;
  int64_t chars = 0;
};

struct PieceLengths {
  std::vector<int32_t> bytes;  // (V) UTF-8 bytes of id's text
  std::vector<int32_t> chars;  // (V) characters the id starts
  int vocab_size() const { return int(bytes.size()); }
  // Sums over ids[0..n) that are >= 0 (-100 and other negative ids are ignored, as the loss ignores
  // them). An id at or past vocab_size() is an Error naming it and the tokenizer (`what`).
  TextSums sum(const int32_t* ids, int64_t n, const char* what = "tokenizer") const;
};

PieceLengths piece_lengths(const Tokenizer& tokenizer);

// A normal piece's text: SentencePiece's U+2581 (E2 96 81) as the space it stands for.
std::string piece_text(const std::string& piece);
// The bytes and characters of one normal piece's text (U+2581 counts as one space byte).
void piece_text_lengths(const std::string& piece, int32_t* bytes, int32_t* chars);

}  // namespace llamatrain::data
