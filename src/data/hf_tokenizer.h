// Hugging Face tokenizer.json tokenizer (Llama 3, Qwen2.5, Mistral and Llama 2 as tokenizer.json):
// the normalizer, pre-tokenizer, BPE model, added tokens, post-processor and decoder of the file,
// giving the ids of Hugging Face's `tokenizers` (Rust) and its JavaScript port. Invalid UTF-8 input is
// read as those libraries receive it from a byte decoder: each maximal invalid subpart becomes U+FFFD.
// encode() never adds the post-processor's BOS/EOS; prefix_ids()/suffix_ids() say what it would add.
// decode() is tokenizer.json's decoding (special tokens included unless skipped), without
// transformers' clean_up_tokenization_spaces. Leaves out: WordPiece/Unigram models, dropout, offsets
// through normalizers that change the text (spans then cover the whole section).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/utf8.h"

namespace llamatrain::data {

class HfTokenizer {
 public:
  // tokenizer.json bytes; config_json: tokenizer_config.json's bytes ("" when there is none). `name`
  // stands for the file in messages. Throws Error naming the file and the part that is wrong.
  static std::unique_ptr<HfTokenizer> parse(std::string_view tokenizer_json, std::string_view config_json,
                                            const std::string& name);
  // Reads `path` and, beside it, tokenizer_config.json when present.
  static std::unique_ptr<HfTokenizer> load(const std::string& path);
  ~HfTokenizer();

  // spans (may be null): the byte range of `text` each id stands for.
  void encode(std::string_view text, std::vector<int>* ids,
              std::vector<std::pair<uint32_t, uint32_t>>* spans = nullptr) const;
  std::string decode(const std::vector<int>& ids, bool skip_special = false) const;

  int vocab_size() const;                         // the largest id + 1 over the vocabulary and the added tokens
  std::string id_to_piece(int id) const;          // as the file writes it ("Ġthe"); "" out of range
  int piece_to_id(std::string_view piece) const;  // added tokens by content, then the vocabulary; -1 if none
  bool is_special(int id) const;                  // an added token marked special
  bool is_added(int id) const;
  bool is_byte(int id) const;  // a byte-fallback piece <0xXX>
  int unk_id() const { return unk_id_; }
  int bos_id() const { return bos_id_; }
  int eos_id() const { return eos_id_; }
  int pad_id() const { return pad_id_; }
  // The raw bytes id stands for when it is a piece of a byte sequence (a byte-level token, a <0xXX>
  // piece); false for added tokens and pieces of text.
  bool raw_bytes(int id, std::string* bytes) const;
  const std::vector<int>& prefix_ids() const { return prefix_ids_; }  // post-processor, single sequence
  const std::vector<int>& suffix_ids() const { return suffix_ids_; }

  struct Impl;

 private:
  HfTokenizer();
  std::unique_ptr<Impl> impl_;
  int unk_id_ = -1, bos_id_ = -1, eos_id_ = -1, pad_id_ = -1;
  std::vector<int> prefix_ids_, suffix_ids_;
};

// core/utf8.h's, as the tokenizer's users have named them.
using llamatrain::utf8_lossy;
using llamatrain::utf8_valid;

}  // namespace llamatrain::data
