// GPT pretraining samples with Megatron-LM's semantics (docs/formats.md §2): split string -> sequence
// ranges, epochs, separate final epoch, document/sample/shuffle indices built with a bit-exact
// reimplementation of numpy's legacy RandomState, an on-disk index cache keyed by every parameter,
// sample fetch (L + 1 tokens spanning sequences) and the per-rank micro-batch slice.
// Invariant: sample i of a split is a pure function of (data, split, seed, L, N, i); ranks only
// choose which i they read. Leaves out: blending (blend.h), file formats of the data (TokenSource).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_source.h"

namespace llamatrain::data {

// ---- numpy.random.RandomState (legacy MT19937), the subset Megatron's index build uses ----
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : gen_(seed) {}  // init_genrand, same as mt19937_seed
  uint32_t next_u32() { return uint32_t(gen_()); }
  uint64_t next_u64() {
    uint64_t hi = next_u32();
    return (hi << 32) | next_u32();
  }
  double random_sample();                  // 53-bit double in [0, 1), as random_sample()
  uint64_t random_interval(uint64_t max);  // uniform in [0, max] by masked rejection
  // In-place shuffle of x (n): for i = n-1 .. 1 swap x[i] with x[random_interval(i)].
  template <typename T>
  void shuffle(T* x, int64_t n) {
    for (int64_t i = n - 1; i >= 1; i--) {
      int64_t j = int64_t(random_interval(uint64_t(i)));
      T t = x[i];
      x[i] = x[j];
      x[j] = t;
    }
  }

 private:
  std::mt19937 gen_;
};

// ---- splits ----
enum class Split { train = 0, valid = 1, test = 2 };
const char* split_name(Split s);

// Python's round() on a double: nearest integer, halves to even.
int64_t round_half_even(double x);
// "969,30,1" -> weights normalized to sum 1 (numbers matching [.0-9]+, padded with 0 to 3).
std::array<double, 3> parse_split_weights(std::string_view split);
struct SplitRange {
  bool exists = false;  // false when the split's bookends are equal (weight 0)
  int64_t begin = 0;    // first sequence id
  int64_t end = 0;      // one past the last
};
// Sequence-id ranges of train/valid/test for a source of num_sequences sequences (§2.1).
std::array<SplitRange, 3> split_ranges(std::string_view split, int64_t num_sequences);

// Requested samples per split (§2.2, Megatron's get_train_valid_test_num_samples; NeMo passes
// trainer.max_steps, val_check_interval, limit_val_batches and limit_test_batches):
// train = train_iters*gbs, valid = (train_iters // eval_interval + 1)*eval_iters*gbs,
// test = test_iters*gbs.
std::array<int64_t, 3> requested_num_samples(int64_t train_iters, int64_t global_batch_size, int64_t eval_interval,
                                             int64_t eval_iters, int64_t test_iters);

// ---- index construction (§2.4-2.9) ----
struct GptIndexParams {
  int64_t seq_length = 0;         // L
  int64_t num_samples = -1;       // N requested; -1 means None (exactly one epoch)
  uint32_t seed = 1234;           // numpy RandomState seed, one fresh state per split
  int32_t extra = 1;              // add_extra_token_to_sequence: samples hold L + extra tokens
  bool drop_last_partial = true;  // false keeps a shorter last sample (padded at fetch)
};

// Indices of one split. The arrays live in vectors (fresh build) or in an mmapped cache file.
struct GptIndex {
  int64_t tokens_per_epoch = 0;  // T
  int64_t num_epochs = 0;        // E
  bool separate_final_epoch = false;
  int64_t num_samples_sans_final_epoch = 0;  // only meaningful when separate_final_epoch
  int64_t doc_index_size = 0;
  int64_t num_samples = 0;                 // ns = len(dataset); sample_index has ns + 1 rows
  const int32_t* doc_index = nullptr;      // (doc_index_size) sequence ids
  const int64_t* sample_index = nullptr;   // (ns + 1, 2) rows (position in doc_index, token offset)
  const int64_t* shuffle_index = nullptr;  // (ns) sample-index rows in consumption order
  std::shared_ptr<const void> storage;     // keeps the arrays alive
};

// Builds the three indices of the split [range.begin, range.end) of a source whose sequence
// lengths are sizes (num_sequences). Pure function of its arguments.
GptIndex build_gpt_index(const int32_t* sizes, int64_t num_sequences, SplitRange range, const GptIndexParams& params);

// ---- index cache ----
struct IndexCacheOptions {
  bool enabled = true;
  std::string dir;  // "" = the source's default_cache_dir(); no cache when both are empty
};
// The cache key: every input the indices depend on (source fingerprint, split, range, L, N,
// seed, extra, drop_last, algorithm version).
std::string gpt_index_cache_key(const TokenSource& source, Split split, SplitRange range, const GptIndexParams& params);
// File name inside the cache dir: <name>_<split>_gptidx_<16 hex of the key hash>.ltidx
std::string gpt_index_cache_file(const TokenSource& source, Split split, const std::string& key);
// Writes idx under `path` via a temporary file + rename. Throws Error if the dir is not writable.
void save_gpt_index(const std::string& path, const std::string& key, const GptIndex& idx);
// Maps `path` and returns true when it is a complete, uncorrupted cache for exactly `key` whose
// indices all lie inside `range`; otherwise returns false and sets *why (missing, bad
// magic/version, other key, size, checksum, out-of-range entries).
bool load_gpt_index(const std::string& path, const std::string& key, SplitRange range, GptIndex* idx, std::string* why);

// ---- one split of one source ----
class GptDataset {
 public:
  // Builds (or loads from the cache) the indices of `split`. Throws Error for unusable inputs
  // (no tokens in the split, L < 1).
  GptDataset(std::shared_ptr<const TokenSource> source, Split split, SplitRange range, const GptIndexParams& params,
             const IndexCacheOptions& cache = {});

  int64_t size() const { return index_.num_samples; }
  int64_t seq_length() const { return params_.seq_length; }
  int64_t text_length() const { return params_.seq_length + params_.extra; }  // L + extra
  // Writes sample i's tokens into text (L + extra); returns how many are real (the rest are
  // padding, only possible for a kept partial last sample). i in [0, size()).
  int64_t sample_text(int64_t i, int32_t* text) const;
  const GptIndex& index() const { return index_; }
  bool loaded_from_cache() const { return loaded_from_cache_; }
  const std::string& cache_path() const { return cache_path_; }  // "" when not cached
  Split split() const { return split_; }

 private:
  std::shared_ptr<const TokenSource> source_;
  Split split_;
  GptIndexParams params_;
  GptIndex index_;
  bool loaded_from_cache_ = false;
  std::string cache_path_;
};

// ---- training sample fields (§2.10) ----
struct SampleOptions {
  int32_t eod_id = -1;                // token that ends a document (Llama 2: 2)
  bool eod_mask_loss = false;         // loss_mask 0 where the input token is EOD
  bool reset_position_ids = false;    // positions restart at 0 after each EOD input token
  bool reset_attention_mask = false;  // a document starts after each EOD input token (attention stops there)
};
struct GptSample {
  std::vector<int32_t> tokens;        // (L) text[0:L], padding replaced by 0
  std::vector<int32_t> labels;        // (L) text[1:L+1], padding replaced by 0
  std::vector<float> loss_mask;       // (L) 1, or 0 at padding / EOD inputs (eod_mask_loss)
  std::vector<int32_t> position_ids;  // (L) 0..L-1, restarted after EOD if reset_position_ids
  // (L) the position where each input's document starts: 0, or with reset_attention_mask one past the
  // last EOD input before it (Megatron's mask: after EOD at i, rows > i see no column <= i).
  std::vector<int32_t> doc_start;
  int64_t real = 0;  // inputs [0, real) hold text; the rest is padding
};
// text (L + 1) with `valid` real tokens -> the sample fields. Requires extra == 1.
void make_gpt_sample(GptSample* out, const int32_t* text, int64_t valid, int64_t seq_length, const SampleOptions& opt);

// ---- consumption order (§2.11, MegatronPretrainingSampler) ----
// Global sample indices of data-parallel rank dp_rank's micro-batch that starts the block at
// consumed_samples: consumed + dp_rank*mbs + [0, mbs). Blocks are mbs*dp_size samples.
std::vector<int64_t> micro_batch_sample_indices(int64_t consumed_samples, int64_t micro_batch_size, int64_t dp_size,
                                                int64_t dp_rank);
// All micro-batches of one global batch for dp_rank: global_batch / (mbs*dp_size) blocks, in
// order; fails when global_batch is not a multiple of mbs*dp_size.
std::vector<std::vector<int64_t>> global_batch_sample_indices(int64_t consumed_samples, int64_t global_batch_size,
                                                              int64_t micro_batch_size, int64_t dp_size,
                                                              int64_t dp_rank);

}  // namespace llamatrain::data
