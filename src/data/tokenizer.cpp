// SentencePiece wrapper; see tokenizer.h.
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "core/error.h"

namespace llamatrain::data {

Tokenizer::Tokenizer(const std::string& model_path)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  if (!std::filesystem::exists(model_path))
    fail("tokenizer {}: file not found\nhint: pass the tokenizer.model of the Hugging Face model folder", model_path);
  auto status = sp_->Load(model_path);
  if (!status.ok())
    fail("tokenizer {}: not a SentencePiece model ({})\nhint: pass the tokenizer.model file (not tokenizer.json)",
         model_path, status.ToString());
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;

void Tokenizer::encode(std::string_view text, std::vector<int>* ids) const {
  ids->clear();
  auto status = sp_->Encode(text, ids);
  CHECK(status.ok(), "sentencepiece encode: {}", status.ToString());
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  encode(text, &ids);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string out;
  auto status = sp_->Decode(ids, &out);
  CHECK(status.ok(), "sentencepiece decode: {}", status.ToString());
  return out;
}

std::string Tokenizer::id_to_piece(int id) const { return sp_->IdToPiece(id); }
int Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int Tokenizer::bos_id() const { return sp_->bos_id(); }
int Tokenizer::eos_id() const { return sp_->eos_id(); }
int Tokenizer::pad_id() const { return sp_->pad_id(); }

}  // namespace llamatrain::data
