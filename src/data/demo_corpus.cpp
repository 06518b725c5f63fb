// The demo corpus text (written for this project) and the demo tokenizer, encoded by hand in the
// protobuf wire format (Debian ships no sentencepiece_model.pb.h); field numbers from
// sentencepiece_model.proto: ModelProto.pieces = 1 {piece = 1, score = 2, type = 3}, trainer_spec = 2
// {model_type = 3, vocab_size = 4, byte_fallback = 35, unk_id = 40, bos_id = 41, eos_id = 42,
// pad_id = 43}, normalizer_spec = 3 {name = 1, add_dummy_prefix = 3, remove_extra_whitespaces = 4,
// escape_whitespaces = 5}.
#include "data/demo_corpus.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

namespace llamatrain::data {

namespace {

// Protobuf wire format: varints, length-delimited fields (wire type 2), 32-bit floats (type 5).
void put_varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out->push_back(char(v));
}
void put_key(std::string* out, int field, int wire_type) { put_varint(out, uint64_t(field) << 3 | wire_type); }
void put_int(std::string* out, int field, int64_t v) {  // int32/enum/bool; negatives take 10 bytes
  put_key(out, field, 0);
  put_varint(out, uint64_t(v));
}
void put_bytes(std::string* out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out->append(bytes);
}
void put_float(std::string* out, int field, float v) {
  put_key(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out->append(b, 4);
}

enum PieceType { kUnknown = 2, kControl = 3, kByte = 6 };

std::string piece(const std::string& text, PieceType type) {
  std::string p;
  put_bytes(&p, 1, text);
  put_float(&p, 2, 0.0f);
  put_int(&p, 3, type);
  return p;
}

}  // namespace

std::string demo_tokenizer_model() {
  std::string model;
  put_bytes(&model, 1, piece("<unk>", kUnknown));
  put_bytes(&model, 1, piece("<s>", kControl));
  put_bytes(&model, 1, piece("</s>", kControl));
  for (int b = 0; b < 256; ++b) put_bytes(&model, 1, piece(fmt::format("<0x{:02X}>", b), kByte));
  std::string trainer;
  put_int(&trainer, 3, 2);  // model_type BPE
  put_int(&trainer, 4, kDemoVocabSize);
  put_int(&trainer, 35, 1);  // byte_fallback
  put_int(&trainer, 40, 0);  // unk_id
  put_int(&trainer, 41, 1);  // bos_id
  put_int(&trainer, 42, 2);  // eos_id
  put_int(&trainer, 43, -1);  // pad_id: none
  put_bytes(&model, 2, trainer);
  std::string normalizer;
  put_bytes(&normalizer, 1, "identity");
  put_int(&normalizer, 3, 0);  // add_dummy_prefix
  put_int(&normalizer, 4, 0);  // remove_extra_whitespaces
  put_int(&normalizer, 5, 0);  // escape_whitespaces
  put_bytes(&model, 3, normalizer);
  return model;
}

std::string_view demo_corpus() {
  static constexpr std::string_view kText =
      "The river ran past the old mill and under the stone bridge, and every morning the miller walked "
      "down to the water to see how high it had risen in the night. In spring the river was loud and "
      "brown and full of melted snow from the hills. In summer it was slow and green, and children came "
      "to sit on the bridge and drop sticks into the water to see whose stick would win the race to the "
      "other side.\n"
      "The miller had a daughter who liked numbers more than flour. She counted the turns of the wheel, "
      "the sacks on the cart, the birds on the roof, and the steps from the door to the river. One day "
      "she asked her father why the wheel turned faster in spring than in summer. He said that the river "
      "was stronger in spring. She asked why the river was stronger, and he said that the snow on the "
      "hills had melted. She asked why the snow melted, and he laughed and said that the sun was warmer. "
      "She wrote all of it down in a small book, one question on each line and one answer after it.\n"
      "When she was older she built a small wheel of her own from wood and string, and she put it in the "
      "stream behind the house. She measured how many times it turned in a minute on each day of the "
      "year, and she drew the numbers as a line across a page. The line rose in spring and fell in "
      "summer, rose a little with the autumn rain and lay flat under the winter ice. Her father looked at "
      "the page for a long time and said that she had drawn the river.\n"
      "A model that reads text learns in a similar way. It reads a line, guesses the next letter, and "
      "looks at the letter that really came. When the guess is wrong it changes a little, and when the "
      "guess is right it changes less. After many lines the guesses get better, and the model starts to "
      "write words, then phrases, then sentences that sound like the text it has read. It does not know "
      "what a river is, but it knows that the word river is often followed by ran, or was, or water.\n"
      "The miller's daughter would have liked that. She would have counted the guesses and drawn them as "
      "a line across a page, and the line would have fallen quickly at first and then slowly, like the "
      "river after the spring floods, until it lay almost flat. Then she would have asked why it did not "
      "fall to zero, and the answer is that some letters cannot be guessed: the name of a new bird, the "
      "number of sacks on a new day, the first word of a story that has not been told yet.\n";
  return kText;
}

}  // namespace llamatrain::data
