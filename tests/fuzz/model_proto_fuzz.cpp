// Mutation fuzzer of the SentencePiece ModelProto wire reader (data::parse_model_proto), which
// `tokenizer merge` runs on user files: real models mutated by bit flips, random bytes, truncation,
// extension, insertion and deletion. Only llamatrain::Error may come out; an accepted input must
// serialize back to exactly its bytes, and every 16th one also goes to SentencePiece's loader
// (data::Tokenizer::from_file_bytes), as merge does. Usage: model_proto_fuzz [--seconds S]; exit 0 = no crash.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/model_proto.h"
#include "data/tokenizer.h"

using namespace llamatrain;

namespace {

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string mutate(std::string s, std::mt19937& rng) {
  const int kind = static_cast<int>(rng() % 6);
  const size_t at = s.empty() ? 0 : rng() % s.size();
  switch (kind) {
    case 0:  // flip a few bits
      for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n && !s.empty(); ++k)
        s[rng() % s.size()] ^= 1 << (rng() % 8);
      break;
    case 1:  // a random byte, often a varint continuation or a large length
      if (!s.empty()) s[at] = static_cast<char>(rng() % 2 ? 0xFF : rng());
      break;
    case 2: s.resize(at); break;  // truncate
    case 3: s.append(1 + rng() % 16, static_cast<char>(rng())); break;
    case 4: s.insert(at, 1 + rng() % 8, static_cast<char>(rng())); break;
    default: s.erase(at, 1 + rng() % 8); break;
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  for (int i = 1; i + 1 < argc; i++)
    if (std::string(argv[i]) == "--seconds") seconds = std::stod(argv[i + 1]);
  const std::string src = LLAMATRAIN_SOURCE_DIR;
  const std::vector<std::string> seeds = {read(src + "/tests/data/fixtures/tokenizer.model"),
                                          read(src + "/tests/golden/tiny_hf/tokenizer.model")};
  for (const auto& s : seeds)
    if (s.empty()) {
      std::fprintf(stderr, "model_proto_fuzz: a seed model is missing under %s/tests\n", src.c_str());
      return 1;
    }
  std::mt19937 rng(2024);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  long inputs = 0, accepted = 0;
  while (std::chrono::steady_clock::now() < end) {
    std::string x = seeds[rng() % seeds.size()];
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) x = mutate(std::move(x), rng);
    ++inputs;
    try {
      const auto m = data::parse_model_proto(x, "fuzz.model");
      ++accepted;
      if (data::serialize_model_proto(m) != x) {
        std::fprintf(stderr, "model_proto_fuzz: an accepted input does not serialize back to its bytes\n");
        return 1;
      }
      if (accepted % 16 == 0) (void)data::Tokenizer::from_file_bytes(x, "fuzz.model");
    } catch (const Error&) {
    }
  }
  std::printf("model_proto_fuzz: %ld inputs, %ld accepted by the wire reader, no crash\n", inputs, accepted);
  return 0;
}
