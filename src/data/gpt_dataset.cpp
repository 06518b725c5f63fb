// GPT sample construction; see gpt_dataset.h. Step numbers refer to docs/formats.md §2.
#include "data/gpt_dataset.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "core/error.h"
#include "core/file.h"

namespace llamatrain::data {

// ---------------------------------------------------------------------------------------------
// numpy RandomState
// ---------------------------------------------------------------------------------------------

double NumpyRandomState::random_sample() {
  // numpy legacy double: 27 high bits of one draw and 26 of the next -> 53-bit mantissa.
  uint32_t a = next_u32() >> 5, b = next_u32() >> 6;
  return (double(a) * 67108864.0 + double(b)) / 9007199254740992.0;
}

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;  // smallest all-ones mask >= max
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t v;
  if (max <= 0xffffffffull) {
    while ((v = (next_u32() & mask)) > max) {
    }
  } else {
    while ((v = (next_u64() & mask)) > max) {
    }
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Splits (§2.1)
// ---------------------------------------------------------------------------------------------

const char* split_name(Split s) {
  switch (s) {
    case Split::train: return "train";
    case Split::valid: return "valid";
    case Split::test: return "test";
  }
  return "?";
}

int64_t round_half_even(double x) {
  // nearbyint under the default FE_TONEAREST mode rounds exact halves to even, as Python does.
  return int64_t(std::nearbyint(x));
}

std::array<double, 3> parse_split_weights(std::string_view split) {
  // 1. every run of [.0-9] is one number (Megatron's re.findall(r"[.0-9]+")).
  std::vector<double> w;
  size_t i = 0;
  while (i < split.size()) {
    if (!(std::isdigit(uint8_t(split[i])) || split[i] == '.')) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < split.size() && (std::isdigit(uint8_t(split[j])) || split[j] == '.')) j++;
    std::string num(split.substr(i, j - i));
    char* end = nullptr;
    double v = std::strtod(num.c_str(), &end);
    if (num == "." || end != num.c_str() + num.size())
      fail("splits_string \"{}\": \"{}\" is not a number\nhint: use three weights such as 969,30,1", split, num);
    w.push_back(v);
    i = j;
  }
  if (w.empty() || w.size() > 3)
    fail("splits_string \"{}\": got {} numbers, expected 1 to 3\nhint: use train,valid,test weights such as 969,30,1",
         split, w.size());
  while (w.size() < 3) w.push_back(0.0);
  // 2. normalize by the float64 sum (numpy sums 3 elements left to right).
  double sum = (w[0] + w[1]) + w[2];
  if (!(sum > 0.0))
    fail("splits_string \"{}\": the weights sum to {}, expected > 0\nhint: use e.g. 969,30,1", split, sum);
  return {w[0] / sum, w[1] / sum, w[2] / sum};
}

std::array<SplitRange, 3> split_ranges(std::string_view split, int64_t num_sequences) {
  auto w = parse_split_weights(split);
  // Bookends by float64 cumulative addition; a split with equal bookends does not exist.
  std::array<double, 4> b{0.0, 0.0, 0.0, 0.0};
  for (int k = 0; k < 3; k++) b[k + 1] = b[k] + w[k];
  std::array<SplitRange, 3> out;
  for (int k = 0; k < 3; k++) {
    if (b[k] == b[k + 1]) continue;
    out[k].exists = true;
    out[k].begin = round_half_even(b[k] * double(num_sequences));
    out[k].end = round_half_even(b[k + 1] * double(num_sequences));
  }
  return out;
}

std::array<int64_t, 3> requested_num_samples(int64_t train_iters, int64_t gbs, int64_t eval_interval,
                                             int64_t eval_iters, int64_t test_iters) {
  if (train_iters < 0 || gbs < 1 || eval_interval < 1 || eval_iters < 0 || test_iters < 0)
    fail("sample counts: train_iters {}, global_batch_size {}, eval_interval {}, eval_iters {}, test_iters {}; "
         "expected non-negative counts, batch and interval >= 1",
         train_iters, gbs, eval_interval, eval_iters, test_iters);
  return {train_iters * gbs, (train_iters / eval_interval + 1) * eval_iters * gbs, test_iters * gbs};
}

// ---------------------------------------------------------------------------------------------
// Index construction (§2.4-2.9)
// ---------------------------------------------------------------------------------------------

namespace {

// Owns the three arrays of a freshly built index.
struct IndexVectors {
  std::vector<int32_t> doc;      // (D)
  std::vector<int64_t> sample;   // (ns + 1, 2)
  std::vector<int64_t> shuffle;  // (ns)
};

// T: the tokens of the split, more than `extra`.
int64_t split_tokens(const int32_t* sizes, SplitRange range, int64_t extra) {
  int64_t T = 0;
  for (int64_t i = range.begin; i < range.end; i++) T += sizes[i];
  if (T <= extra)
    fail("split [{}, {}) holds {} tokens, expected more than {}\nhint: the dataset or this split is "
         "too small; change splits_string or add data",
         range.begin, range.end, T, extra);
  return T;
}

// §2.4 epochs: the smallest E >= 1 with E*T >= N*L + extra; §2.5 whether the last epoch is shuffled
// apart (it holds under 80% of an epoch's samples). Sets num_epochs, separate_final_epoch and
// num_samples_sans_final_epoch of idx.
void plan_epochs(int64_t T, const GptIndexParams& p, GptIndex* idx) {
  const int64_t L = p.seq_length, extra = p.extra, N = p.num_samples;
  int64_t E = 1;
  if (N >= 0) E = std::max<int64_t>(1, (N * L + extra + T - 1) / T);
  bool separate = false;
  int64_t n_sans = 0;
  if (E > 1) {
    n_sans = ((E - 1) * T - extra) / L;
    const int64_t n_final = N - n_sans, n_per = (T - extra) / L;
    CHECK(n_final >= 0 && n_final <= n_per + 1, "final-epoch samples {} of {}", n_final, n_per);
    separate = n_final < int64_t(0.80 * double(n_per));
  }
  idx->num_epochs = E;
  idx->separate_final_epoch = separate;
  idx->num_samples_sans_final_epoch = separate ? n_sans : 0;
}

// Shuffles x (n) whole, or its first `head` elements and the rest apart when `separate`.
template <typename T>
void shuffle_whole_or_apart(NumpyRandomState* rng, T* x, int64_t n, int64_t head, bool separate) {
  if (!separate) {
    rng->shuffle(x, n);
  } else {
    rng->shuffle(x, head);
    rng->shuffle(x + head, n - head);
  }
}

// §2.7 document index: E copies of the split's ids, shuffled whole (or E-1 copies + 1).
std::vector<int32_t> build_doc_index(SplitRange range, const GptIndex& idx, NumpyRandomState* rng) {
  const int64_t n_docs = range.end - range.begin, E = idx.num_epochs;
  std::vector<int32_t> doc(static_cast<size_t>(E * n_docs));
  for (int64_t e = 0; e < E; e++)
    for (int64_t d = 0; d < n_docs; d++) doc[size_t(e * n_docs + d)] = int32_t(range.begin + d);
  shuffle_whole_or_apart(rng, doc.data(), E * n_docs, (E - 1) * n_docs, idx.separate_final_epoch);
  return doc;
}

// ns: the samples of L (+ extra) tokens in E epochs; Megatron computes the ceil of a kept partial last
// sample in float32.
int64_t count_samples(const GptIndex& idx, const GptIndexParams& p) {
  const int64_t tokens = idx.num_epochs * idx.tokens_per_epoch - p.extra;
  if (p.drop_last_partial) return tokens / p.seq_length;
  return int64_t(std::ceil(float(tokens) / float(p.seq_length)));
}

// §2.8 sample index: (ns + 1, 2) rows (position in doc, token offset) where each sample starts.
std::vector<int64_t> build_sample_index(const int32_t* sizes, const std::vector<int32_t>& doc, int64_t ns,
                                        const GptIndexParams& p) {
  const int64_t L = p.seq_length, extra = p.extra, D = int64_t(doc.size());
  std::vector<int64_t> sample(static_cast<size_t>(2 * (ns + 1)));
  int64_t d = 0, off = 0;
  sample[0] = 0;
  sample[1] = 0;
  for (int64_t k = 1; k <= ns; k++) {
    int64_t rem = L + extra;
    while (rem != 0) {
      int64_t len = int64_t(sizes[doc[size_t(d)]]) - off;
      rem -= len;
      if (rem <= 0) {
        off += rem + len - extra;  // the next sample starts `extra` tokens before this one's end
        rem = 0;
      } else {
        if (d == D - 1) {  // out of documents: only the kept partial last sample gets here
          CHECK(k == ns, "sample index ran out of documents at sample {} of {}", k, ns);
          off = int64_t(sizes[doc[size_t(d)]]) - extra;
          break;
        }
        d++;
        off = 0;
      }
    }
    sample[size_t(2 * k)] = d;
    sample[size_t(2 * k + 1)] = off;
  }
  return sample;
}

// §2.9 shuffle index: 0..ns-1, shuffled whole (or the samples before the final epoch and those of it apart).
std::vector<int64_t> build_shuffle_index(int64_t ns, const GptIndex& idx, NumpyRandomState* rng) {
  std::vector<int64_t> order(static_cast<size_t>(ns));
  for (int64_t i = 0; i < ns; i++) order[size_t(i)] = i;
  shuffle_whole_or_apart(rng, order.data(), ns, idx.num_samples_sans_final_epoch, idx.separate_final_epoch);
  return order;
}

}  // namespace

GptIndex build_gpt_index(const int32_t* sizes, int64_t num_sequences, SplitRange range, const GptIndexParams& p) {
  if (p.seq_length < 1) fail("seq_length {}: expected >= 1", p.seq_length);
  CHECK(p.extra == 0 || p.extra == 1, "extra token count {}", p.extra);
  CHECK(range.begin >= 0 && range.begin <= range.end && range.end <= num_sequences,
        "split range [{}, {}) of {} sequences", range.begin, range.end, num_sequences);
  if (num_sequences > std::numeric_limits<int32_t>::max())
    fail("dataset has {} sequences, expected at most 2^31-1 (Megatron's int32 document ids)", num_sequences);

  GptIndex idx;
  idx.tokens_per_epoch = split_tokens(sizes, range, p.extra);
  plan_epochs(idx.tokens_per_epoch, p, &idx);
  auto vec = std::make_shared<IndexVectors>();
  NumpyRandomState rng(p.seed);  // one fresh state per split, used in the order of §2.6
  vec->doc = build_doc_index(range, idx, &rng);
  const int64_t ns = count_samples(idx, p);
  vec->sample = build_sample_index(sizes, vec->doc, ns, p);
  vec->shuffle = build_shuffle_index(ns, idx, &rng);

  idx.doc_index_size = int64_t(vec->doc.size());
  idx.num_samples = ns;
  idx.doc_index = vec->doc.data();
  idx.sample_index = vec->sample.data();
  idx.shuffle_index = vec->shuffle.data();
  idx.storage = vec;
  return idx;
}

// ---------------------------------------------------------------------------------------------
// Index cache. File layout (all little-endian; arrays 8-byte aligned):
//   [0]  magic "LTGPTIX\0"            [8]  u32 version (1)      [12] u32 key length K
//   [16] i64 tokens_per_epoch         [24] i64 num_epochs       [32] i64 separate_final_epoch
//   [40] i64 num_samples_sans_final   [48] i64 doc_index_size D [56] i64 num_samples ns
//   [64] key (K bytes), zero-padded to a multiple of 8
//   then int32 doc_index[D] (zero-padded to 8), int64 sample_index[2(ns+1)], int64 shuffle[ns]
//   then u64 checksum of every byte before it.
// ---------------------------------------------------------------------------------------------

namespace {

constexpr char kMagic[8] = {'L', 'T', 'G', 'P', 'T', 'I', 'X', '\0'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 64;

size_t pad8(size_t n) { return (n + 7) & ~size_t(7); }

// Four-lane multiply-xor hash over 32-byte blocks, fed in pieces so the writer can stream; detects
// truncation, bit flips and edits (not an adversary).
class Checksum {
 public:
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    total_ += n;
    while (n > 0) {
      if (fill_ == 0 && n >= 32) {
        block(p);
        p += 32;
        n -= 32;
        continue;
      }
      size_t k = std::min(n, size_t(32) - fill_);
      std::memcpy(buf_ + fill_, p, k);
      fill_ += k;
      p += k;
      n -= k;
      if (fill_ == 32) {
        block(buf_);
        fill_ = 0;
      }
    }
  }
  uint64_t finish() const {
    uint64_t r = fnv1a64(buf_, fill_, total_);
    for (int l = 0; l < 4; l++) {
      r = (r ^ h_[l]) * kMul;
      r ^= r >> 31;
    }
    return r;
  }

 private:
  static constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  void block(const uint8_t* b) {
    for (int l = 0; l < 4; l++) {
      uint64_t w;
      std::memcpy(&w, b + 8 * l, 8);
      h_[l] = (h_[l] ^ w) * kMul;
      h_[l] ^= h_[l] >> 29;
    }
  }
  uint64_t h_[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull, 0x082EFA98EC4E6C89ull};
  uint8_t buf_[32] = {};
  size_t fill_ = 0;
  uint64_t total_ = 0;
};

uint64_t checksum64(const uint8_t* p, size_t n) {
  Checksum c;
  c.update(p, n);
  return c.finish();
}

struct Layout {
  size_t key_off, doc_off, sample_off, shuffle_off, checksum_off, total;
};

Layout layout_for(size_t key_len, int64_t D, int64_t ns) {
  Layout l{};
  l.key_off = kHeaderBytes;
  l.doc_off = l.key_off + pad8(key_len);
  l.sample_off = l.doc_off + pad8(size_t(D) * 4);
  l.shuffle_off = l.sample_off + size_t(2 * (ns + 1)) * 8;
  l.checksum_off = l.shuffle_off + size_t(ns) * 8;
  l.total = l.checksum_off + 8;
  return l;
}

}  // namespace

std::string gpt_index_cache_key(const TokenSource& source, Split split, SplitRange range, const GptIndexParams& p) {
  return fmt::format("llamatrain gpt index v{}\nsource={}\nsplit={}\nrange={},{}\nseq_length={}\nnum_samples={}\n"
                     "seed={}\nextra={}\ndrop_last_partial={}\n",
                     kVersion, source.fingerprint(), split_name(split), range.begin, range.end, p.seq_length,
                     p.num_samples, p.seed, p.extra, int(p.drop_last_partial));
}

std::string gpt_index_cache_file(const TokenSource& source, Split split, const std::string& key) {
  return fmt::format("{}_{}_gptidx_{:016x}.ltidx", source.name(), split_name(split), fnv1a64(key.data(), key.size()));
}

void save_gpt_index(const std::string& path, const std::string& key, const GptIndex& idx) {
  const int64_t D = idx.doc_index_size, ns = idx.num_samples;
  Layout l = layout_for(key.size(), D, ns);
  std::vector<uint8_t> head(l.doc_off, 0);
  std::memcpy(head.data(), kMagic, 8);
  uint32_t ver = kVersion, klen = uint32_t(key.size());
  int64_t fields[6] = {
      idx.tokens_per_epoch, idx.num_epochs, int64_t(idx.separate_final_epoch), idx.num_samples_sans_final_epoch, D, ns};
  std::memcpy(head.data() + 8, &ver, 4);
  std::memcpy(head.data() + 12, &klen, 4);
  std::memcpy(head.data() + 16, fields, sizeof(fields));
  std::memcpy(head.data() + l.key_off, key.data(), key.size());

  // A temporary with a unique name, then an atomic rename (core/file.h): readers (other ranks) see
  // either no file or a complete one. The arrays are streamed, never copied whole.
  try {
    AtomicFile f(path);
    Checksum sum;
    auto put = [&](const void* data, size_t n) {
      sum.update(data, n);
      f.write(data, n);
    };
    const uint8_t zeros[8] = {};
    put(head.data(), head.size());
    put(idx.doc_index, size_t(D) * 4);
    put(zeros, pad8(size_t(D) * 4) - size_t(D) * 4);
    put(idx.sample_index, size_t(2 * (ns + 1)) * 8);
    put(idx.shuffle_index, size_t(ns) * 8);
    const uint64_t digest = sum.finish();
    f.write(&digest, 8);
    f.commit();
  } catch (const Error& e) {
    const std::string what = e.what();
    fail("index cache: {}\nhint: set model.data.index_mapping_dir to a writable folder with free space",
         what.substr(0, what.find('\n')));
  }
}

bool load_gpt_index(const std::string& path, const std::string& key, SplitRange range, GptIndex* out,
                    std::string* why) {
  if (!path_exists(path)) {
    *why = "missing";
    return false;
  }
  auto map = std::make_shared<MappedFile>();
  try {
    *map = MappedFile(path, "index cache");
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
  if (map->size() < kHeaderBytes + 8) {
    *why = fmt::format("too short ({} bytes)", map->size());
    return false;
  }
  const uint8_t* p = map->data();
  auto bad = [why](std::string reason) {
    *why = std::move(reason);
    return false;
  };

  if (std::memcmp(p, kMagic, 8) != 0) return bad("bad magic");
  uint32_t ver, klen;
  std::memcpy(&ver, p + 8, 4);
  std::memcpy(&klen, p + 12, 4);
  if (ver != kVersion) return bad(fmt::format("version {}, expected {}", ver, kVersion));
  int64_t f[6];
  std::memcpy(f, p + 16, sizeof(f));
  const int64_t D = f[4], ns = f[5];
  if (klen != key.size() || D < 0 || ns < 0 || D > int64_t(map->size()) || ns > int64_t(map->size()))
    return bad("header does not match the parameters");
  Layout l = layout_for(klen, D, ns);
  if (l.total != map->size()) return bad(fmt::format("size {} bytes, expected {}", map->size(), l.total));
  if (std::memcmp(p + l.key_off, key.data(), klen) != 0) return bad("built for other parameters");
  uint64_t stored;
  std::memcpy(&stored, p + l.checksum_off, 8);
  if (checksum64(p, l.checksum_off) != stored) return bad("checksum mismatch (corrupted)");

  GptIndex idx;
  idx.tokens_per_epoch = f[0];
  idx.num_epochs = f[1];
  idx.separate_final_epoch = f[2] != 0;
  idx.num_samples_sans_final_epoch = f[3];
  idx.doc_index_size = D;
  idx.num_samples = ns;
  idx.doc_index = reinterpret_cast<const int32_t*>(p + l.doc_off);
  idx.sample_index = reinterpret_cast<const int64_t*>(p + l.sample_off);
  idx.shuffle_index = reinterpret_cast<const int64_t*>(p + l.shuffle_off);
  // Bounds, so fetching stays inside the arrays even if a consistent-looking file lies.
  for (int64_t i = 0; i < D; i++)
    if (idx.doc_index[i] < range.begin || idx.doc_index[i] >= range.end) return bad("document index out of range");
  for (int64_t i = 0; i < ns; i++)
    if (idx.shuffle_index[i] < 0 || idx.shuffle_index[i] >= ns) return bad("shuffle index out of range");
  for (int64_t k = 0; k <= ns; k++) {
    int64_t dk = idx.sample_index[2 * k], ok = idx.sample_index[2 * k + 1];
    if (dk < 0 || dk >= std::max<int64_t>(D, 1) || ok < 0 || (k > 0 && dk < idx.sample_index[2 * (k - 1)]))
      return bad("sample index out of range");
  }
  idx.storage = map;
  *out = std::move(idx);
  return true;
}

// ---------------------------------------------------------------------------------------------
// GptDataset
// ---------------------------------------------------------------------------------------------

GptDataset::GptDataset(std::shared_ptr<const TokenSource> source, Split split, SplitRange range,
                       const GptIndexParams& params, const IndexCacheOptions& cache)
    : source_(std::move(source)), split_(split), params_(params) {
  CHECK(source_ != nullptr, "GptDataset without a source");
  const int64_t n = source_->num_sequences();
  if (!range.exists) fail("{} split is empty (weight 0 in splits_string)", split_name(split));
  std::vector<int32_t> gathered;
  const int32_t* sizes = source_->sizes_data();
  if (!sizes) {
    gathered.resize(size_t(n));
    for (int64_t i = 0; i < n; i++) gathered[size_t(i)] = source_->sequence_length(i);
    sizes = gathered.data();
  }

  std::string dir = cache.dir.empty() ? source_->default_cache_dir() : cache.dir;
  if (!cache.enabled || dir.empty()) {
    index_ = build_gpt_index(sizes, n, range, params_);
  } else {
    std::string key = gpt_index_cache_key(*source_, split, range, params_);
    cache_path_ = (std::filesystem::path(dir) / gpt_index_cache_file(*source_, split, key)).string();
    std::string why;
    if (load_gpt_index(cache_path_, key, range, &index_, &why)) {
      loaded_from_cache_ = true;
    } else {
      if (why != "missing") fmt::print(stderr, "index cache {}: {}; rebuilding it\n", cache_path_, why);
      index_ = build_gpt_index(sizes, n, range, params_);
      try {
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        save_gpt_index(cache_path_, key, index_);
        // Serve from the mapped file so the heap copy is released.
        GptIndex mapped;
        if (load_gpt_index(cache_path_, key, range, &mapped, &why)) index_ = std::move(mapped);
      } catch (const Error& e) {
        fmt::print(stderr, "warning: {}\n(continuing with the index in memory)\n", e.what());
        cache_path_.clear();
      }
    }
  }
  // Every document referenced must exist in the source (guards a cache built for other data).
  for (int64_t i = 0; i < index_.doc_index_size; i++)
    CHECK(index_.doc_index[i] >= range.begin && index_.doc_index[i] < range.end,
          "document index entry {} = {} outside the split [{}, {})", i, index_.doc_index[i], range.begin, range.end);
}

int64_t GptDataset::sample_text(int64_t i, int32_t* text) const {
  CHECK(i >= 0 && i < index_.num_samples, "sample {} of a {} split with {} samples", i, split_name(split_),
        index_.num_samples);
  const int64_t want = text_length();
  const int64_t j = index_.shuffle_index[i];
  const int64_t d0 = index_.sample_index[2 * j], o0 = index_.sample_index[2 * j + 1];
  const int64_t d1 = index_.sample_index[2 * j + 2], o1 = index_.sample_index[2 * j + 3];
  const int64_t extra = params_.extra;
  int64_t n = 0;
  auto take = [&](int64_t d, int64_t begin, int64_t end) {  // [begin, end) of doc_index[d]
    int64_t seq = index_.doc_index[d];
    int64_t len = source_->sequence_length(seq);
    end = std::min(end, len);
    if (end <= begin) return;
    int64_t count = std::min(end - begin, want - n);
    source_->read(seq, begin, count, text + n);
    n += count;
  };
  if (d0 == d1) {
    take(d0, o0, o1 + extra);
  } else {
    take(d0, o0, std::numeric_limits<int64_t>::max());
    for (int64_t d = d0 + 1; d < d1; d++) take(d, 0, std::numeric_limits<int64_t>::max());
    take(d1, 0, o1 + extra);
  }
  CHECK(n == want || !params_.drop_last_partial, "sample {} has {} tokens, expected {}", i, n, want);
  for (int64_t k = n; k < want; k++) text[k] = 0;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Sample fields (§2.10)
// ---------------------------------------------------------------------------------------------

void make_gpt_sample(GptSample* out, const int32_t* text, int64_t valid, int64_t L, const SampleOptions& opt) {
  out->tokens.resize(size_t(L));
  out->labels.resize(size_t(L));
  out->loss_mask.resize(size_t(L));
  out->position_ids.resize(size_t(L));
  out->doc_start.resize(size_t(L));
  out->real = std::min(valid, L);
  int32_t pos = 0, start = 0;
  for (int64_t t = 0; t < L; t++) {
    bool tok_real = t < valid, lab_real = t + 1 < valid;
    int32_t tok = tok_real ? text[t] : 0;
    out->tokens[size_t(t)] = tok;
    out->labels[size_t(t)] = lab_real ? text[t + 1] : 0;
    bool eod = tok_real && tok == opt.eod_id;
    out->loss_mask[size_t(t)] = (!lab_real || (opt.eod_mask_loss && eod)) ? 0.0f : 1.0f;
    out->position_ids[size_t(t)] = opt.reset_position_ids ? pos : int32_t(t);
    pos = (opt.reset_position_ids && eod) ? 0 : pos + 1;
    out->doc_start[size_t(t)] = start;
    if (opt.reset_attention_mask && eod) start = int32_t(t + 1);
  }
}

// ---------------------------------------------------------------------------------------------
// Consumption (§2.11)
// ---------------------------------------------------------------------------------------------

std::vector<int64_t> micro_batch_sample_indices(int64_t consumed, int64_t mbs, int64_t dp, int64_t rank) {
  if (mbs < 1 || dp < 1 || rank < 0 || rank >= dp || consumed < 0)
    fail("micro-batch slice: micro_batch_size {}, data-parallel size {}, rank {}, consumed {}; expected "
         "mbs >= 1, 0 <= rank < dp, consumed >= 0",
         mbs, dp, rank, consumed);
  std::vector<int64_t> out(static_cast<size_t>(mbs));
  for (int64_t k = 0; k < mbs; k++) out[size_t(k)] = consumed + rank * mbs + k;
  return out;
}

std::vector<std::vector<int64_t>> global_batch_sample_indices(int64_t consumed, int64_t gbs, int64_t mbs, int64_t dp,
                                                              int64_t rank) {
  if (mbs < 1 || dp < 1 || gbs < 1 || gbs % (mbs * dp) != 0)
    fail("global_batch_size {}: expected a multiple of micro_batch_size {} x data-parallel size {}\n"
         "hint: change model.global_batch_size or model.micro_batch_size",
         gbs, mbs, dp);
  std::vector<std::vector<int64_t>> out;
  for (int64_t m = 0; m < gbs / (mbs * dp); m++)
    out.push_back(micro_batch_sample_indices(consumed + m * mbs * dp, mbs, dp, rank));
  return out;
}

}  // namespace llamatrain::data
