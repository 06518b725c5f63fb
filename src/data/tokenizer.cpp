// SentencePiece wrapper and incremental decoding; see tokenizer.h.
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <exception>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/utf8.h"
#include "data/hf_tokenizer.h"

namespace llamatrain::data {

Tokenizer::Tokenizer(Unloaded, std::string name)
    : path_(std::move(name)), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

TokenizerLibrary parse_tokenizer_library(const std::string& name, const std::string& what) {
  if (name.empty()) return TokenizerLibrary::kAuto;
  if (name == "sentencepiece") return TokenizerLibrary::kSentencePiece;
  if (name == "huggingface") return TokenizerLibrary::kHuggingFace;
  fail("{}: got {}, expected sentencepiece or huggingface\nhint: huggingface reads a tokenizer.json, "
       "sentencepiece a tokenizer.model",
       what, name);
}

namespace {

std::string inside(const std::string& folder, const char* file) {
  return (std::filesystem::path(folder) / file).string();
}

bool json_file(const std::string& path) {
  if (path.ends_with(".json")) return true;
  if (!is_regular_file(path)) return false;
  std::string head;
  try {
    head = read_small_file(path, size_t(1) << 40, "tokenizer").substr(0, 64);
  } catch (const Error&) {
    return false;
  }
  const size_t i = head.find_first_not_of(" \t\r\n");
  return i != std::string::npos && head[i] == '{';
}

}  // namespace

std::string resolve_tokenizer_path(const std::string& path, TokenizerLibrary library) {
  if (library == TokenizerLibrary::kFile) return path;
  if (!is_directory(path)) {
    if (path_exists(path) || path.ends_with(".json") || path.ends_with(".model")) return path;
    return inside(path, "tokenizer.model");  // a folder that is not there: the file it would hold
  }
  const std::string model = inside(path, "tokenizer.model"), json = inside(path, "tokenizer.json");
  switch (library) {
    case TokenizerLibrary::kSentencePiece: return model;
    case TokenizerLibrary::kHuggingFace: return is_regular_file(json) || !is_regular_file(model) ? json : model;
    default: return is_regular_file(model) || !is_regular_file(json) ? model : json;
  }
}

Tokenizer::Tokenizer(const std::string& path, TokenizerLibrary library)
    : Tokenizer(Unloaded{}, resolve_tokenizer_path(path, library)) {
  const std::string& model_path = path_;
  if (is_directory(model_path)) {
    const std::string json = inside(model_path, "tokenizer.json");
    if (!is_regular_file(inside(model_path, "tokenizer.model")) && is_regular_file(json))
      fail("tokenizer {} is a folder, expected a tokenizer.model or tokenizer.json file\nhint: pass {}", model_path,
           json);
    const std::string inside = model_path + (model_path.ends_with("/") ? "" : "/") + "tokenizer.model";
    fail("tokenizer {} is a folder, expected a tokenizer.model file\nhint: {}", model_path,
         is_regular_file(inside) ? "pass " + inside : "pass the tokenizer.model of the Hugging Face model folder");
  }
  if (!path_exists(model_path))
    fail("tokenizer {}: file not found\nhint: pass the tokenizer.model{} of the Hugging Face model folder", model_path,
         library == TokenizerLibrary::kSentencePiece ? "" : " or tokenizer.json");
  const bool is_json = json_file(model_path);
  if (library == TokenizerLibrary::kSentencePiece && is_json)
    fail("tokenizer {}: a tokenizer.json, but the tokenizer library is sentencepiece\nhint: set the library to "
         "huggingface (model.tokenizer.library, --tokenizer-library), or pass the tokenizer.model",
         model_path);
  if (is_json) {
    sp_.reset();
    hf_ = HfTokenizer::load(model_path);
    return;
  }
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

Tokenizer Tokenizer::share() const {
  if (!hf_) return from_serialized(sp_->serialized_model_proto(), path_);
  Tokenizer t(Unloaded{}, path_);
  t.sp_.reset();
  t.hf_ = hf_;
  return t;
}

void Tokenizer::need_sentencepiece(const char* what) const {
  if (hf_)
    fail("tokenizer {}: {} needs a SentencePiece model, got a Hugging Face tokenizer.json\nhint: use the model's "
         "tokenizer.model (SentencePiece) for this",
         path_, what);
}

void Tokenizer::encode(std::string_view text, std::vector<int>* ids) const {
  if (hf_) return hf_->encode(text, ids);
  ids->clear();
  auto status = sp_->Encode(text, ids);
  CHECK(status.ok(), "sentencepiece encode: {}", status.ToString());
}

void Tokenizer::encode_with_spans(std::string_view text, std::vector<int>* ids,
                                  std::vector<std::pair<uint32_t, uint32_t>>* spans) const {
  if (hf_) return hf_->encode(text, ids, spans);
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

std::string Tokenizer::decode(const std::vector<int>& ids, bool skip_special) const {
  if (hf_) return hf_->decode(ids, skip_special);
  return decode(ids);
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  if (hf_) return hf_->decode(ids, false);
  std::string out;
  auto status = sp_->Decode(ids, &out);
  CHECK(status.ok(), "sentencepiece decode: {}", status.ToString());
  return out;
}

std::string Tokenizer::id_to_piece(int id) const { return hf_ ? hf_->id_to_piece(id) : sp_->IdToPiece(id); }
int Tokenizer::piece_to_id(std::string_view piece) const {
  return hf_ ? hf_->piece_to_id(piece) : sp_->PieceToId(piece);
}
bool Tokenizer::is_byte(int id) const { return hf_ ? hf_->is_byte(id) : sp_->IsByte(id); }
bool Tokenizer::is_control(int id) const { return hf_ ? hf_->is_special(id) : sp_->IsControl(id); }
bool Tokenizer::is_unknown(int id) const { return hf_ ? id >= 0 && id == hf_->unk_id() : sp_->IsUnknown(id); }
bool Tokenizer::is_unused(int id) const { return hf_ ? false : sp_->IsUnused(id); }

bool Tokenizer::raw_bytes(int id, std::string* bytes) const {
  if (hf_) return hf_->raw_bytes(id, bytes);
  unsigned value = 0;
  if (!sp_->IsByte(id) || std::sscanf(sp_->IdToPiece(id).c_str(), "<0x%2X>", &value) != 1) return false;
  *bytes = std::string(1, char(value));
  return true;
}

std::vector<int> Tokenizer::prefix_ids() const { return hf_ ? hf_->prefix_ids() : std::vector<int>(); }
std::vector<int> Tokenizer::suffix_ids() const { return hf_ ? hf_->suffix_ids() : std::vector<int>(); }

Tokenizer Tokenizer::literal() const {
  need_sentencepiece("a literal tokenizer (no dummy prefix, every space kept)");
  // A serialized message read twice merges: a second ModelProto field 3 (normalizer_spec) holding
  // only add_dummy_prefix (field 3) = 0 and remove_extra_whitespaces (field 4) = 0 overrides those
  // two fields and keeps the rest of the spec (protobuf's rule for a repeated embedded message).
  const std::string extra = {'\x1a', '\x04', '\x18', '\x00', '\x20', '\x00'};
  return from_serialized(sp_->serialized_model_proto() + extra, path_ + " (literal)");
}

std::string Tokenizer::serialized_model_proto() const {
  need_sentencepiece("the serialized model (vocabulary extension, merge, export of tokenizer.model)");
  return sp_->serialized_model_proto();
}
int Tokenizer::vocab_size() const { return hf_ ? hf_->vocab_size() : sp_->GetPieceSize(); }
int Tokenizer::bos_id() const { return hf_ ? hf_->bos_id() : sp_->bos_id(); }
int Tokenizer::eos_id() const { return hf_ ? hf_->eos_id() : sp_->eos_id(); }
int Tokenizer::pad_id() const { return hf_ ? hf_->pad_id() : sp_->pad_id(); }

// ---------------------------------------------------------------------------------------------
// DecodeStream

int DecodeStream::held_back() const {
  // Walk back over the trailing tokens of raw bytes (at most 4 bytes can belong to an unfinished
  // character) to the last byte that starts a sequence; hold back the tokens from the one holding it
  // if the sequence is still short.
  const int n = int(ids_.size());
  std::string bytes;
  int bytes_after = 0;  // bytes of the tokens after the current one
  for (int back = 1; back <= 4 && back <= n; ++back) {
    if (!tok_.raw_bytes(ids_[n - back], &bytes)) return 0;
    for (int k = int(bytes.size()) - 1; k >= 0; --k) {
      const int len = utf8_start_length(static_cast<unsigned char>(bytes[k]));
      const int have = bytes_after + int(bytes.size()) - k;  // this byte and those after it
      if (have > 4) return 0;
      if (len == 0) continue;        // a continuation byte: keep looking for its start
      return len > have ? back : 0;  // an unfinished sequence, or a complete (or invalid) one
    }
    bytes_after += int(bytes.size());
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
