// SentencePiece wrapper and incremental decoding; see tokenizer.h.
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <exception>

#include "core/error.h"
#include "core/file.h"

namespace llamatrain::data {

Tokenizer::Tokenizer(Unloaded, std::string name)
    : path_(std::move(name)), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

Tokenizer::Tokenizer(const std::string& model_path) : Tokenizer(Unloaded{}, model_path) {
  if (is_directory(model_path)) {
    const std::string inside = model_path + (model_path.ends_with("/") ? "" : "/") + "tokenizer.model";
    fail("tokenizer {} is a folder, expected a tokenizer.model file\nhint: {}", model_path,
         is_regular_file(inside) ? "pass " + inside : "pass the tokenizer.model of the Hugging Face model folder");
  }
  if (!path_exists(model_path))
    fail("tokenizer {}: file not found\nhint: pass the tokenizer.model of the Hugging Face model folder", model_path);
  std::string status;
  try {
    auto s = sp_->Load(model_path);
    if (!s.ok()) status = s.ToString();
  } catch (const std::exception& e) {  // the library's stream reads can throw on unreadable files
    status = e.what();
  }
  if (!status.empty())
    fail("tokenizer {}: not a SentencePiece model ({})\nhint: pass the tokenizer.model file (not tokenizer.json)",
         model_path, status);
}

Tokenizer Tokenizer::from_serialized(const std::string& model_proto, const std::string& name) {
  Tokenizer t(Unloaded{}, name);
  auto status = t.sp_->LoadFromSerializedProto(model_proto);
  CHECK(status.ok(), "built-in tokenizer {}: {}", name, status.ToString());
  return t;
}

Tokenizer Tokenizer::from_file_bytes(const std::string& model_proto, const std::string& name) {
  Tokenizer t(Unloaded{}, name);
  auto status = t.sp_->LoadFromSerializedProto(model_proto);
  if (!status.ok())
    fail("tokenizer {}: not a SentencePiece model ({})\nhint: pass a SentencePiece .model file", name,
         status.ToString());
  return t;
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;

void Tokenizer::encode(std::string_view text, std::vector<int>* ids) const {
  ids->clear();
  auto status = sp_->Encode(text, ids);
  CHECK(status.ok(), "sentencepiece encode: {}", status.ToString());
}

void Tokenizer::encode_with_spans(std::string_view text, std::vector<int>* ids,
                                  std::vector<std::pair<uint32_t, uint32_t>>* spans) const {
  sentencepiece::ImmutableSentencePieceText spt;
  auto status = sp_->Encode(text, spt.mutable_proto());
  CHECK(status.ok(), "sentencepiece encode: {}", status.ToString());
  ids->clear();
  spans->clear();
  for (const auto& p : spt.pieces()) {
    ids->push_back(static_cast<int>(p.id()));
    spans->emplace_back(p.begin(), p.end());
  }
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
int Tokenizer::piece_to_id(std::string_view piece) const { return sp_->PieceToId(piece); }
bool Tokenizer::is_byte(int id) const { return sp_->IsByte(id); }
bool Tokenizer::is_control(int id) const { return sp_->IsControl(id); }
bool Tokenizer::is_unknown(int id) const { return sp_->IsUnknown(id); }
bool Tokenizer::is_unused(int id) const { return sp_->IsUnused(id); }

Tokenizer Tokenizer::literal() const {
  // A serialized message read twice merges: a second ModelProto field 3 (normalizer_spec) holding
  // only add_dummy_prefix (field 3) = 0 and remove_extra_whitespaces (field 4) = 0 overrides those
  // two fields and keeps the rest of the spec (protobuf's rule for a repeated embedded message).
  const std::string extra = {'\x1a', '\x04', '\x18', '\x00', '\x20', '\x00'};
  return from_serialized(sp_->serialized_model_proto() + extra, path_ + " (literal)");
}

std::string Tokenizer::serialized_model_proto() const { return sp_->serialized_model_proto(); }
int Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int Tokenizer::bos_id() const { return sp_->bos_id(); }
int Tokenizer::eos_id() const { return sp_->eos_id(); }
int Tokenizer::pad_id() const { return sp_->pad_id(); }

// ---------------------------------------------------------------------------------------------
// DecodeStream

namespace {

// Length of the UTF-8 sequence a byte starts: 1..4, 0 for a continuation byte, -1 for a byte that
// never starts one (C0, C1, F5..FF).
int utf8_length(unsigned b) {
  if (b < 0x80) return 1;
  if (b < 0xC0) return 0;
  if (b < 0xC2) return -1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  if (b < 0xF5) return 4;
  return -1;
}

}  // namespace

int DecodeStream::held_back() const {
  // Walk back over the trailing byte tokens (at most 3 can belong to an unfinished character) to the
  // last byte that starts a sequence; hold it and what follows if the sequence is still short.
  const int n = int(ids_.size());
  for (int back = 1; back <= 4 && back <= n; ++back) {
    const int id = ids_[n - back];
    if (!tok_.is_byte(id)) return 0;
    unsigned value = 0;
    if (std::sscanf(tok_.id_to_piece(id).c_str(), "<0x%2X>", &value) != 1) return 0;
    const int len = utf8_length(value);
    if (len == 0) continue;                 // a continuation byte: keep looking for its start
    return len > back ? back : 0;           // an unfinished sequence, or a complete (or invalid) one
  }
  return 0;
}

std::string DecodeStream::push(int id) {
  ids_.push_back(id);
  const int hold = held_back();
  const std::string text = tok_.decode(std::vector<int>(ids_.begin(), ids_.end() - hold));
  if (text.size() < emitted_.size() || text.compare(0, emitted_.size(), emitted_) != 0) return {};
  std::string fresh = text.substr(emitted_.size());
  emitted_ = text;
  return fresh;
}

std::string DecodeStream::finish() {
  const std::string text = tok_.decode(ids_);
  std::string fresh = text.size() > emitted_.size() ? text.substr(emitted_.size()) : std::string();
  emitted_ = text;
  return fresh;
}

}  // namespace llamatrain::data
