// Mutation fuzzer of the tokenizer.json reader (data::HfTokenizer::parse) and encoder: small
// tokenizer.json files written here (byte-level with a Split regex, Metaspace with byte fallback)
// mutated by bit flips, random bytes, truncation, insertion and deletion, and random byte strings
// (invalid UTF-8 included) encoded and decoded by whatever parses. Only llamatrain::Error may come
// out (encoding too: a mutated regex may exceed PCRE2's match limit); spans stay inside the text and
// decoding gives valid UTF-8. Usage: hf_tokenizer_fuzz [--seconds S]; exit 0 = no crash.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/hf_tokenizer.h"

using namespace llamatrain;
using nlohmann::json;

namespace {

std::string seed_byte_level() {
  json vocab = json::object();
  int id = 0;
  for (int c = 0x21; c < 0x7F; ++c) vocab[std::string(1, char(c))] = id++;
  for (const char* s : {"\xC4\xA0", "\xC4\x8A", "he", "ll", "hell", "hello", "\xC4\xA0w"}) vocab[s] = id++;
  return json{
      {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Strip"}}}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", R"((?i:'s|'t)|\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens",
       {{{"id", id}, {"content", "<s>"}, {"special", true}}, {{"id", id + 1}, {"content", "<x>"}, {"lstrip", true}}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w"}},
        {"ignore_merges", true}}}}
      .dump();
}

std::string seed_metaspace() {
  json vocab = {{"<unk>", 0},
                {"\xE2\x96\x81", 1},
                {"a", 2},
                {"\xE2\x96\x81"
                 "a",
                 3}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 4 + b;
  return json{{"pre_tokenizer", {{"type", "Metaspace"}, {"prepend_scheme", "first"}}},
              {"decoder",
               {{"type", "Sequence"},
                {"decoders",
                 {{{"type", "Metaspace"}},
                  {{"type", "ByteFallback"}},
                  {{"type", "Fuse"}},
                  {{"type", "Strip"}, {"content", " "}, {"start", 1}}}}}},
              {"model",
               {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", json::array({json::array({"\xE2\x96\x81", "a"})})},
                {"byte_fallback", true},
                {"unk_token", "<unk>"},
                {"fuse_unk", true}}}}
      .dump();
}

std::string mutate(std::string s, std::mt19937& rng) {
  const int kind = static_cast<int>(rng() % 5);
  const size_t at = s.empty() ? 0 : rng() % s.size();
  switch (kind) {
    case 0:
      for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n && !s.empty(); ++k)
        s[rng() % s.size()] ^= char(1 << (rng() % 8));
      break;
    case 1:
      if (!s.empty()) s[at] = static_cast<char>(rng());
      break;
    case 2: s.resize(at); break;
    case 3: s.insert(at, 1 + rng() % 8, static_cast<char>(rng())); break;
    default: s.erase(at, 1 + rng() % 8); break;
  }
  return s;
}

std::string random_text(std::mt19937& rng) {
  static const std::vector<std::string> parts = {"hello",
                                                 " ",
                                                 "  ",
                                                 "\n",
                                                 "\r\n",
                                                 "中文",
                                                 "'s",
                                                 "123456",
                                                 "<s>",
                                                 "<x>",
                                                 "a",
                                                 "\xE2\x96\x81",
                                                 "\xF0\x9F\x98\x80",
                                                 "e\xCC\x81",
                                                 "\xFF",
                                                 "\xC3",
                                                 "\xED\xA0\x80"};
  std::string s;
  for (int k = 0, n = static_cast<int>(rng() % 24); k < n; ++k) {
    if (rng() % 4 == 0)
      s.push_back(static_cast<char>(rng()));
    else
      s += parts[rng() % parts.size()];
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  for (int i = 1; i + 1 < argc; i++)
    if (std::string(argv[i]) == "--seconds") seconds = std::stod(argv[i + 1]);
  const std::vector<std::string> seeds = {seed_byte_level(), seed_metaspace()};
  for (const auto& s : seeds) (void)data::HfTokenizer::parse(s, "", "seed.json");  // the seeds themselves parse
  std::mt19937 rng(2026);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  long inputs = 0, accepted = 0, texts = 0;
  while (std::chrono::steady_clock::now() < end) {
    std::string x = seeds[rng() % seeds.size()];
    for (int k = 0, n = static_cast<int>(rng() % 3); k < n; ++k) x = mutate(std::move(x), rng);
    ++inputs;
    std::unique_ptr<data::HfTokenizer> tok;
    try {
      tok = data::HfTokenizer::parse(x, rng() % 8 == 0 ? "{\"eos_token\": \"<s>\"}" : "", "fuzz.json");
      ++accepted;
    } catch (const Error&) {
      continue;
    }
    for (int k = 0; k < 8; ++k) {
      const std::string text = random_text(rng);
      std::vector<int> ids;
      std::vector<std::pair<uint32_t, uint32_t>> spans;
      try {
        tok->encode(text, &ids, &spans);
      } catch (const Error&) {
        continue;
      }
      ++texts;
      if (spans.size() != ids.size()) {
        std::fprintf(stderr, "hf_tokenizer_fuzz: %zu spans for %zu ids\n", spans.size(), ids.size());
        return 1;
      }
      for (const auto& [b, e] : spans)
        if (b > e || e > text.size()) {
          std::fprintf(stderr, "hf_tokenizer_fuzz: span [%u, %u) outside a text of %zu bytes\n", b, e, text.size());
          return 1;
        }
      const std::string back = tok->decode(ids);
      if (!data::utf8_valid(back)) {
        std::fprintf(stderr, "hf_tokenizer_fuzz: decode gave invalid UTF-8\n");
        return 1;
      }
      ids.push_back(int(rng() % 1000) - 10);  // ids out of range decode to nothing
      (void)tok->decode(ids, rng() % 2);
    }
  }
  std::printf("hf_tokenizer_fuzz: %ld inputs, %ld accepted, %ld texts encoded, no crash\n", inputs, accepted, texts);
  return 0;
}
