// Checkpoints across parallel layouts: a model split over tensor (TP), pipeline (PP) and data (DP,
// with or without ZeRO-1) parallel ranks saves a checkpoint that any other layout loads. Ranks are
// threads over LocalCommunicator. Every rank's AdamW moments are set to a pure function of (tensor,
// full element index), so after a save under layout A and a load under layout B every element of B's
// moments is checked against that function, and every weight against a single-rank model's (the
// random init is layout invariant, checked bitwise through gather_full_weights). Also: the HF weight
// bytes do not depend on the layout, Hugging Face weights load into a TP x PP layout, checkpoints
// written before shards were recorded still load, a vocabulary padded differently under each layout
// reshards, and a missing or doubled optimizer file is an error.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "core/bf16.h"
#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/llama.h"
#include "parallel/collective_checks.h"
#include "parallel/data_parallel.h"
#include "parallel/layout.h"
#include "parallel/local_communicator.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/gather_weights.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using parallel::Communicator;
using parallel::testing::test_options;
using testing::TempDir;

constexpr uint64_t kSeed = 11;

model::LlamaConfig config(bool tied) {
  return {.dim = 64,
          .ffn_dim = 128,
          .n_layers = 4,
          .n_heads = 4,
          .n_kv_heads = 2,
          .vocab_size = 256,
          .max_seq_len = 64,
          .norm_eps = 1e-5f,
          .tie_embeddings = tied};
}

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  bool zero1 = false;
  int world() const { return tp * pp * dp; }
};

std::string name_of(const Layout& l) {
  return fmt::format("TP{} PP{} DP{}{}", l.tp, l.pp, l.dp, l.zero1 ? " ZeRO-1" : "");
}

// One rank of a layout: its place, groups and (uninitialized) model part.
struct Rank {
  parallel::ParallelLayout layout;
  parallel::ParallelGroups groups;
  std::unique_ptr<model::LlamaModel> model;
};

Rank make_rank(Communicator& world, const model::LlamaConfig& c, const Layout& lay, model::Precision p) {
  Rank r;
  r.layout = parallel::ParallelLayout::make(world.size(), lay.tp, lay.pp, world.rank());
  r.groups = parallel::ParallelGroups::make(world, r.layout);
  const auto plan = model::ShardPlan::make(c, lay.tp, r.layout.tp_rank, lay.pp, r.layout.pp_rank, false);
  r.model = std::make_unique<model::LlamaModel>(c, p, kSeed, plan, r.groups.tp.get());
  if (lay.zero1) {
    const parallel::ZeroShards shards(size_t(r.model->num_params()), lay.dp);
    const auto range = shards.range(r.layout.dp_rank);
    r.model->set_optimizer_shard(int64_t(range.begin), int64_t(range.end), int64_t(shards.padded_size()));
  }
  return r;
}

void init(model::LlamaModel& m) { m.init_random(0.02f, 0.01f); }

// The reference: the whole model on one rank, initialized the same way.
std::unique_ptr<model::LlamaModel> single_model(const model::LlamaConfig& c, model::Precision p) {
  auto m = std::make_unique<model::LlamaModel>(c, p, kSeed);
  init(*m);
  return m;
}

// Moment `kind` (0 exp_avg, 1 exp_avg_sq) of element i of full tensor `id`: exact integers in fp32
// (distinct across tensors), bf16-representable noise in bf16 mode.
float moment_value(int kind, int id, int64_t i, bool bf16_state) {
  if (bf16_state) return to_float(to_bf16(parallel::testing::noise(uint64_t(kind * 16 + id), uint64_t(i))));
  return float(int64_t(kind * 16 + id) * (int64_t(1) << 17) + i);
}

int kind_of(const model::StateTensor& t) {
  if (t.name.rfind("exp_avg_sq.", 0) == 0) return 1;
  if (t.name.rfind("exp_avg.", 0) == 0) return 0;
  return -1;  // weights
}

int full_id_of(const model::LlamaModel& m, const std::string& param) {
  for (const auto& s : m.param_specs())
    if (s.name == param) return s.full_id;
  ADD_FAILURE() << "no tensor " << param;
  return -1;
}

// Calls fn(k, full) for every element k (from the range's start) of a state tensor, with its full index.
template <typename Fn>
void for_each_element(const model::StateTensor& t, Fn fn) {
  t.shard.for_each_run([&](int64_t local, int64_t full, int64_t n) {
    for (int64_t k = std::max(local, t.first); k < std::min(local + n, t.first + t.numel); k++)
      fn(k - t.first, full + (k - local));
  });
}

void fill_moments(model::LlamaModel& m) {
  const bool b16 = m.precision() == model::Precision::bf16_sr;
  for (const auto& t : m.state_tensors()) {
    const int kind = kind_of(t);
    if (kind < 0) continue;
    const int id = full_id_of(m, t.param);
    for_each_element(t, [&](int64_t k, int64_t full) {
      const float v = moment_value(kind, id, full, b16);
      if (b16)
        static_cast<bf16*>(t.data)[k] = to_bf16(v);
      else
        static_cast<float*>(t.data)[k] = v;
    });
  }
}

// Every moment element against moment_value; returns the elements checked.
int64_t check_moments(model::LlamaModel& m, const std::string& where) {
  const bool b16 = m.precision() == model::Precision::bf16_sr;
  int64_t checked = 0;
  for (const auto& t : m.state_tensors()) {
    const int kind = kind_of(t);
    if (kind < 0) continue;
    const int id = full_id_of(m, t.param);
    int64_t bad = 0;
    std::string first_bad;
    for_each_element(t, [&](int64_t k, int64_t full) {
      const float got = b16 ? to_float(static_cast<const bf16*>(t.data)[k]) : static_cast<const float*>(t.data)[k];
      const float want = moment_value(kind, id, full, b16);
      if (!(got == want) && bad++ == 0) first_bad = fmt::format("full element {}: {} != {}", full, got, want);
      checked++;
    });
    EXPECT_EQ(bad, 0) << where << ": " << t.name << " " << first_bad;
  }
  return checked;
}

// Every local weight against the single model's weight at the same full position, bitwise.
int64_t check_weights(model::LlamaModel& m, model::LlamaModel& single, const std::string& where) {
  int64_t checked = 0;
  for (const auto& s : m.param_specs()) {
    const model::ParamSpec* fs = nullptr;
    for (const auto& f : single.param_specs())
      if (f.full_id == s.full_id) fs = &f;
    if (!fs) {
      ADD_FAILURE() << where << ": the single model has no " << s.name;
      continue;
    }
    int64_t bad = 0;
    s.shard.for_each_run([&](int64_t local, int64_t full, int64_t n) {
      bad += std::memcmp(m.param_data() + s.offset + local, single.param_data() + fs->offset + full,
                         size_t(n) * sizeof(float)) != 0;
      checked += n;
    });
    EXPECT_EQ(bad, 0) << where << ": weights of " << s.name << " differ from the single model's in " << bad << " runs";
  }
  return checked;
}

train::TrainerState state_at(int64_t step) {
  train::TrainerState st;
  st.step = step;
  st.optimizer_steps = step;
  st.consumed_samples = 8 * step;
  st.seed = kSeed;
  st.lr = 1e-3;
  st.loss = 2.5;
  return st;
}

// Saves a checkpoint of step 7 from layout `lay`: init, moments from moment_value.
std::string save_from(const std::string& dir, const model::LlamaConfig& c, const Layout& lay, model::Precision p) {
  std::mutex mu;
  std::string path;
  parallel::run_local_ranks(
      lay.world(),
      [&](Communicator& world) {
        Rank r = make_rank(world, c, lay, p);
        init(*r.model);
        fill_moments(*r.model);
        train::SaveGroups g{&world, r.groups.mp.get(), r.layout};
        const std::string got = train::save_checkpoint(dir, *r.model, state_at(7), "", "seed: 11\n", {}, g);
        std::lock_guard<std::mutex> lock(mu);
        if (path.empty()) path = got;
        EXPECT_EQ(got, path);
      },
      test_options());
  EXPECT_EQ(train::verify_checkpoint(path), "") << name_of(lay);
  return path;
}

// Loads `path` into layout `lay` and checks every weight and moment element.
void load_into(const std::string& path, const model::LlamaConfig& c, const Layout& lay, model::Precision p,
               model::LlamaModel& single, const std::string& where) {
  std::atomic<int64_t> weights{0}, moments{0};
  parallel::run_local_ranks(
      lay.world(),
      [&](Communicator& world) {
        Rank r = make_rank(world, c, lay, p);
        try {
          const auto st = train::load_checkpoint(path, *r.model);
          EXPECT_EQ(st.step, 7) << where;
        } catch (const Error& e) {
          ADD_FAILURE() << where << " rank " << world.rank() << ": " << e.what();
          return;
        }
        weights += check_weights(*r.model, single, where);
        moments += check_moments(*r.model, where);
      },
      test_options());
  // Each full element once per replica, plus the copies: replicated norms, the tied embedding on
  // the last stage; moments are ZeRO-1 sharded, so the replicas together hold one copy.
  EXPECT_GE(weights.load(), c.num_params() * lay.dp) << where;
  EXPECT_GE(moments.load(), 2 * c.num_params() * (lay.zero1 ? 1 : lay.dp)) << where;
}

std::vector<std::string> optimizer_files(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(path))
    if (e.path().filename().string().rfind("optimizer", 0) == 0) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CheckpointReshard, InitIsLayoutInvariant) {
  for (bool tied : {false, true}) {
    const auto c = config(tied);
    auto single = single_model(c, model::Precision::fp32);
    for (const Layout& lay :
         {Layout{2, 1, 1}, Layout{1, 2, 1}, Layout{2, 2, 1}, Layout{2, 1, 2}, Layout{1, 4, 1}, Layout{4, 1, 1}}) {
      const std::string where = name_of(lay) + (tied ? " tied" : " untied");
      std::atomic<int> gathered{0};
      parallel::run_local_ranks(
          lay.world(),
          [&](Communicator& world) {
            Rank r = make_rank(world, c, lay, model::Precision::fp32);
            init(*r.model);
            check_weights(*r.model, *single, where);
            auto full = train::gather_full_weights(*r.model, *r.groups.mp);
            EXPECT_EQ(full != nullptr, r.groups.mp->rank() == 0) << where;
            if (!full) return;
            gathered++;
            EXPECT_EQ(full->num_params(), single->num_params()) << where;
            if (full->num_params() == single->num_params()) {
              EXPECT_EQ(std::memcmp(full->param_data(), single->param_data(), size_t(single->num_params()) * 4), 0)
                  << where;
            }
          },
          test_options());
      EXPECT_EQ(gathered.load(), lay.dp) << where;
    }
  }
}

TEST(CheckpointReshard, SaveUnderOneLayoutLoadUnderAnother) {
  struct Case {
    Layout from;
    std::vector<Layout> to;
  };
  const std::vector<Case> cases = {
      {{2, 1, 2, true}, {{1, 2, 1}, {1, 1, 1}, {2, 2, 1}}},
      {{2, 2, 1}, {{1, 1, 2, true}, {2, 1, 2, true}}},
      {{1, 2, 2, true}, {{2, 1, 1}, {1, 1, 1}, {4, 1, 1}}},
      // TP 4 over 2 kv heads: each kv head on two ranks, its moments saved once (by the first)
      {{4, 1, 1}, {{1, 1, 1}, {2, 1, 1}, {1, 2, 2, true}}},
      {{4, 1, 2, true}, {{4, 2, 1}, {1, 1, 1}}},
  };
  for (bool tied : {false, true}) {
    const auto c = config(tied);
    auto single = single_model(c, model::Precision::fp32);
    TempDir dir;
    // The HF part of every checkpoint is byte for byte the single rank's.
    const std::string reference = save_from(dir / "single", c, Layout{}, model::Precision::fp32);
    EXPECT_EQ(optimizer_files(reference), std::vector<std::string>{"optimizer.safetensors"});
    for (const Case& k : cases) {
      const std::string where = name_of(k.from) + (tied ? " tied" : " untied");
      const std::string path = save_from(dir / ("from " + name_of(k.from)), c, k.from, model::Precision::fp32);
      EXPECT_EQ(testing::read_file(path + "/model.safetensors"), testing::read_file(reference + "/model.safetensors"))
          << where;
      EXPECT_EQ(testing::read_file(path + "/config.json"), testing::read_file(reference + "/config.json")) << where;
      // One numbered file per rank with moments of its own: every rank here (TP ranks hold distinct
      // parts, ZeRO-1 replicas distinct ranges).
      EXPECT_EQ(optimizer_files(path).size(), size_t(k.from.world())) << where;
      for (const Layout& to : k.to)
        load_into(path, c, to, model::Precision::fp32, *single, where + " -> " + name_of(to));
    }
  }
}

TEST(CheckpointReshard, PaddedVocabularyReshards) {
  // 1000 tokens padded to multiples of 8 x TP: 1000 rows on one rank, 1008 on TP2, 1024 on TP4. The
  // checkpoint holds the 1000 real rows under every layout (the same HF bytes as one rank's, moments
  // of the real rows only), and loads into any layout with the padding rows 0.
  for (bool tied : {false, true}) {
    model::LlamaConfig c = config(tied);
    c.vocab_size = 1000, c.vocab_multiple = 8;
    auto single = single_model(c, model::Precision::fp32);
    TempDir dir;
    const std::string reference = save_from(dir / "single", c, Layout{}, model::Precision::fp32);
    for (const Layout& from : {Layout{2, 1, 1}, Layout{4, 1, 2, true}}) {
      const std::string where = name_of(from) + (tied ? " tied" : " untied");
      const std::string path = save_from(dir / ("from " + name_of(from)), c, from, model::Precision::fp32);
      EXPECT_EQ(testing::read_file(path + "/model.safetensors"), testing::read_file(reference + "/model.safetensors"))
          << where;
      for (const Layout& to : {Layout{}, Layout{4, 1, 1}, Layout{2, 2, 1}, Layout{1, 2, 2, true}}) {
        load_into(path, c, to, model::Precision::fp32, *single, where + " -> " + name_of(to));
        // The padding rows after the load: 0.
        std::atomic<int64_t> nonzero{0};
        parallel::run_local_ranks(
            to.world(),
            [&](Communicator& world) {
              Rank r = make_rank(world, c, to, model::Precision::fp32);
              train::load_checkpoint(path, *r.model);
              for (const auto& s : r.model->param_specs())
                for (int64_t i = s.offset + s.shard.numel(); i < s.offset + s.numel; i++)
                  nonzero += r.model->param_data()[i] != 0.0f;
            },
            test_options());
        EXPECT_EQ(nonzero.load(), 0) << where << " -> " << name_of(to);
      }
    }
  }
}

TEST(CheckpointReshard, ACheckpointWhoseVocabularyCountsPaddingSaysHowToUseIt) {
  // An earlier llamatrain recorded the padded vocabulary (1008 for 1000 pieces at TP2): resuming is
  // refused, and the hint names model.init_from.
  model::LlamaConfig c = config(false);
  c.vocab_size = 1008;
  TempDir dir;
  const std::string path = save_from(dir.path(), c, Layout{}, model::Precision::fp32);
  c.vocab_size = 1000, c.vocab_multiple = 8;
  try {
    train::check_checkpoint_compatible(path, c);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size is 1008, but the configured model has 1000"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("model.init_from=" + path), std::string::npos) << e.what();
  }
}

TEST(CheckpointReshard, DataParallelReplicasWriteOnce) {
  // Without ZeRO-1, DP replicas hold the same moments: only dp rank 0's model-parallel ranks write.
  const auto c = config(false);
  auto single = single_model(c, model::Precision::fp32);
  TempDir dir;
  const std::string path = save_from(dir.path(), c, Layout{2, 1, 2, false}, model::Precision::fp32);
  EXPECT_EQ(optimizer_files(path),
            (std::vector<std::string>{"optimizer-00001-of-00004.safetensors", "optimizer-00002-of-00004.safetensors"}));
  load_into(path, c, Layout{1, 2, 1}, model::Precision::fp32, *single, "TP2 DP2 -> PP2");
}

TEST(CheckpointReshard, Bf16StateReshards) {
  const auto c = config(true);
  auto single = single_model(c, model::Precision::bf16_sr);
  TempDir dir;
  const std::string path = save_from(dir.path(), c, Layout{2, 1, 2, true}, model::Precision::bf16_sr);
  load_into(path, c, Layout{2, 2, 1}, model::Precision::bf16_sr, *single, "bf16-sr TP2 DP2 ZeRO-1 -> TP2 PP2");
  load_into(path, c, Layout{}, model::Precision::bf16_sr, *single, "bf16-sr TP2 DP2 ZeRO-1 -> 1 rank");
  const std::string replicated = save_from(dir / "tp4", c, Layout{4, 1, 2, true}, model::Precision::bf16_sr);
  load_into(replicated, c, Layout{}, model::Precision::bf16_sr, *single,
            "bf16-sr TP4 (kv replicated) DP2 ZeRO-1 -> 1 rank");
  load_into(replicated, c, Layout{4, 2, 1}, model::Precision::bf16_sr, *single, "bf16-sr TP4 DP2 ZeRO-1 -> TP4 PP2");
}

// A checkpoint of the format before shards were recorded: one rank's optimizer.safetensors with
// range.<name> only. It loads into TP and PP layouts.
TEST(CheckpointReshard, CheckpointsWithoutShardsLoadIntoModelParallelLayouts) {
  for (bool tied : {false, true}) {
    const auto c = config(tied);
    auto single = single_model(c, model::Precision::fp32);
    TempDir dir;
    const std::string path = save_from(dir.path(), c, Layout{}, model::Precision::fp32);
    const std::string file = path + "/optimizer.safetensors";
    {
      const io::SafetensorsFile f(file);
      std::map<std::string, std::string> meta;
      for (const auto& [k, v] : f.metadata())
        if (k.rfind("shard.", 0) != 0) meta[k] = v;
      std::vector<io::TensorToWrite> tensors;
      for (const auto& t : f.tensors()) tensors.push_back({t.name, t.dtype, t.shape, t.data});
      const auto bytes = io::serialize_safetensors(tensors, meta);
      testing::write_file(file + ".old", std::string(bytes.begin(), bytes.end()));
    }
    fs::rename(file + ".old", file);
    EXPECT_EQ(io::SafetensorsFile(file).metadata().count("shard.exp_avg.wqkv"), 0u);
    const std::string where = std::string("1 rank, no shard metadata") + (tied ? " tied" : " untied");
    load_into(path, c, Layout{2, 1, 1}, model::Precision::fp32, *single, where + " -> TP2");
    load_into(path, c, Layout{2, 2, 1}, model::Precision::fp32, *single, where + " -> TP2 PP2");
  }
}

TEST(CheckpointReshard, HfWeightsLoadIntoTensorAndPipelineParallelRanks) {
  for (bool tied : {false, true})
    for (const char* dtype : {"float32", "bfloat16"}) {
      const auto c = config(tied);
      auto single = single_model(c, model::Precision::fp32);
      TempDir dir;
      io::save_hf_checkpoint(*single, dir / "hf", dtype);
      // What the HF folder holds: the single model's weights, rounded to bf16 for a bf16 folder.
      auto want = std::make_unique<model::LlamaModel>(c, model::Precision::fp32, kSeed);
      io::load_hf_weights(*want, dir / "hf");
      const std::string where = std::string("HF ") + dtype + (tied ? " tied" : " untied") + " -> TP2 PP2";
      std::atomic<int64_t> bytes{0};
      parallel::run_local_ranks(
          4,
          [&](Communicator& world) {
            Rank r = make_rank(world, c, Layout{2, 2, 1}, model::Precision::fp32);
            io::load_hf_weights(*r.model, dir / "hf", [&](int64_t b) { bytes += b; });
            check_weights(*r.model, *want, where);
          },
          test_options());
      // Every rank reads its part: all local weights of the four ranks, in the folder's dtype.
      int64_t local = 0;
      for (int rank = 0; rank < 4; rank++) {
        const auto plan = model::ShardPlan::make(c, 2, rank % 2, 2, rank / 2, false);
        local += model::LlamaModel::num_params(c, plan);
      }
      EXPECT_EQ(bytes.load(), local * (std::string(dtype) == "float32" ? 4 : 2)) << where;
    }
}

// Qwen2's q/k/v biases and a head dim other than hidden / heads: every rank of TP2 x PP2 and of TP4
// (one query head a rank, each kv head on two) reads its rows of each bias and its columns of o_proj.
TEST(CheckpointReshard, HfBiasesAndAnExplicitHeadDimLoadIntoModelParallelRanks) {
  model::LlamaConfig c = config(true);
  c.family = model::Family::qwen2;
  c.qkv_bias = true;
  c.head_size = 24;  // H * D = 96, not 64
  c.rope_scaling = {model::RopeScaling::Type::llama3, 4.0f, 1.0f, 4.0f, 16};
  auto single = single_model(c, model::Precision::fp32);
  // Biases start at zero; give every element its own value so a misplaced row shows.
  const model::ParamSpec* b = single->find_param("bqkv");
  ASSERT_NE(b, nullptr);
  for (int64_t i = 0; i < b->numel; i++) single->param_data()[b->offset + i] = 0.001f * float(i + 1);
  single->params_changed();
  TempDir dir;
  io::save_hf_checkpoint(*single, dir / "hf", "float32");
  auto want = std::make_unique<model::LlamaModel>(c, model::Precision::fp32, kSeed);
  io::load_hf_weights(*want, dir / "hf");
  EXPECT_EQ(want->param_data()[want->find_param("bqkv")->offset + 5], 0.006f);
  for (const Layout& lay : {Layout{2, 2, 1}, Layout{4, 1, 1}}) {
    const std::string where = "HF qwen2 biases, head dim 24 -> " + name_of(lay);
    parallel::run_local_ranks(
        lay.world(),
        [&](Communicator& world) {
          Rank r = make_rank(world, c, lay, model::Precision::fp32);
          io::load_hf_weights(*r.model, dir / "hf");
          check_weights(*r.model, *want, where);
        },
        test_options());
  }
}

TEST(CheckpointReshard, MissingOrDoubledMomentsAreErrors) {
  const auto c = config(false);
  TempDir dir;
  // Pure data parallelism through the DP-only overload: two ZeRO-1 files.
  std::string path;
  parallel::run_local_ranks(
      2,
      [&](Communicator& world) {
        Rank r = make_rank(world, c, Layout{1, 1, 2, true}, model::Precision::fp32);
        init(*r.model);
        fill_moments(*r.model);
        const std::string got = train::save_checkpoint(dir.path(), *r.model, state_at(7), "", "", {}, &world);
        if (world.rank() == 0) path = got;
      },
      test_options());
  ASSERT_EQ(optimizer_files(path),
            (std::vector<std::string>{"optimizer-00001-of-00002.safetensors", "optimizer-00002-of-00002.safetensors"}));
  auto error_of = [&](const Layout& lay) {
    std::string what;
    parallel::run_local_ranks(
        lay.world(),
        [&](Communicator& world) {
          Rank r = make_rank(world, c, lay, model::Precision::fp32);
          try {
            train::load_checkpoint(path, *r.model);
          } catch (const Error& e) {
            if (world.rank() == 0) what = e.what();
          }
        },
        test_options());
    return what;
  };
  EXPECT_EQ(error_of(Layout{2, 2, 1}), "");

  // A file copied in twice: its elements are found twice.
  const std::string second = path + "/optimizer-00002-of-00002.safetensors";
  fs::copy_file(second, path + "/optimizer-00003-of-00002.safetensors");
  std::string e = error_of(Layout{});
  EXPECT_NE(e.find("checkpoint " + path + ": "), std::string::npos) << e;
  EXPECT_NE(e.find("are in more than one optimizer file"), std::string::npos) << e;

  // A file missing: the elements it held are not found, in whatever layout.
  fs::remove(path + "/optimizer-00003-of-00002.safetensors");
  fs::remove(second);
  for (const Layout& lay : {Layout{}, Layout{2, 2, 1}}) {
    e = error_of(lay);
    EXPECT_NE(e.find("checkpoint " + path + ": the optimizer files hold "), std::string::npos) << name_of(lay) << e;
    EXPECT_NE(e.find(" this run needs"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace llamatrain
