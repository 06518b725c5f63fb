// Raw SentencePiece encoding rate on one thread, the yardstick of bench/preprocess_bench.sh: reads
// a JSONL corpus with the same reader as `llamatrain preprocess`, and times only the Encode calls
// (data::Tokenizer::encode) on the same texts. Prints text MB/s and docs/s on one line.
// Usage: spm_encode_rate --tokenizer-model M --input corpus.jsonl [--key text]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/jsonl_reader.h"
#include "data/tokenizer.h"

using namespace llamatrain;

int main(int argc, char** argv) {
  std::string model, input, key = "text";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizer-model")) model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--input")) input = argv[i + 1];
    else if (!std::strcmp(argv[i], "--key")) key = argv[i + 1];
  }
  if (model.empty() || input.empty()) {
    std::fprintf(stderr, "usage: spm_encode_rate --tokenizer-model M --input corpus.jsonl [--key text]\n");
    return 2;
  }
  try {
    data::Tokenizer tok(model);
    data::LineReader reader(input);
    data::JsonFieldExtractor ex({key});
    std::vector<std::string_view> values;
    std::vector<int> ids;
    std::string padded;
    double encode_s = 0;
    uint64_t text_bytes = 0, docs = 0, tokens = 0;
    std::string_view line;
    while (reader.next(&line)) {
      padded.assign(line);
      padded.append(data::kJsonPadding, '\0');
      int detail = 0;
      if (ex.extract(padded.data(), line.size(), &values, &detail) != data::LineStatus::kOk) continue;
      auto t0 = std::chrono::steady_clock::now();
      tok.encode(values[0], &ids);
      encode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      text_bytes += line.size() + 1;  // the same byte count preprocess reports (whole lines)
      ++docs;
      tokens += ids.size();
    }
    std::printf("encode_s=%.3f docs=%llu tokens=%llu text_bytes=%llu encode_mb_s=%.3f encode_docs_s=%.1f\n", encode_s,
                static_cast<unsigned long long>(docs), static_cast<unsigned long long>(tokens),
                static_cast<unsigned long long>(text_bytes), text_bytes / encode_s / 1e6, docs / encode_s);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
