// SentencePiece tokenizer (Llama 2's tokenizer.model is a SentencePiece BPE model): a thin wrapper
// around libsentencepiece so the exact same ids come out as in Python. encode() never adds BOS/EOS;
// callers add them explicitly (Llama 2 generation prepends BOS; preprocessing follows NeMo).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace llamatrain::data {

class Tokenizer {
 public:
  // Throws Error naming the file if it is missing or not a SentencePiece model.
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;

  std::vector<int> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int>* ids) const;
  std::string decode(const std::vector<int>& ids) const;
  std::string id_to_piece(int id) const;
  int vocab_size() const;
  int bos_id() const;
  int eos_id() const;
  int pad_id() const;  // -1 when the model has none (Llama 2)
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace llamatrain::data
