// Mutation fuzzer for the GPT index cache loader (load_gpt_index): valid cache files with flipped
// bytes, random header fields, truncation and extension must be refused or, if accepted, yield
// indices that stay inside their arrays. Usage: gpt_index_cache_fuzz [--seconds S]; exit 0 = no crash.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "data/gpt_dataset.h"

using namespace llamatrain::data;

int main(int argc, char** argv) {
  double seconds = 10;
  for (int i = 1; i + 1 < argc; i++)
    if (std::string(argv[i]) == "--seconds") seconds = std::stod(argv[i + 1]);
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("gpt_index_cache_fuzz_" + std::to_string(getpid()));
  fs::create_directories(dir);

  // Seed inputs: caches of a few small splits.
  std::mt19937 rng(12345);
  std::vector<std::string> seeds;
  std::vector<std::pair<std::string, SplitRange>> keys;
  for (int c = 0; c < 4; c++) {
    std::vector<std::vector<int32_t>> seqs(size_t(10 + 7 * c));
    for (auto& s : seqs) s.assign(rng() % 20, 7);
    seqs[0].assign(30, 1);
    InMemoryTokenSource src(seqs, "fuzz");
    std::vector<int32_t> sizes;
    for (auto& s : seqs) sizes.push_back(int32_t(s.size()));
    SplitRange range{true, 0, int64_t(seqs.size())};
    GptIndexParams p;
    p.seq_length = 3 + c;
    p.num_samples = 5 + 20 * c;
    p.seed = uint32_t(c);
    GptIndex idx = build_gpt_index(sizes.data(), int64_t(sizes.size()), range, p);
    std::string key = gpt_index_cache_key(src, Split::train, range, p);
    std::string path = (dir / ("seed" + std::to_string(c))).string();
    save_gpt_index(path, key, idx);
    std::ifstream f(path, std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    keys.emplace_back(key, range);
  }

  std::string path = (dir / "case").string();
  auto start = std::chrono::steady_clock::now();
  long runs = 0, accepted = 0;
  volatile int64_t sink = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    size_t which = rng() % seeds.size();
    std::string b = seeds[which];
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !b.empty(); e++) {
      switch (rng() % 5) {
        case 0: b[rng() % b.size()] ^= char(1 << (rng() % 8)); break;
        case 1: b.resize(rng() % b.size()); break;
        case 2: b.append(rng() % 64, char(rng())); break;
        case 3: {  // a random 8-byte header field
          size_t off = 16 + 8 * (rng() % 6);
          uint64_t v = (uint64_t(rng()) << 32) | rng();
          if (rng() % 2) v %= 1000;
          if (off + 8 <= b.size()) std::memcpy(&b[off], &v, 8);
          break;
        }
        default: b[rng() % b.size()] = char(rng()); break;
      }
    }
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << b; }
    GptIndex idx;
    std::string why;
    if (load_gpt_index(path, keys[which].first, keys[which].second, &idx, &why)) {
      accepted++;
      for (int64_t i = 0; i < idx.num_samples; i++) sink = sink + idx.sample_index[2 * idx.shuffle_index[i]];
      for (int64_t i = 0; i < idx.doc_index_size; i++) sink = sink + idx.doc_index[i];
    }
    runs++;
  }
  fs::remove_all(dir);
  std::printf("gpt_index_cache_fuzz: %ld runs, %ld accepted (unmodified or equivalent), no crash\n", runs, accepted);
  return 0;
}
