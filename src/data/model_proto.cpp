// ModelProto wire reader and writer; see model_proto.h. Wire types: 0 varint, 1 fixed64,
// 2 length-delimited, 5 fixed32 (3/4, groups, do not occur in ModelProto and are refused).
#include "data/model_proto.h"

#include <cstring>

#include "core/error.h"

namespace llamatrain::data {

const char* piece_type_name(PieceType t) {
  switch (t) {
    case PieceType::kNormal: return "NORMAL";
    case PieceType::kUnknown: return "UNKNOWN";
    case PieceType::kControl: return "CONTROL";
    case PieceType::kUserDefined: return "USER_DEFINED";
    case PieceType::kUnused: return "UNUSED";
    case PieceType::kByte: return "BYTE";
  }
  return "?";
}

namespace {

constexpr const char* kHint =
    "hint: pass a SentencePiece .model file (Llama's tokenizer.model, or one written by llamatrain tokenizer train)";

// Reads fields of one message in [p, end); every read is bounds checked.
class WireReader {
 public:
  WireReader(std::string_view bytes, const std::string& name, const char* what)
      : p_(bytes.data()), begin_(bytes.data()), end_(bytes.data() + bytes.size()), name_(name), what_(what) {}
  bool done() const { return p_ >= end_; }
  const char* pos() const { return p_; }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) bad("truncated varint");
      const uint8_t b = static_cast<uint8_t>(*p_++);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad("varint longer than 10 bytes");
  }
  // Reads a tag; returns field number and sets *wire_type.
  uint32_t tag(int* wire_type) {
    const uint64_t t = varint();
    *wire_type = static_cast<int>(t & 7);
    const uint64_t field = t >> 3;
    if (field == 0 || field > 0x1fffffff) bad("field number 0 or out of range");
    return static_cast<uint32_t>(field);
  }
  std::string_view bytes(uint64_t n) {
    if (n > static_cast<uint64_t>(end_ - p_)) bad("a field runs past the end of the data");
    std::string_view v(p_, n);
    p_ += n;
    return v;
  }
  // Skips the value of a field of the given wire type.
  void skip(int wire_type) {
    switch (wire_type) {
      case 0: varint(); return;
      case 1: bytes(8); return;
      case 2: bytes(varint()); return;
      case 5: bytes(4); return;
      default: bad("unsupported wire type " + std::to_string(wire_type));
    }
  }
  [[noreturn]] void bad(const std::string& why) const {
    fail("{}: not a valid SentencePiece model ({} at byte {} of the {}, {} bytes)\n{}", name_, why, p_ - begin_, what_,
         end_ - begin_, kHint);
  }

 private:
  const char* p_;
  const char* begin_;
  const char* end_;
  const std::string& name_;
  const char* what_;
};

ModelPiece parse_piece(std::string_view record, std::string_view raw, const std::string& name, size_t index) {
  ModelPiece p;
  p.raw = std::string(raw);
  WireReader r(record, name, "piece record");
  bool has_piece = false;
  while (!r.done()) {
    int wt = 0;
    const uint32_t field = r.tag(&wt);
    if (field == 1 && wt == 2) {
      p.piece = std::string(r.bytes(r.varint()));
      has_piece = true;
    } else if (field == 2 && wt == 5) {
      auto b = r.bytes(4);
      std::memcpy(&p.score, b.data(), 4);
    } else if (field == 3 && wt == 0) {
      const uint64_t t = r.varint();
      if (t < 1 || t > 6) r.bad(fmt::format("piece {} has type {}, expected 1..6", index, t));
      p.type = static_cast<PieceType>(t);
    } else {
      r.skip(wt);
    }
  }
  if (!has_piece) r.bad(fmt::format("piece {} has no text", index));
  return p;
}

}  // namespace

ModelProtoFile parse_model_proto(std::string_view bytes, const std::string& name) {
  ModelProtoFile m;
  if (bytes.empty()) fail("{}: empty file, expected a SentencePiece model\n{}", name, kHint);
  WireReader r(bytes, name, "file");
  bool seen_other_after_pieces = false;
  while (!r.done()) {
    const char* start = r.pos();
    int wt = 0;
    const uint32_t field = r.tag(&wt);
    if (field == 1) {
      if (wt != 2) r.bad("pieces field with wire type " + std::to_string(wt));
      const uint64_t n = r.varint();
      auto record = r.bytes(n);
      std::string_view raw(start, static_cast<size_t>(r.pos() - start));
      if (seen_other_after_pieces) r.bad("pieces interleaved with other fields");
      m.pieces.push_back(parse_piece(record, raw, name, m.pieces.size()));
    } else {
      r.skip(wt);
      std::string_view raw(start, static_cast<size_t>(r.pos() - start));
      if (m.pieces.empty()) {
        m.before.append(raw);
      } else {
        m.after.append(raw);
        seen_other_after_pieces = true;
      }
    }
  }
  if (m.pieces.empty()) fail("{}: the model has no pieces, expected a SentencePiece model\n{}", name, kHint);
  return m;
}

void append_varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void append_piece_record(std::string* out, const ModelPiece& p) {
  std::string body;
  append_varint(&body, (1 << 3) | 2);
  append_varint(&body, p.piece.size());
  body += p.piece;
  append_varint(&body, (2 << 3) | 5);
  char f[4];
  std::memcpy(f, &p.score, 4);
  body.append(f, 4);
  if (p.type != PieceType::kNormal) {  // NORMAL is the default, omitted as protobuf does
    append_varint(&body, (3 << 3) | 0);
    append_varint(&body, static_cast<uint64_t>(p.type));
  }
  append_varint(out, (1 << 3) | 2);
  append_varint(out, body.size());
  *out += body;
}

std::string serialize_model_proto(const ModelProtoFile& model) {
  std::string out = model.before;
  for (const auto& p : model.pieces) {
    if (!p.raw.empty()) {
      out += p.raw;
    } else {
      append_piece_record(&out, p);
    }
  }
  out += model.after;
  return out;
}

}  // namespace llamatrain::data
