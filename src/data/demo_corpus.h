// A few kilobytes of built-in English text for `llamatrain train --demo`: enough for a tiny model to
// visibly learn (the loss falls from ln(259) ~ 5.6 towards ~1.5 in a few hundred steps of byte-level
// training), with no files or downloads needed; and the demo's tokenizer, Llama-like so an export
// loads anywhere a Llama tokenizer.model does: <unk>, <s>, </s>, then one piece per byte.
#pragma once

#include <string>
#include <string_view>

namespace llamatrain::data {

std::string_view demo_corpus();

inline constexpr int kDemoByteOffset = 3;    // byte b is token id b + 3 (<0xXX>)
inline constexpr int kDemoVocabSize = 259;   // <unk> <s> </s> + 256 bytes
// The demo tokenizer as a serialized SentencePiece ModelProto: BPE with byte_fallback and no
// merges, ids 0..2 = <unk> <s> </s>, ids 3..258 = <0x00>..<0xFF>; no normalization, no dummy prefix,
// spaces kept as bytes, so encode(text) is exactly byte + 3 for every byte of the text.
std::string demo_tokenizer_model();

}  // namespace llamatrain::data
