// The tokenizer: a SentencePiece model (Llama 2's tokenizer.model, through libsentencepiece so the
// exact same ids come out as in Python) or a Hugging Face tokenizer.json (Llama 3, Qwen2.5: hf_tokenizer.h).
// The file picks the implementation (see the constructor). encode() never adds BOS/EOS; callers add
// them explicitly (Llama 2 generation prepends BOS; preprocessing follows NeMo).
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

class HfTokenizer;

// Which implementation reads a tokenizer path. A file is read by its kind under every value: a .json
// file (tokenizer.json, or any file that starts with a JSON object) as Hugging Face's, any other as a
// SentencePiece model (kSentencePiece refuses a tokenizer.json). Folders: kFile refuses them (an option that
// names a file); kAuto gives the folder's tokenizer.model when it has one, else its tokenizer.json;
// kHuggingFace its tokenizer.json when it has one, else its tokenizer.model (as Hugging Face's own
// loader falls back to it); kSentencePiece its tokenizer.model.
enum class TokenizerLibrary { kFile, kAuto, kSentencePiece, kHuggingFace };
// "sentencepiece" | "huggingface" | "" (kAuto); Error naming `what` otherwise.
TokenizerLibrary parse_tokenizer_library(const std::string& name, const std::string& what);
// The file a path stands for under `library`: the path itself when it is a file or names one (.json,
// .model); a missing folder stands for its tokenizer.model.
std::string resolve_tokenizer_path(const std::string& path, TokenizerLibrary library);

class Tokenizer {
 public:
  // Throws Error naming the file if it is missing or no tokenizer of its kind.
  explicit Tokenizer(const std::string& model_path, TokenizerLibrary library = TokenizerLibrary::kFile);
  // A model held in memory (a serialized ModelProto); `name` stands for the path in messages.
  static Tokenizer from_serialized(const std::string& model_proto, const std::string& name);
  // The same for bytes read from a file the user named: Error naming `name` if they are no model.
  static Tokenizer from_file_bytes(const std::string& model_proto, const std::string& name);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  // Another handle for another thread: a tokenizer.json's tables are shared (its encoding is
  // thread-safe), a SentencePiece model is loaded again from its bytes.
  Tokenizer share() const;

  std::vector<int> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int>* ids) const;
  // Ids and, for each, the byte range [begin, end) of `text` it stands for (SentencePiece's offsets:
  // the dummy-prefix piece and all but the last byte piece of a character have an empty range at
  // the next character).
  void encode_with_spans(std::string_view text, std::vector<int>* ids,
                         std::vector<std::pair<uint32_t, uint32_t>>* spans) const;
  // SentencePiece: control pieces decode to nothing. tokenizer.json: special tokens are written out
  // (Hugging Face's decode default), unless skip_special.
  std::string decode(const std::vector<int>& ids) const;
  std::string decode(const std::vector<int>& ids, bool skip_special) const;
  std::string id_to_piece(int id) const;
  // SentencePiece: the unknown id when the model has no such piece. tokenizer.json: added and special
  // tokens by their content ("<|im_start|>"), then the vocabulary as the file writes it ("Ġthe"); -1
  // when neither has it.
  int piece_to_id(std::string_view piece) const;
  bool is_byte(int id) const;     // a byte-fallback piece <0xXX>
  bool is_control(int id) const;  // <s>, </s>, a pad piece; tokenizer.json: a special added token
  bool is_unknown(int id) const;  // <unk>
  bool is_unused(int id) const;   // a placeholder that never appears in an encoding
  // The raw bytes an id stands for when it is a piece of a byte sequence (a <0xXX> piece, a
  // byte-level BPE token); false for text pieces and special tokens.
  bool raw_bytes(int id, std::string* bytes) const;
  bool is_huggingface() const { return hf_ != nullptr; }
  // What the tokenizer's own post-processor adds around a text (tokenizer.json; SentencePiece: none).
  std::vector<int> prefix_ids() const;
  std::vector<int> suffix_ids() const;
  // The same model with SentencePiece's add_dummy_prefix and remove_extra_whitespaces off: encode()
  // splits exactly the characters it is given (a space as U+2581), without the leading U+2581 the
  // full model adds to a text, and keeps every space. encode("中国") gives the pieces of those two
  // characters; encode(" the") those of "▁the".
  // literal() and serialized_model_proto() need a SentencePiece model (Error on a tokenizer.json).
  Tokenizer literal() const;
  std::string serialized_model_proto() const;
  int vocab_size() const;
  // -1 where the tokenizer has none (Qwen has no BOS). tokenizer.json: tokenizer_config.json's
  // bos_token/eos_token/pad_token when the folder has that file and names them; else BOS is the
  // post-processor's first added token, EOS its last one after the text, else the special token
  // </s>, <|end_of_text|>, <|endoftext|>, <eos> or <|im_end|> (the first the file has); no pad.
  int bos_id() const;
  int eos_id() const;
  int pad_id() const;  // -1 when the model has none (Llama 2)
  const std::string& path() const { return path_; }

 private:
  struct Unloaded {};
  Tokenizer(Unloaded, std::string name);  // no model yet
  // Error naming the operation unless the tokenizer is a SentencePiece model.
  void need_sentencepiece(const char* what) const;
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;  // exactly one of sp_ and hf_ is set
  std::shared_ptr<const HfTokenizer> hf_;
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
