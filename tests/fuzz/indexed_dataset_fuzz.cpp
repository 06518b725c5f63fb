// Mutation fuzzer of the Megatron .idx parser (data::parse_index) and the mmap reader: valid seed
// indexes (uint16/int32/int64, empty, multi-sequence documents) are mutated (bit flips, interesting
// values in header fields, truncation, extension, insert/delete, splices) and parsed against
// several .bin sizes. Only llamatrain::Error may come out; a parse that succeeds must describe
// sequences that lie inside the .bin (checked here), and every 64th input also goes through
// IndexedDataset from real files with every token read. Usage: indexed_dataset_fuzz --seconds S [--seed N]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"

using namespace llamatrain;
using namespace llamatrain::data;

namespace {

using Bytes = std::vector<uint8_t>;

template <typename T>
void put(Bytes* b, T v) {
  uint8_t tmp[sizeof(T)];
  std::memcpy(tmp, &v, sizeof(T));
  b->insert(b->end(), tmp, tmp + sizeof(T));
}

// Hand-encoded .idx (docs/formats.md 1.2) for documents made of sequences of the given sizes.
Bytes make_index(uint8_t code, int itemsize, const std::vector<std::vector<int32_t>>& docs, uint64_t* bin_size) {
  std::vector<int32_t> sizes;
  std::vector<int64_t> doc_idx{0};
  for (const auto& d : docs) {
    for (int32_t s : d) sizes.push_back(s);
    doc_idx.push_back(static_cast<int64_t>(sizes.size()));
  }
  Bytes b(kIndexMagic, kIndexMagic + 9);
  put<uint64_t>(&b, 1);
  b.push_back(code);
  put<uint64_t>(&b, sizes.size());
  put<uint64_t>(&b, doc_idx.size());
  for (int32_t s : sizes) put<int32_t>(&b, s);
  int64_t p = 0;
  for (int32_t s : sizes) {
    put<int64_t>(&b, p);
    p += static_cast<int64_t>(s) * itemsize;
  }
  for (int64_t d : doc_idx) put<int64_t>(&b, d);
  *bin_size = static_cast<uint64_t>(p);
  return b;
}

struct Seed {
  Bytes idx;
  uint64_t bin_size;
};

const uint64_t kInteresting[] = {0,
                                 1,
                                 2,
                                 3,
                                 7,
                                 8,
                                 0x7f,
                                 0x80,
                                 0xff,
                                 0x7fff,
                                 0xffff,
                                 0x7fffffff,
                                 0x80000000ull,
                                 0xffffffffull,
                                 1ull << 32,
                                 1ull << 62,
                                 0x7fffffffffffffffull,
                                 0x8000000000000000ull,
                                 ~0ull,
                                 ~0ull - 1};

Bytes mutate(const std::vector<Seed>& seeds, const Bytes& in, std::mt19937_64& rng) {
  Bytes b = in;
  int rounds = 1 + static_cast<int>(rng() % 4);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 9) {
      case 0:  // flip a bit
        if (!b.empty()) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // random byte
        if (!b.empty()) b[rng() % b.size()] = static_cast<uint8_t>(rng());
        break;
      case 2: {  // interesting value into a header field or array slot
        static const size_t fields[] = {9, 17, 18, 26};
        size_t off = rng() % 2 ? fields[rng() % 4] : (b.empty() ? 0 : rng() % b.size());
        uint64_t v = kInteresting[rng() % (sizeof(kInteresting) / 8)];
        int width = (rng() % 2) ? 8 : 4;
        for (int i = 0; i < width && off + i < b.size(); ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
        break;
      }
      case 3:  // truncate
        if (!b.empty()) b.resize(rng() % b.size());
        break;
      case 4: {  // extend
        size_t n = 1 + rng() % 24;
        for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(rng()));
        break;
      }
      case 5:  // insert a byte
        b.insert(b.begin() + static_cast<long>(b.empty() ? 0 : rng() % b.size()), static_cast<uint8_t>(rng()));
        break;
      case 6:  // delete a byte
        if (!b.empty()) b.erase(b.begin() + static_cast<long>(rng() % b.size()));
        break;
      case 7: {  // splice the tail of another seed
        const Bytes& o = seeds[rng() % seeds.size()].idx;
        size_t cut = b.empty() ? 0 : rng() % b.size(), from = o.empty() ? 0 : rng() % o.size();
        b.resize(cut);
        b.insert(b.end(), o.begin() + static_cast<long>(from), o.end());
        break;
      }
      case 8:  // dtype code
        if (b.size() > 17) b[17] = static_cast<uint8_t>(rng() % 10);
        break;
    }
  }
  return b;
}

[[noreturn]] void crash(const char* what, const Bytes& b) {
  std::fprintf(stderr, "FUZZ FAILURE: %s on a %zu-byte input:", what, b.size());
  for (size_t i = 0; i < b.size() && i < 256; ++i) std::fprintf(stderr, " %02x", b[i]);
  std::fprintf(stderr, "\n");
  std::abort();
}

// A successful parse must describe sequences inside the .bin, exactly covering it.
void check_view(const IndexView& v, uint64_t bin_size, const Bytes& b) {
  uint64_t end = 0;
  const uint64_t item = static_cast<uint64_t>(dtype_itemsize(v.dtype));
  for (uint64_t i = 0; i < v.num_sequences; ++i) {
    int32_t s;
    int64_t p;
    std::memcpy(&s, v.sizes + 4 * i, 4);
    std::memcpy(&p, v.pointers + 8 * i, 8);
    if (s < 0 || p < 0 || static_cast<uint64_t>(p) + static_cast<uint64_t>(s) * item > bin_size)
      crash("accepted a sequence outside the .bin", b);
    end = static_cast<uint64_t>(p) + static_cast<uint64_t>(s) * item;
  }
  if (v.num_sequences > 0 && end != bin_size) crash("accepted an index that does not cover the .bin", b);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0)
      seconds = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--seed") == 0)
      seed = std::strtoull(argv[++i], nullptr, 10);
  }
  std::vector<Seed> seeds;
  auto add = [&](uint8_t code, int item, std::vector<std::vector<int32_t>> docs) {
    Seed s;
    s.idx = make_index(code, item, docs, &s.bin_size);
    seeds.push_back(s);
  };
  add(8, 2, {{3}, {4}});                 // the docs/formats.md 1.7 vector
  add(8, 2, {});                         // empty dataset
  add(4, 4, {{1, 2}, {}, {0, 5}, {7}});  // int32, multi-sequence and empty documents
  add(5, 8, {{2}, {9}, {1}});
  add(1, 1, {{0}, {0}, {100}});

  // Real files for the occasional full-reader pass.
  std::string dir = std::filesystem::temp_directory_path() / ("idx_fuzz_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string prefix = dir + "/f";

  std::mt19937_64 rng(seed);
  auto t0 = std::chrono::steady_clock::now();
  uint64_t runs = 0, accepted = 0, file_runs = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    for (int inner = 0; inner < 256; ++inner, ++runs) {
      const Seed& s = seeds[rng() % seeds.size()];
      Bytes b = mutate(seeds, s.idx, rng);
      // The .bin size: the seed's, or a nearby/odd one.
      uint64_t bin_sizes[3] = {s.bin_size, s.bin_size + (rng() % 5) - 2, rng() % 64};
      for (uint64_t bin_size : bin_sizes) {
        // Copy into an exactly-sized heap buffer so ASan catches any read past the end.
        std::unique_ptr<uint8_t[]> buf(new uint8_t[b.size() ? b.size() : 1]);
        if (!b.empty()) std::memcpy(buf.get(), b.data(), b.size());
        try {
          IndexView v = parse_index(buf.get(), b.size(), "fuzz.idx", bin_size, "fuzz.bin");
          check_view(v, bin_size, b);
          ++accepted;
        } catch (const Error&) {
        } catch (const std::exception& e) {
          crash(e.what(), b);
        } catch (...) {
          crash("non-Error exception", b);
        }
      }
      if (runs % 64 == 0) {  // through files, mmap and every accessor
        ++file_runs;
        std::FILE* f = std::fopen((prefix + ".idx").c_str(), "wb");
        if (!b.empty()) std::fwrite(b.data(), 1, b.size(), f);
        std::fclose(f);
        f = std::fopen((prefix + ".bin").c_str(), "wb");
        std::vector<uint8_t> bin(bin_sizes[rng() % 2] % (1 << 20), 0x11);
        if (!bin.empty()) std::fwrite(bin.data(), 1, bin.size(), f);
        std::fclose(f);
        try {
          IndexedDataset ds(prefix);
          std::vector<int64_t> tokens;
          for (int64_t i = 0; i < ds.num_sequences(); ++i) {
            tokens.resize(ds.sequence_length(i));
            ds.read(i, 0, static_cast<int64_t>(tokens.size()), tokens.data());
          }
          for (int64_t k = 0; k <= ds.num_documents(); ++k) (void)ds.document_index(k);
        } catch (const Error&) {
        } catch (...) {
          crash("non-Error exception from IndexedDataset", b);
        }
      }
    }
  }
  std::filesystem::remove_all(dir);
  std::printf("indexed_dataset_fuzz: %llu inputs (%llu parses accepted, %llu through files) in %.0f s, no crash\n",
              static_cast<unsigned long long>(runs), static_cast<unsigned long long>(accepted),
              static_cast<unsigned long long>(file_runs), seconds);
  return 0;
}
