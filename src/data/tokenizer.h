// SentencePiece tokenizer (Llama 2's tokenizer.model is a SentencePiece BPE model): a thin wrapper
// around libsentencepiece so the exact same ids come out as in Python. encode() never adds BOS/EOS;
// callers add them explicitly (Llama 2 generation prepends BOS; preprocessing follows NeMo).
// DecodeStream prints generated ids as text while they come, holding back only bytes that a later
// token may still turn into a different character.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <cstdint>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace llamatrain::data {

class Tokenizer {
 public:
  // Throws Error naming the file if it is missing, a folder or not a SentencePiece model.
  explicit Tokenizer(const std::string& model_path);
  // A model held in memory (a serialized ModelProto); `name` stands for the path in messages.
  static Tokenizer from_serialized(const std::string& model_proto, const std::string& name);
  // The same for bytes read from a file the user named: Error naming `name` if they are no model.
  static Tokenizer from_file_bytes(const std::string& model_proto, const std::string& name);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;

  std::vector<int> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int>* ids) const;
  // Ids and, for each, the byte range [begin, end) of `text` it stands for (SentencePiece's offsets:
  // the dummy-prefix piece and all but the last byte piece of a character have an empty range at
  // the next character).
  void encode_with_spans(std::string_view text, std::vector<int>* ids,
                         std::vector<std::pair<uint32_t, uint32_t>>* spans) const;
  std::string decode(const std::vector<int>& ids) const;
  std::string id_to_piece(int id) const;
  int piece_to_id(std::string_view piece) const;  // the unknown id when the model has no such piece
  bool is_byte(int id) const;     // a byte-fallback piece <0xXX>
  bool is_control(int id) const;  // <s>, </s>, a pad piece: decode to nothing
  bool is_unknown(int id) const;  // <unk>
  bool is_unused(int id) const;   // a placeholder that never appears in an encoding
  // The same model with SentencePiece's add_dummy_prefix and remove_extra_whitespaces off: encode()
  // splits exactly the characters it is given (a space as U+2581), without the leading U+2581 the
  // full model adds to a text, and keeps every space. encode("中国") gives the pieces of those two
  // characters; encode(" the") those of "▁the".
  Tokenizer literal() const;
  std::string serialized_model_proto() const;
  int vocab_size() const;
  int bos_id() const;
  int eos_id() const;
  int pad_id() const;  // -1 when the model has none (Llama 2)
  const std::string& path() const { return path_; }

 private:
  struct Unloaded {};
  Tokenizer(Unloaded, std::string name);  // no model yet
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

// Incremental decoding: push() each new id and print what it returns; finish() returns the rest.
// Together the returned pieces are exactly tokenizer.decode(all ids). A run of byte tokens that ends
// inside a UTF-8 character is held back (decoded alone it would read as U+FFFD, and the character
// it becomes would not extend the text printed so far) until the character is complete, broken by
// another byte, or the stream ends.
class DecodeStream {
 public:
  explicit DecodeStream(const Tokenizer& tokenizer) : tok_(tokenizer) {}
  std::string push(int id);
  std::string finish();

 private:
  int held_back() const;  // trailing ids whose text may still change
  const Tokenizer& tok_;
  std::vector<int> ids_;
  std::string emitted_;  // everything returned so far
};

}  // namespace llamatrain::data
