// SentencePiece's ModelProto read and written at the protobuf wire level, without protobuf: the
// pieces (field 1: {1 piece, 2 score, 3 type}) are decoded; every other top-level field (trainer
// and normalizer specs, self-test data, ...) and every field of a piece that is not one of those
// three is kept byte for byte, so serialize(parse(x)) == x for any model the library wrote.
// Leaves out: editing the specs (they are opaque bytes here).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llamatrain::data {

// ModelProto.SentencePiece.Type
enum class PieceType : int { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
const char* piece_type_name(PieceType t);

struct ModelPiece {
  std::string piece;
  float score = 0.0f;
  PieceType type = PieceType::kNormal;
  std::string raw;  // the record's bytes as read (kept on write); empty for a new piece (encoded on write)
};

struct ModelProtoFile {
  std::vector<ModelPiece> pieces;  // in id order
  std::string before;              // top-level fields that preceded the first piece, as read
  std::string after;               // every other top-level field, in the order read
};

// Parses a serialized ModelProto; throws Error naming `name` (the file) on truncated or malformed bytes.
ModelProtoFile parse_model_proto(std::string_view bytes, const std::string& name);
// The wire bytes: `before`, each piece (raw if it has one, else {1,2,3} encoded; type NORMAL is
// written like protobuf does, by omitting the default), then `after`.
std::string serialize_model_proto(const ModelProtoFile& model);

// Wire-format primitives (exposed for tests).
void append_varint(std::string* out, uint64_t v);
void append_piece_record(std::string* out, const ModelPiece& p);  // field 1, length-delimited

}  // namespace llamatrain::data
