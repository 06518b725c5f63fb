// GPT index construction and blending against the independent Python reference
// (tools/reference/megatron_gpt_index.py): the committed goldens in tests/golden/gpt_index/ always,
// and freshly generated random cases when Debian's python3 with numpy is present; then the sample
// fields of reset_attention_mask / reset_position_ids / eod_mask_loss against Megatron's rule as
// tools/reference/megatron_masks.py writes it (a dense attention mask per sample).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/blend.h"
#include "data/gpt_dataset.h"
#include "test_util.h"

using namespace llamatrain;
using namespace llamatrain::data;
using nlohmann::json;

namespace {

const std::string kGoldenDir = std::string(LLAMATRAIN_SOURCE_DIR) + "/tests/golden/gpt_index";

// Token t of sequence s of data set g is g*100000 + s*1000 + t, as in the Python reference.
std::shared_ptr<const TokenSource> make_source(const std::vector<int32_t>& sizes, int gid) {
  std::vector<std::vector<int32_t>> seqs(sizes.size());
  for (size_t s = 0; s < sizes.size(); s++)
    for (int32_t t = 0; t < sizes[s]; t++) seqs[s].push_back(int32_t(gid * 100000 + int(s) * 1000 + t));
  return std::make_shared<InMemoryTokenSource>(std::move(seqs), "ds" + std::to_string(gid));
}

int g_compared_splits = 0;  // splits compared field by field (guards against vacuous passes)

int64_t opt_n(const json& v) { return v.is_null() ? -1 : v.get<int64_t>(); }

// Compares one split's indices (and sample texts, when the reference has them).
void expect_split(const json& ref, const GptDataset& ds, const std::string& what) {
  SCOPED_TRACE(what);
  g_compared_splits++;
  const GptIndex& ix = ds.index();
  EXPECT_EQ(ix.tokens_per_epoch, ref["tokens_per_epoch"].get<int64_t>());
  EXPECT_EQ(ix.num_epochs, ref["num_epochs"].get<int64_t>());
  EXPECT_EQ(ix.separate_final_epoch, ref["separate_final_epoch"].get<bool>());
  ASSERT_EQ(ix.num_samples, ref["num_samples"].get<int64_t>());
  auto doc = ref["doc_index"].get<std::vector<int32_t>>();
  auto smp = ref["sample_index"].get<std::vector<int64_t>>();
  auto shf = ref["shuffle_index"].get<std::vector<int64_t>>();
  ASSERT_EQ(ix.doc_index_size, int64_t(doc.size()));
  EXPECT_EQ(std::vector<int32_t>(ix.doc_index, ix.doc_index + doc.size()), doc);
  EXPECT_EQ(std::vector<int64_t>(ix.sample_index, ix.sample_index + smp.size()), smp);
  EXPECT_EQ(std::vector<int64_t>(ix.shuffle_index, ix.shuffle_index + shf.size()), shf);
  if (ref.contains("texts")) {
    std::vector<int32_t> text(static_cast<size_t>(ds.text_length()));
    for (int64_t i = 0; i < ix.num_samples; i++) {
      auto want = ref["texts"][size_t(i)].get<std::vector<int32_t>>();
      int64_t n = ds.sample_text(i, text.data());
      ASSERT_EQ(n, int64_t(want.size())) << "sample " << i;
      ASSERT_EQ(std::vector<int32_t>(text.begin(), text.begin() + n), want) << "sample " << i;
    }
  }
}

void check_gpt_case(const json& c, const std::string& name) {
  const json& spec = c["spec"];
  auto sizes = spec["sizes"].get<std::vector<int32_t>>();
  auto src = make_source(sizes, 0);
  auto ranges = split_ranges(spec["split"].get<std::string>(), int64_t(sizes.size()));
  for (int k = 0; k < 3; k++) {
    const json& ref = c["splits"][size_t(k)];
    std::string what = name + " split " + split_name(Split(k));
    ASSERT_EQ(ranges[size_t(k)].exists, ref["exists"].get<bool>()) << what;
    if (!ranges[size_t(k)].exists) continue;
    EXPECT_EQ(ranges[size_t(k)].begin, ref["begin"].get<int64_t>()) << what;
    EXPECT_EQ(ranges[size_t(k)].end, ref["end"].get<int64_t>()) << what;
    GptIndexParams p;
    p.seq_length = spec["seq_length"].get<int64_t>();
    p.num_samples = opt_n(spec["num_samples"][size_t(k)]);
    p.seed = spec["seed"].get<uint32_t>();
    p.drop_last_partial = k == 0 || spec.value("drop_last_partial", true);
    IndexCacheOptions no_cache;
    no_cache.enabled = false;
    if (ref.contains("error")) {
      EXPECT_THROW(GptDataset(src, Split(k), ranges[size_t(k)], p, no_cache), Error) << what;
      continue;
    }
    GptDataset ds(src, Split(k), ranges[size_t(k)], p, no_cache);
    expect_split(ref, ds, what);
  }
}

void check_blend_case(const json& c, const std::string& name) {
  const json& spec = c["spec"];
  GptDataConfig cfg;
  std::vector<std::shared_ptr<const TokenSource>> sources;
  for (size_t g = 0; g < spec["datasets"].size(); g++) {
    cfg.data_prefix.push_back(spec["weights"][g].dump());
    cfg.data_prefix.push_back("ds" + std::to_string(g));
    sources.push_back(make_source(spec["datasets"][g].get<std::vector<int32_t>>(), int(g)));
  }
  cfg.splits_string = spec["split"].get<std::string>();
  cfg.seq_length = spec["seq_length"].get<int64_t>();
  cfg.seed = spec["seed"].get<uint32_t>();
  cfg.surplus = spec.value("surplus", kDefaultBlendSurplus);
  cfg.cache.enabled = false;
  BlendSpec bs = parse_data_prefix(cfg.data_prefix);
  ASSERT_EQ(bs.prefixes.size(), sources.size());
  for (int k = 0; k < 3; k++) {
    const json& ref = c["splits"][size_t(k)];
    std::string what = name + " split " + split_name(Split(k));
    int64_t n = opt_n(spec["num_samples"][size_t(k)]);
    if (!ref["exists"].get<bool>()) {
      EXPECT_EQ(build_gpt_split(cfg, bs, sources, Split(k), n), nullptr) << what;
      continue;
    }
    if (ref.contains("error")) {
      EXPECT_THROW(build_gpt_split(cfg, bs, sources, Split(k), n), Error) << what;
      continue;
    }
    auto top = build_gpt_split(cfg, bs, sources, Split(k), n);
    auto blend = std::dynamic_pointer_cast<const BlendedDataset>(top);
    ASSERT_NE(blend, nullptr) << what;
    ASSERT_EQ(blend->size(), ref["size"].get<int64_t>()) << what;
    auto di = ref["dataset_index"].get<std::vector<int16_t>>();
    auto dsi = ref["dataset_sample_index"].get<std::vector<int64_t>>();
    EXPECT_EQ(blend->dataset_index(), di) << what;
    EXPECT_EQ(blend->dataset_sample_index(), dsi) << what;
    auto per = ref["per_dataset_samples"].get<std::vector<int64_t>>();
    for (size_t g = 0; g < per.size(); g++) {
      auto part = std::dynamic_pointer_cast<const GptSplitDataset>(blend->datasets()[g]);
      ASSERT_NE(part, nullptr);
      EXPECT_EQ(part->gpt().index().num_samples, ref["parts"][g]["num_samples"].get<int64_t>());
      expect_split(ref["parts"][g], part->gpt(),
                   what + " dataset " + std::to_string(g) + " requested " + std::to_string(per[g]));
    }
    if (ref.contains("texts")) {
      std::vector<int32_t> text(size_t(blend->text_length()));
      for (int64_t i = 0; i < blend->size(); i++) {
        blend->sample_text(i, text.data());
        ASSERT_EQ(text, ref["texts"][size_t(i)].get<std::vector<int32_t>>()) << what << " sample " << i;
      }
    }
  }
}

void check_case(const json& c, const std::string& name) {
  std::string mode = c["spec"].value("mode", "gpt");
  if (mode == "gpt") check_gpt_case(c, name);
  if (mode == "blend") check_blend_case(c, name);
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

}  // namespace

TEST(GptIndexGolden, EveryGoldenCaseMatches) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(kGoldenDir)) {
    if (e.path().extension() != ".json" || e.path().stem() == "rng") continue;
    check_case(read_json(e.path().string()), e.path().stem().string());
    n++;
  }
  EXPECT_GE(n, 14);  // every case of make_gpt_index_goldens.py
}

TEST(GptIndexGolden, FormatsTestVector215) {
  // docs/formats.md §2.15, hard-coded: sizes [5,3,7,4,6], split 1,0,0, L=4, N=10, seed 1234.
  auto src = make_source({5, 3, 7, 4, 6}, 0);
  GptIndexParams p;
  p.seq_length = 4;
  p.num_samples = 10;
  p.seed = 1234;
  IndexCacheOptions no_cache;
  no_cache.enabled = false;
  GptDataset ds(src, Split::train, split_ranges("1,0,0", 5)[0], p, no_cache);
  const GptIndex& ix = ds.index();
  EXPECT_EQ(ix.num_epochs, 2);
  EXPECT_FALSE(ix.separate_final_epoch);
  EXPECT_EQ(std::vector<int32_t>(ix.doc_index, ix.doc_index + ix.doc_index_size),
            (std::vector<int32_t>{2, 2, 4, 1, 0, 3, 4, 0, 1, 3}));
  EXPECT_EQ(std::vector<int64_t>(ix.sample_index, ix.sample_index + 2 * (ix.num_samples + 1)),
            (std::vector<int64_t>{0, 0, 0, 4, 1, 1, 1, 5, 2, 2, 3, 0, 4, 1, 5, 0, 6, 0, 6, 4, 7, 2, 8, 1, 9, 2}));
  EXPECT_EQ(std::vector<int64_t>(ix.shuffle_index, ix.shuffle_index + ix.num_samples),
            (std::vector<int64_t>{3, 11, 2, 1, 7, 5, 4, 0, 8, 6, 10, 9}));
  // Item 0 is flat[12:17]: seq2[5:7] then seq4[0:3].
  std::vector<int32_t> text(5);
  EXPECT_EQ(ds.sample_text(0, text.data()), 5);
  EXPECT_EQ(text, (std::vector<int32_t>{2005, 2006, 4000, 4001, 4002}));
}

TEST(GptIndexGolden, RngMatchesNumpyGolden) {
  json g = read_json(kGoldenDir + "/rng.json");
  NumpyRandomState r42(42);
  EXPECT_EQ(r42.random_sample(), g["random_sample_seed42"].get<double>());
  for (uint32_t seed : {0u, 1234u}) {
    std::vector<int64_t> a(10);
    for (int i = 0; i < 10; i++) a[size_t(i)] = i;
    NumpyRandomState(seed).shuffle(a.data(), 10);
    EXPECT_EQ(a, g["shuffle10_seed" + std::to_string(seed)].get<std::vector<int64_t>>());
  }
  NumpyRandomState r5489(5489);
  uint32_t v = 0;
  for (int i = 0; i < 10000; i++) v = r5489.next_u32();
  EXPECT_EQ(v, g["mt_5489_10000th"].get<uint32_t>());
  for (auto [name, max] : {std::pair<std::string, uint64_t>{"interval_2pow40_seed1", uint64_t(1) << 40},
                           std::pair<std::string, uint64_t>{"interval_1000_seed1", 1000}}) {
    NumpyRandomState r(1);
    for (uint64_t want : g[name].get<std::vector<uint64_t>>()) EXPECT_EQ(r.random_interval(max), want) << name;
  }
  std::vector<int64_t> big(100000);
  for (int64_t i = 0; i < 100000; i++) big[size_t(i)] = i;
  NumpyRandomState(7).shuffle(big.data(), 100000);
  EXPECT_EQ(std::vector<int64_t>(big.begin(), big.begin() + 20),
            g["shuffle100000_seed7_head"].get<std::vector<int64_t>>());
}

// Random cases generated here, answered by the Python reference now (not from goldens).
TEST(GptIndexGolden, RandomCasesMatchLivePythonReference) {
  if (auto why = llamatrain::testing::python_missing({"numpy"}); !why.empty()) GTEST_SKIP() << why;
  std::string py = llamatrain::testing::system_python();
  std::mt19937 rng(20260);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const char* splits[] = {"969,30,1", "98,2,0", "1,0,0", "90,5,5", "2,1,1", "0.7 0.2 0.1"};
  json specs = json::array();
  for (int c = 0; c < 40; c++) {
    bool blend = c % 4 == 3;
    auto sizes = [&](int n) {
      std::vector<int32_t> s(static_cast<size_t>(n));
      int zero_pct = uni(0, 30);
      for (auto& x : s) x = uni(0, 99) < zero_pct ? 0 : uni(1, 60);
      return s;
    };
    json spec;
    spec["split"] = splits[uni(0, 5)];
    spec["seq_length"] = uni(1, 24);
    spec["seed"] = uint32_t(rng());
    spec["with_text"] = true;
    json ns = json::array();
    for (int k = 0; k < 3; k++) {
      if (!blend && uni(0, 4) == 0)
        ns.push_back(nullptr);
      else
        ns.push_back(uni(0, 200));
    }
    spec["num_samples"] = ns;
    if (blend) {
      spec["mode"] = "blend";
      int nd = uni(2, 3);
      spec["datasets"] = json::array();
      spec["weights"] = json::array();
      for (int g = 0; g < nd; g++) {
        spec["datasets"].push_back(sizes(uni(30, 90)));
        spec["weights"].push_back(uni(1, 9) / 10.0);
      }
      spec["surplus"] = 0.005;
    } else {
      spec["mode"] = "gpt";
      spec["sizes"] = sizes(uni(5, 150));
      spec["drop_last_partial"] = true;
    }
    specs.push_back(spec);
  }
  auto dir = std::filesystem::temp_directory_path() / ("gptidx_live_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string in = (dir / "specs.json").string(), out = (dir / "out.json").string();
  std::ofstream(in) << specs.dump();
  std::string cmd = py + " " + LLAMATRAIN_SOURCE_DIR + "/tools/reference/megatron_gpt_index.py " + in + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  json results = read_json(out);
  ASSERT_EQ(results.size(), specs.size());
  int before = g_compared_splits;
  for (size_t c = 0; c < results.size(); c++) check_case(results[c], "random case " + std::to_string(c));
  EXPECT_GE(g_compared_splits - before, 60);
  std::filesystem::remove_all(dir);
}

// Random samples (EOD at the start, at the end, twice in a row, none, many; partial samples with
// padding) under every combination of the three switches: the document starts the attention uses
// give exactly Megatron's dense mask, and positions and loss mask are Megatron's. A padded tail
// (make_gpt_sample's kept partial sample) is compared on its real inputs only: Megatron has none.
TEST(GptSampleMasks, MatchMegatronRuleOnRandomSamples) {
  if (auto why = llamatrain::testing::python_missing({"numpy"}); !why.empty()) GTEST_SKIP() << why;
  std::mt19937 rng(4242);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int32_t eod = 2;
  struct Case {
    std::vector<int32_t> text;
    int64_t valid, L;
    SampleOptions opt;
  };
  std::vector<Case> cases;
  json specs = json::array();
  for (int c = 0; c < 120; c++) {
    Case k;
    k.L = uni(1, 40);
    k.text.resize(size_t(k.L) + 1);
    const int eod_pct = c % 6 == 0 ? 0 : uni(5, 60);
    for (auto& t : k.text) t = uni(0, 99) < eod_pct ? eod : uni(3, 50);
    if (c % 5 == 1) k.text[0] = eod;
    if (c % 5 == 2) k.text[size_t(k.L) - 1] = eod;
    k.valid = c % 7 == 3 ? uni(1, int(k.L) + 1) : k.L + 1;
    k.opt = SampleOptions{eod, (c & 1) != 0, (c & 2) != 0, (c & 4) != 0};
    // Megatron's inputs: the real ones (a partial sample's padding has no counterpart there).
    const int64_t real = std::min<int64_t>(k.valid, k.L);
    specs.push_back({{"tokens", std::vector<int32_t>(k.text.begin(), k.text.begin() + real)},
                     {"eod", eod},
                     {"eod_mask_loss", k.opt.eod_mask_loss},
                     {"reset_position_ids", k.opt.reset_position_ids},
                     {"reset_attention_mask", k.opt.reset_attention_mask}});
    cases.push_back(std::move(k));
  }
  const auto dir = std::filesystem::temp_directory_path() / ("megatron_masks_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string in = (dir / "cases.json").string(), out = (dir / "out.json").string();
  std::ofstream(in) << specs.dump();
  const std::string cmd = llamatrain::testing::system_python() + " " + LLAMATRAIN_SOURCE_DIR +
                          "/tools/reference/megatron_masks.py < " + in + " > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const json results = json::parse(std::ifstream(out));
  std::filesystem::remove_all(dir);
  ASSERT_EQ(results.size(), cases.size());
  int documents_seen = 0;
  for (size_t c = 0; c < cases.size(); c++) {
    const Case& k = cases[c];
    SCOPED_TRACE("case " + std::to_string(c) + " " + specs[c].dump());
    GptSample s;
    make_gpt_sample(&s, k.text.data(), k.valid, k.L, k.opt);
    const auto& want = results[c];
    const auto mask = want["attention_mask"].get<std::vector<std::vector<int>>>();
    const int64_t real = int64_t(mask.size());
    for (int64_t t = 0; t < real; t++) {
      for (int64_t u = 0; u < real; u++) {
        const int visible = u <= t && u >= s.doc_start[size_t(t)];
        ASSERT_EQ(visible, mask[size_t(t)][size_t(u)]) << "query " << t << " key " << u;
      }
      EXPECT_EQ(s.position_ids[size_t(t)], want["position_ids"][size_t(t)].get<int32_t>()) << "position " << t;
      // Megatron's loss mask is over inputs; ours also drops the last input of a partial sample (no label).
      if (t + 1 < k.valid) {
        EXPECT_EQ(s.loss_mask[size_t(t)], want["loss_mask"][size_t(t)].get<float>()) << "loss mask " << t;
      }
      documents_seen += t > 0 && s.doc_start[size_t(t)] == t;
    }
  }
  EXPECT_GE(documents_seen, 100);  // the cases did cut documents apart
}
