// GPT dataset behaviour beyond the reference indices: split parsing and rounding, the numpy RNG
// check values of docs/formats.md §2.6, sample fields (§2.10), data-parallel consumption (§2.11) with
// every token of an epoch seen exactly once on 1, 2 and 4 ranks, and the on-disk index cache
// (reuse, rebuild on other parameters or data, rebuild on corruption).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "data/blend.h"
#include "data/gpt_dataset.h"

using namespace llamatrain;
using namespace llamatrain::data;
namespace fs = std::filesystem;

namespace {

// Token t of sequence s is s*1000 + t, so every token position has a unique id.
std::shared_ptr<InMemoryTokenSource> make_source(const std::vector<int32_t>& sizes, std::string name = "mem") {
  std::vector<std::vector<int32_t>> seqs(sizes.size());
  for (size_t s = 0; s < sizes.size(); s++)
    for (int32_t t = 0; t < sizes[s]; t++) seqs[s].push_back(int32_t(s) * 1000 + t);
  return std::make_shared<InMemoryTokenSource>(std::move(seqs), std::move(name));
}

std::vector<int32_t> random_sizes(uint32_t seed, int n, int zero_pct) {
  std::mt19937 rng(seed);
  std::vector<int32_t> s(static_cast<size_t>(n));
  for (auto& x : s) x = int(rng() % 100) < zero_pct ? 0 : int32_t(1 + rng() % 50);
  return s;
}

IndexCacheOptions no_cache() {
  IndexCacheOptions c;
  c.enabled = false;
  return c;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("gptds_test_" + std::to_string(getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

std::vector<int64_t> arr(const int64_t* p, int64_t n) { return std::vector<int64_t>(p, p + n); }

}  // namespace

TEST(Splits, PythonRoundHalvesToEven) {
  EXPECT_EQ(round_half_even(0.5), 0);
  EXPECT_EQ(round_half_even(1.5), 2);
  EXPECT_EQ(round_half_even(2.5), 2);
  EXPECT_EQ(round_half_even(3.5), 4);
  EXPECT_EQ(round_half_even(2.4999999), 2);
  EXPECT_EQ(round_half_even(484.5), 484);
}

TEST(Splits, BookendsAndRanges) {
  auto r = split_ranges("969,30,1", 1001);  // docs/formats.md §2.1 example
  ASSERT_TRUE(r[0].exists && r[1].exists && r[2].exists);
  EXPECT_EQ(r[0].begin, 0);
  EXPECT_EQ(r[0].end, 970);
  EXPECT_EQ(r[1].begin, 970);
  EXPECT_EQ(r[1].end, 1000);
  EXPECT_EQ(r[2].begin, 1000);
  EXPECT_EQ(r[2].end, 1001);
  auto r2 = split_ranges("98,2,0", 125);  // 0.98*125 = 122.5 -> 122 (half to even)
  EXPECT_EQ(r2[0].end, 122);
  EXPECT_EQ(r2[1].begin, 122);
  EXPECT_EQ(r2[1].end, 125);
  EXPECT_FALSE(r2[2].exists);
  auto r3 = split_ranges("1", 10);  // padded with zeros
  EXPECT_TRUE(r3[0].exists);
  EXPECT_EQ(r3[0].end, 10);
  EXPECT_FALSE(r3[1].exists);
  EXPECT_FALSE(r3[2].exists);
  auto w = parse_split_weights(" 969, 30, 1 ");
  EXPECT_DOUBLE_EQ(w[0], 0.969);
  EXPECT_DOUBLE_EQ(w[2], 0.001);
  for (const char* bad : {"", "abc", "1,2,3,4", "0,0,0", "1..2,3", "."})
    EXPECT_THROW(parse_split_weights(bad), Error) << bad;
}

TEST(Splits, RequestedSampleCounts) {
  // 7B recipe shape: 1000 steps of 256, validation every 100 steps for 5 batches, 5 test batches.
  EXPECT_EQ(requested_num_samples(1000, 256, 100, 5, 5), (std::array<int64_t, 3>{256000, 11 * 5 * 256, 5 * 256}));
  EXPECT_EQ(requested_num_samples(250, 8, 100, 2, 0), (std::array<int64_t, 3>{2000, 3 * 2 * 8, 0}));
  EXPECT_THROW(requested_num_samples(10, 0, 1, 1, 1), Error);
}

TEST(NumpyRng, FormatsCheckValues) {
  NumpyRandomState r(42);
  EXPECT_EQ(r.random_sample(), 0.3745401188473625);
  std::vector<int> a{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, b = a;
  NumpyRandomState(0).shuffle(a.data(), 10);
  NumpyRandomState(1234).shuffle(b.data(), 10);
  EXPECT_EQ(a, (std::vector<int>{2, 8, 4, 9, 1, 6, 7, 3, 0, 5}));
  EXPECT_EQ(b, (std::vector<int>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3}));
  NumpyRandomState s(5489);
  uint32_t v = 0;
  for (int i = 0; i < 10000; i++) v = s.next_u32();
  EXPECT_EQ(v, 4123659995u);
  EXPECT_EQ(NumpyRandomState(3).random_interval(0), 0u);
}

TEST(GptSample, FieldsMasksAndPositions) {
  const int32_t eod = 2;
  std::vector<int32_t> text{5, eod, 7, 8, eod, 9};
  GptSample s;
  make_gpt_sample(&s, text.data(), 6, 5, SampleOptions{eod, false, false});
  EXPECT_EQ(s.tokens, (std::vector<int32_t>{5, 2, 7, 8, 2}));
  EXPECT_EQ(s.labels, (std::vector<int32_t>{2, 7, 8, 2, 9}));
  EXPECT_EQ(s.loss_mask, (std::vector<float>{1, 1, 1, 1, 1}));
  EXPECT_EQ(s.position_ids, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  make_gpt_sample(&s, text.data(), 6, 5, SampleOptions{eod, true, true});
  EXPECT_EQ(s.loss_mask, (std::vector<float>{1, 0, 1, 1, 0}));  // EOD inputs masked (Megatron)
  EXPECT_EQ(s.position_ids, (std::vector<int32_t>{0, 1, 0, 1, 2}));
  // A kept partial sample: 4 real tokens of 6; padding -> id 0 and no loss.
  make_gpt_sample(&s, text.data(), 4, 5, SampleOptions{eod, false, false});
  EXPECT_EQ(s.tokens, (std::vector<int32_t>{5, 2, 7, 8, 0}));
  EXPECT_EQ(s.labels, (std::vector<int32_t>{2, 7, 8, 0, 0}));
  EXPECT_EQ(s.loss_mask, (std::vector<float>{1, 1, 1, 0, 0}));
}

TEST(Consumption, MicroAndGlobalBatchSlices) {
  EXPECT_EQ(micro_batch_sample_indices(100, 2, 4, 3), (std::vector<int64_t>{106, 107}));
  auto g = global_batch_sample_indices(32, 16, 2, 4, 1);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0], (std::vector<int64_t>{34, 35}));
  EXPECT_EQ(g[1], (std::vector<int64_t>{42, 43}));
  EXPECT_THROW(global_batch_sample_indices(0, 12, 2, 4, 0), Error);
  EXPECT_THROW(micro_batch_sample_indices(0, 2, 4, 4), Error);
}

// Runs whole global batches over the train split on dp ranks and records, for every global sample
// index, the text it got; checks each index is read by exactly one rank and returns the texts.
std::map<int64_t, std::vector<int32_t>> consume(const SampleDataset& ds, int64_t gbs, int64_t mbs, int64_t dp) {
  std::map<int64_t, std::vector<int32_t>> seen;
  std::vector<int32_t> text(static_cast<size_t>(ds.text_length()));
  for (int64_t consumed = 0; consumed + gbs <= ds.size(); consumed += gbs) {
    for (int64_t r = 0; r < dp; r++) {
      for (const auto& micro : global_batch_sample_indices(consumed, gbs, mbs, dp, r)) {
        EXPECT_EQ(int64_t(micro.size()), mbs);
        for (int64_t i : micro) {
          ds.sample_text(i, text.data());
          EXPECT_TRUE(seen.emplace(i, text).second) << "sample " << i << " read twice";
        }
      }
    }
  }
  return seen;
}

TEST(Consumption, EveryTokenOncePerEpochOn1And2And4Ranks) {
  const int64_t L = 6, gbs = 8;
  auto sizes = random_sizes(11, 60, 15);  // some empty sequences
  // Make T - 1 a multiple of L*gbs so one epoch is a whole number of global batches.
  int64_t T = 0;
  for (int32_t x : sizes) T += x;
  int64_t need = (L * gbs) - (T - 1) % (L * gbs);
  sizes.push_back(int32_t(need % (L * gbs)));
  T += sizes.back();
  ASSERT_EQ((T - 1) % (L * gbs), 0);
  auto src = make_source(sizes);
  GptIndexParams p;
  p.seq_length = L;
  p.num_samples = -1;  // exactly one epoch
  p.seed = 77;
  auto ranges = split_ranges("1,0,0", int64_t(sizes.size()));
  GptSplitDataset ds(std::make_shared<GptDataset>(src, Split::train, ranges[0], p, no_cache()));
  ASSERT_EQ(ds.size(), (T - 1) / L);

  std::map<int64_t, std::vector<int32_t>> reference;
  for (int64_t dp : {1, 2, 4}) {
    for (int64_t mbs : {1, 2}) {
      SCOPED_TRACE("dp " + std::to_string(dp) + " mbs " + std::to_string(mbs));
      auto seen = consume(ds, gbs, mbs, dp);
      ASSERT_EQ(int64_t(seen.size()), ds.size());  // every sample, once
      if (reference.empty()) reference = seen;
      EXPECT_EQ(seen, reference);  // sample i does not depend on the layout
      // A sample owns its first L tokens; its last token is the next sample's first.
      std::map<int32_t, int> owned;
      for (const auto& [i, text] : seen)
        for (int64_t t = 0; t < L; t++) owned[text[size_t(t)]]++;
      int64_t total = 0;
      for (const auto& [tok, n] : owned) {
        EXPECT_EQ(n, 1) << "token " << tok;
        total += n;
      }
      EXPECT_EQ(total, T - 1);  // every token but the very last (only ever a label) is an input once
    }
  }
  // Consecutive samples (unshuffled order) share one boundary token.
  const GptIndex& ix = static_cast<const GptSplitDataset&>(ds).gpt().index();
  std::vector<int64_t> inv(static_cast<size_t>(ix.num_samples));
  for (int64_t i = 0; i < ix.num_samples; i++) inv[size_t(ix.shuffle_index[i])] = i;
  for (int64_t j = 0; j + 1 < ix.num_samples; j++)
    EXPECT_EQ(reference[inv[size_t(j)]][size_t(L)], reference[inv[size_t(j + 1)]][0]) << "sample row " << j;
}

TEST(Consumption, SeveralEpochsSeeEachTokenOncePerEpoch) {
  const int64_t L = 5;
  auto sizes = random_sizes(5, 40, 10);
  int64_t T = 0;
  for (int32_t x : sizes) T += x;
  auto src = make_source(sizes);
  GptIndexParams p;
  p.seq_length = L;
  p.num_samples = 3 * ((T - 1) / L);  // three full epochs: final epoch not separate
  p.seed = 1234;
  GptDataset ds(src, Split::train, split_ranges("1,0,0", int64_t(sizes.size()))[0], p, no_cache());
  ASSERT_EQ(ds.index().num_epochs, 3);
  ASSERT_FALSE(ds.index().separate_final_epoch);
  std::map<int32_t, int> owned;
  std::vector<int32_t> text(static_cast<size_t>(L + 1));
  for (int64_t i = 0; i < ds.size(); i++) {
    ds.sample_text(i, text.data());
    for (int64_t t = 0; t < L; t++) owned[text[size_t(t)]]++;
  }
  int64_t short_by = 0;
  for (const auto& [tok, n] : owned) {
    EXPECT_GE(n, 2);
    EXPECT_LE(n, 3);
    short_by += 3 - n;
  }
  EXPECT_EQ(int64_t(owned.size()), T);
  EXPECT_EQ(short_by, 3 * T - ds.size() * L);  // only the tail of the last epoch is unread
  EXPECT_LE(short_by, L);
}

TEST(GptDataset, EmptySplitAndBadParametersFail) {
  auto src = make_source({0, 0, 1});
  GptIndexParams p;
  p.seq_length = 4;
  EXPECT_THROW(GptDataset(src, Split::train, split_ranges("1,0,0", 3)[0], p, no_cache()), Error);
  auto src2 = make_source({10, 10});
  p.seq_length = 0;
  EXPECT_THROW(GptDataset(src2, Split::train, split_ranges("1,0,0", 2)[0], p, no_cache()), Error);
  p.seq_length = 4;
  EXPECT_THROW(GptDataset(src2, Split::test, split_ranges("1,0,0", 2)[2], p, no_cache()), Error);
}

TEST(IndexCache, ReusedThenRebuiltOnOtherParametersDataOrCorruption) {
  TempDir dir;
  auto sizes = random_sizes(3, 80, 5);
  auto src = make_source(sizes, "corpus");
  auto range = split_ranges("969,30,1", int64_t(sizes.size()))[0];
  GptIndexParams p;
  p.seq_length = 16;
  p.num_samples = 150;
  p.seed = 1234;
  IndexCacheOptions cache;
  cache.dir = dir.path.string();
  GptDataset fresh(src, Split::train, range, p, no_cache());
  auto same_as_fresh = [&](const GptDataset& d) {
    const GptIndex &a = d.index(), &b = fresh.index();
    EXPECT_EQ(a.num_epochs, b.num_epochs);
    EXPECT_EQ(a.separate_final_epoch, b.separate_final_epoch);
    ASSERT_EQ(a.num_samples, b.num_samples);
    EXPECT_EQ(std::vector<int32_t>(a.doc_index, a.doc_index + a.doc_index_size),
              std::vector<int32_t>(b.doc_index, b.doc_index + b.doc_index_size));
    EXPECT_EQ(arr(a.sample_index, 2 * (a.num_samples + 1)), arr(b.sample_index, 2 * (b.num_samples + 1)));
    EXPECT_EQ(arr(a.shuffle_index, a.num_samples), arr(b.shuffle_index, b.num_samples));
  };

  GptDataset first(src, Split::train, range, p, cache);
  EXPECT_FALSE(first.loaded_from_cache());
  ASSERT_TRUE(fs::exists(first.cache_path())) << first.cache_path();
  same_as_fresh(first);
  GptDataset second(src, Split::train, range, p, cache);
  EXPECT_TRUE(second.loaded_from_cache());
  EXPECT_EQ(second.cache_path(), first.cache_path());
  same_as_fresh(second);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.path().extension() == ".ltidx";
  EXPECT_EQ(files, 1);  // no temporary files left behind

  // Another seed: another key, so not loaded from the first file.
  GptIndexParams p2 = p;
  p2.seed = 99;
  GptDataset other_seed(src, Split::train, range, p2, cache);
  EXPECT_FALSE(other_seed.loaded_from_cache());
  EXPECT_NE(other_seed.cache_path(), first.cache_path());
  // Other data with the same name: the fingerprint differs.
  auto sizes2 = sizes;
  sizes2[5] += 1;
  GptDataset other_data(make_source(sizes2, "corpus"), Split::train, range, p, cache);
  EXPECT_FALSE(other_data.loaded_from_cache());
  // A cache file for other parameters placed under this key's name is refused (key mismatch).
  fs::copy_file(other_seed.cache_path(), first.cache_path(), fs::copy_options::overwrite_existing);
  GptDataset after_swap(src, Split::train, range, p, cache);
  EXPECT_FALSE(after_swap.loaded_from_cache());
  same_as_fresh(after_swap);
  EXPECT_TRUE(GptDataset(src, Split::train, range, p, cache).loaded_from_cache());  // rewritten

  // Corruption: a flipped byte in the arrays, then a truncated file, then garbage.
  auto corrupt = [&](auto&& edit) {
    std::string path = first.cache_path();
    std::string bytes;
    {
      std::ifstream f(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(f), {});
    }
    edit(bytes);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    GptDataset d(src, Split::train, range, p, cache);
    EXPECT_FALSE(d.loaded_from_cache());
    same_as_fresh(d);
    EXPECT_TRUE(GptDataset(src, Split::train, range, p, cache).loaded_from_cache());
  };
  corrupt([](std::string& b) { b[b.size() / 2] ^= 0x10; });
  corrupt([](std::string& b) { b.resize(b.size() - 9); });
  corrupt([](std::string& b) { b.assign(b.size(), 'x'); });
  corrupt([](std::string& b) { b[8] = 99; });  // version
  corrupt([](std::string& b) { b.clear(); });
}

TEST(IndexCache, UnwritableDirectoryFallsBackToMemory) {
  TempDir dir;
  std::ofstream(dir.path / "file") << "x";  // a "directory" below a regular file cannot be created
  auto src = make_source(random_sizes(4, 30, 0));
  GptIndexParams p;
  p.seq_length = 8;
  IndexCacheOptions cache;
  cache.dir = (dir.path / "file" / "cache").string();
  GptDataset d(src, Split::train, split_ranges("1,0,0", 30)[0], p, cache);
  EXPECT_FALSE(d.loaded_from_cache());
  EXPECT_EQ(d.cache_path(), "");
  EXPECT_GT(d.size(), 0);
}

TEST(Blend, WeightsSizesAndTieBreak) {
  auto nw = normalize_weights({0.7, 0.3});
  EXPECT_DOUBLE_EQ(nw[0], 0.7);
  auto per = samples_per_dataset(nw, 1000, kDefaultBlendSurplus);
  EXPECT_EQ(per, (std::vector<int64_t>{704, 302}));  // ceil(700*1.005) = ceil(703.5), ceil(300*1.005) = ceil(301.5)
  // Equal weights: ties go to the lowest index, so the order is 0,1,2,0,1,2,...
  std::vector<int16_t> di(9);
  std::vector<int64_t> dsi(9);
  build_blending_indices(di.data(), dsi.data(), {1.0 / 3, 1.0 / 3, 1.0 / 3}, 9);
  EXPECT_EQ(di, (std::vector<int16_t>{0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(dsi, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2}));
  // Samples 0 and 1 both use max(i, 1) = 1: with {0.5, 0.5}, sample 1 sees errors -0.5 / 0.5.
  std::vector<int16_t> d2(4);
  std::vector<int64_t> s2(4);
  build_blending_indices(d2.data(), s2.data(), {0.25, 0.75}, 4);
  EXPECT_EQ(d2, (std::vector<int16_t>{1, 0, 1, 1}));
  auto spec = parse_data_prefix({"0.7", "/a", "0.3", "/b"});
  EXPECT_EQ(spec.prefixes, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(spec.weights, (std::vector<double>{0.7, 0.3}));
  auto plain = parse_data_prefix({"/a"});
  EXPECT_TRUE(plain.weights.empty());
  EXPECT_THROW(parse_data_prefix({}), Error);
  EXPECT_THROW(parse_data_prefix({"/a", "0.5", "/b"}), Error);
  EXPECT_THROW(normalize_weights({0.0, 0.0}), Error);
}

TEST(Blend, BuilderCoversSingleWeightedAndUnweightedPrefixes) {
  std::map<std::string, std::shared_ptr<const TokenSource>> files{{"/a", make_source(random_sizes(1, 50, 0), "a")},
                                                                  {"/b", make_source(random_sizes(2, 70, 0), "b")}};
  auto open = [&](const std::string& p) { return files.at(p); };
  GptDataConfig cfg;
  cfg.seq_length = 8;
  cfg.splits_string = "98,2,0";
  cfg.cache.enabled = false;
  cfg.data_prefix = {"/a"};
  auto single = build_gpt_datasets(cfg, {40, 2, 0}, open);
  EXPECT_NE(std::dynamic_pointer_cast<const GptSplitDataset>(single[0]), nullptr);
  EXPECT_EQ(single[2], nullptr);    // test weight 0
  cfg.data_prefix = {"1.0", "/a"};  // NeMo's usual [1.0, prefix] goes through the blend
  auto one = build_gpt_datasets(cfg, {40, 2, 0}, open);
  auto b1 = std::dynamic_pointer_cast<const BlendedDataset>(one[0]);
  ASSERT_NE(b1, nullptr);
  EXPECT_EQ(b1->size(), 40);
  std::vector<int32_t> x(9), y(9);
  for (int64_t i = 0; i < 40; i++) {  // identity blend: sample i of the 41-sample dataset
    b1->sample_text(i, x.data());
    static_cast<const GptSplitDataset&>(*b1->datasets()[0]).gpt().sample_text(i, y.data());
    EXPECT_EQ(x, y);
  }
  EXPECT_EQ(static_cast<const GptSplitDataset&>(*b1->datasets()[0]).gpt().index().num_samples >= 41, true);
  cfg.data_prefix = {"/a", "/b"};  // no weights: one epoch each, blended by length
  auto two = build_gpt_datasets(cfg, {-1, -1, -1}, open);
  auto b2 = std::dynamic_pointer_cast<const BlendedDataset>(two[0]);
  ASSERT_NE(b2, nullptr);
  EXPECT_EQ(b2->size(), b2->datasets()[0]->size() + b2->datasets()[1]->size());
  std::vector<int64_t> count(2, 0);
  for (int16_t d : b2->dataset_index()) count[size_t(d)]++;
  EXPECT_EQ(count[0], b2->datasets()[0]->size());
  EXPECT_EQ(count[1], b2->datasets()[1]->size());
  cfg.data_prefix = {"0.5", "/a", "0.5", "/b"};
  EXPECT_THROW(build_gpt_datasets(cfg, {-1, 2, 0}, open), Error);  // weights need a size
}

TEST(Blend, PerSplitPrefixesBuildEachSplitFromItsOwnFilesWhole) {
  std::map<std::string, std::shared_ptr<const TokenSource>> files{{"/a", make_source(random_sizes(1, 50, 0), "a")},
                                                                  {"/b", make_source(random_sizes(2, 70, 0), "b")},
                                                                  {"/c", make_source(random_sizes(3, 30, 0), "c")}};
  auto open = [&](const std::string& p) { return files.at(p); };
  GptDataConfig cfg;
  cfg.seq_length = 8;
  cfg.splits_string = "98,2,0";  // not used: each split reads its own files whole
  cfg.cache.enabled = false;
  cfg.per_split = true;
  cfg.data_prefix = {"0.7", "/a", "0.3", "/b"};
  cfg.validation_prefix = {"/c"};
  auto out = build_gpt_datasets(cfg, {40, -1, 10}, open);
  EXPECT_EQ(out[2], nullptr);  // no test prefixes: no test split, whatever its size
  auto train = std::dynamic_pointer_cast<const BlendedDataset>(out[0]);
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->size(), 40);
  EXPECT_EQ(split_data_prefix(cfg, Split::valid), cfg.validation_prefix);
  // Every document of each train file is in its train part (splits_string would have kept 98%).
  for (int k = 0; k < 2; k++) {
    const GptIndex& idx = static_cast<const GptSplitDataset&>(*train->datasets()[size_t(k)]).gpt().index();
    std::set<int32_t> docs(idx.doc_index, idx.doc_index + idx.doc_index_size);
    EXPECT_EQ(int64_t(docs.size()), files.at(k ? "/b" : "/a")->num_sequences()) << k;
  }
  // Validation: the one unweighted file, one epoch of all of it; sources name only blends.
  auto valid = std::dynamic_pointer_cast<const GptSplitDataset>(out[1]);
  ASSERT_NE(valid, nullptr);
  std::set<int32_t> docs(valid->gpt().index().doc_index,
                         valid->gpt().index().doc_index + valid->gpt().index().doc_index_size);
  EXPECT_EQ(docs.size(), 30u);
  EXPECT_EQ(valid->gpt().index().num_epochs, 1);
  for (int64_t i = 0; i < valid->size(); i++) EXPECT_EQ(valid->source_of(i), 0);
  // Which source each blended sample comes from is the blend's own dataset index.
  for (int64_t i = 0; i < train->size(); i++) EXPECT_EQ(train->source_of(i), train->dataset_index()[size_t(i)]);
}

// "NAME:PREFIX" names a source: the prefix read is the part after the name, the name is used as given,
// a derived name that equals a given one takes its whole path, and a name given twice or with no
// prefix is an error. A colon after a '/' or after other characters is part of the path.
TEST(Blend, SourcesMayBeNamedInDataPrefix) {
  const BlendSpec w = parse_data_prefix({"0.7", "zh:/data/zh_text_document", "0.3", "/data/en_text_document"});
  EXPECT_EQ(w.prefixes, (std::vector<std::string>{"/data/zh_text_document", "/data/en_text_document"}));
  EXPECT_EQ(w.names, (std::vector<std::string>{"zh", ""}));
  EXPECT_EQ(source_names(w), (std::vector<std::string>{"zh", "en"}));
  const BlendSpec u =
      parse_data_prefix({"wiki-zh.v2:data/a_text_document", "b:c/d:e", "/x:y/b_text_document", "a b:z"});
  EXPECT_EQ(u.prefixes, (std::vector<std::string>{"data/a_text_document", "c/d:e", "/x:y/b_text_document", "a b:z"}));
  EXPECT_EQ(u.names, (std::vector<std::string>{"wiki-zh.v2", "b", "", ""}));
  // "/x:y/b_text_document" would be "b" like the name given to the second: it takes its whole path.
  EXPECT_EQ(source_names(u), (std::vector<std::string>{"wiki-zh.v2", "b", "/x:y/b_text_document", "a b:z"}));
  auto error = [](const std::vector<std::string>& items) {
    try {
      parse_data_prefix(items);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error({"zh:/a", "zh:/b"}).find("data_prefix names two sources \"zh\""), std::string::npos);
  EXPECT_NE(error({"1.0", "zh:"}).find("data_prefix entry \"zh:\" names a source but gives no prefix"),
            std::string::npos);
}

TEST(Blend, SourceNamesAreShortDistinctAndStable) {
  // File names without preprocess's ending; parent folders only where names collide.
  EXPECT_EQ(source_names({"/data/zh_text_document", "/data/en_text_document"}), (std::vector<std::string>{"zh", "en"}));
  EXPECT_EQ(source_names({"/x/wiki/zh_text_document", "/y/news/zh_text_document", "/y/news/en_document"}),
            (std::vector<std::string>{"wiki/zh", "news/zh", "en"}));
  EXPECT_EQ(source_names({"/a/b/c/corpus_text_document", "/a/d/c/corpus_text_document"}),
            (std::vector<std::string>{"b/c/corpus", "d/c/corpus"}));
  // Relative and unnormalized paths name the same way; a name that is only an ending stays whole.
  EXPECT_EQ(source_names({"data/./zh_text_document", "../other//en_text_document", "_text_document"}),
            (std::vector<std::string>{"zh", "en", "_text_document"}));
  // One path a suffix of the other: the shorter keeps all it has.
  EXPECT_EQ(source_names({"zh_text_document", "/data/zh_text_document"}), (std::vector<std::string>{"zh", "data/zh"}));
  // The same prefix twice (a file up-weighted by repeating it) counts its repeats.
  EXPECT_EQ(source_names({"/d/zh_text_document", "/d/en_text_document", "/d/zh_text_document"}),
            (std::vector<std::string>{"zh", "en", "zh#2"}));
  // Names never collide, whatever the paths.
  const std::vector<std::string> many = {"/a/x_text_document",
                                         "/b/x_text_document",
                                         "/a/x_document",
                                         "/c/a/x_text_document",
                                         "x",
                                         "/a/x_text_document",
                                         "a/x_text_document",
                                         "/x",
                                         "x_text_document"};
  const auto names = source_names(many);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), many.size()) << fmt::format("{}", names);
  EXPECT_EQ(source_names({"/only/one_text_document"}), (std::vector<std::string>{"one"}));
}
