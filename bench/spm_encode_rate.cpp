// Raw SentencePiece encoding rate on one thread, the yardstick of bench/preprocess_bench.sh: reads
// a JSONL corpus with the same reader as `llamatrain preprocess`, and times only the Encode calls
// (data::Tokenizer::encode) on the same texts, in wall time and in this thread's CPU time (the
// latter is what to compare on a busy machine). Prints text MB/s and docs/s on one line.
// Usage: spm_encode_rate --tokenizer-model M --input corpus.jsonl [--key text]
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/jsonl_reader.h"
#include "data/tokenizer.h"

using namespace llamatrain;

static double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int main(int argc, char** argv) {
  std::string model, input, key = "text";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizer-model"))
      model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--input"))
      input = argv[i + 1];
    else if (!std::strcmp(argv[i], "--key"))
      key = argv[i + 1];
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
    double encode_s = 0, encode_cpu_s = 0;
    uint64_t text_bytes = 0, docs = 0, tokens = 0;
    std::string_view line;
    while (reader.next(&line)) {
      padded.assign(line);
      padded.append(data::kJsonPadding, '\0');
      int detail = 0;
      if (ex.extract(padded.data(), line.size(), &values, &detail) != data::LineStatus::kOk) continue;
      auto t0 = std::chrono::steady_clock::now();
      double c0 = thread_cpu_s();
      tok.encode(values[0], &ids);
      encode_cpu_s += thread_cpu_s() - c0;
      encode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      text_bytes += line.size() + 1;  // the same byte count preprocess reports (whole lines)
      ++docs;
      tokens += ids.size();
    }
    std::printf("encode_s=%.3f encode_cpu_s=%.3f docs=%llu tokens=%llu text_bytes=%llu encode_mb_s=%.3f "
                "encode_cpu_mb_s=%.3f encode_docs_s=%.1f\n",
                encode_s, encode_cpu_s, static_cast<unsigned long long>(docs), static_cast<unsigned long long>(tokens),
                static_cast<unsigned long long>(text_bytes), text_bytes / encode_s / 1e6,
                text_bytes / encode_cpu_s / 1e6, docs / encode_s);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
