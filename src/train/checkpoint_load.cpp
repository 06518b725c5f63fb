// Checkpoint load (checkpoint.h). It reshards: each moment tensor is assembled from the pieces of the
// files' tensors that overlap it (model::copy_between_shards), so the layout that wrote a checkpoint
// does not matter.
#include "train/checkpoint.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/hf_checkpoint.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "train/checkpoint_format.h"

namespace llamatrain::train {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_format;

namespace {

// Where one optimizer-file tensor sits: elements [first, first + count) of a local tensor placed in
// the full tensor by `shard`.
struct Piece {
  model::TensorShard shard;
  int64_t first = 0, count = 0;
};

// The piece a file tensor holds, from its range.<name> and shard.<name> metadata (a file without them
// holds the whole tensor, flat), checked against the full tensor the model's `like` belongs to.
Piece piece_of(const io::SafetensorsFile& f, const io::TensorView& view, const std::string& name,
               const model::TensorShard& like) {
  Piece p;
  p.count = view.numel();
  const auto& meta = f.metadata();
  if (auto it = meta.find("range." + name); it != meta.end()) {
    try {
      const auto r = json::parse(it->second).get<std::vector<int64_t>>();
      p.first = r.at(0), p.count = r.at(1);
    } catch (const std::exception&) {
      fail("checkpoint {}: range.{} = '{}' is not [first, count]\nhint: the checkpoint is damaged", f.path(), name,
           it->second);
    }
  }
  if (p.count != view.numel())
    fail("checkpoint {}: tensor {} has {} elements, its range says {}\nhint: the checkpoint is damaged", f.path(), name,
         view.numel(), p.count);
  if (auto it = meta.find("shard." + name); it != meta.end()) {
    try {
      p.shard = model::TensorShard::from_json(it->second);
    } catch (const Error& e) {
      fail("checkpoint {}: shard.{}: {}\nhint: the checkpoint is damaged", f.path(), name, e.what());
    }
  } else {
    p.shard = model::TensorShard::whole_tensor(like.full_layers, like.full_rows, like.full_cols);
  }
  const model::TensorShard& s = p.shard;
  if (s.full_layers != like.full_layers || s.full_rows != like.full_rows || s.full_cols != like.full_cols)
    fail("checkpoint {}: {} is part of a ({}, {}, {}) tensor, expected ({}, {}, {}) (layers, rows, columns)\n"
         "hint: the checkpoint is damaged or from another model",
         f.path(), name, s.full_layers, s.full_rows, s.full_cols, like.full_layers, like.full_rows, like.full_cols);
  if (p.first < 0 || p.first + p.count > s.numel())
    fail("checkpoint {}: range.{} = [{}, {}] lies outside its local tensor of {} elements\nhint: the checkpoint is "
         "damaged",
         f.path(), name, p.first, p.count, s.numel());
  return p;
}

// A box around the full-tensor elements that elements [first, first + count) of a shard's local
// tensor can be: full layers [l0, l1), full row intervals, full columns [c0, c1).
struct Box {
  int64_t l0 = 0, l1 = 0, c0 = 0, c1 = 0;
  std::vector<std::pair<int64_t, int64_t>> rows;  // [begin, end)
};

Box box_of(const model::TensorShard& s, int64_t first, int64_t count) {
  Box b;
  const int64_t K = s.cols, per_layer = s.local_rows() * K;
  if (count <= 0 || per_layer <= 0) return b;
  const int64_t last = first + count - 1;
  b.l0 = s.layer_begin + first / per_layer;
  b.l1 = s.layer_begin + last / per_layer + 1;
  b.c0 = s.col_begin, b.c1 = s.col_begin + K;
  // Local rows [r0, r1) (all of them when the range spans layers).
  int64_t r0 = 0, r1 = s.local_rows();
  if (b.l1 - b.l0 == 1) r0 = (first % per_layer) / K, r1 = (last % per_layer) / K + 1;
  int64_t local = 0;
  for (const auto& [begin, n] : s.rows) {
    const int64_t a = std::max(r0, local), e = std::min(r1, local + n);
    if (a < e) b.rows.emplace_back(begin + (a - local), begin + (e - local));
    local += n;
  }
  return b;
}

// False when a piece cannot hold any of elements [first, first + count) of the target shard's local
// tensor (so its file tensor need not be read).
bool may_overlap(const Piece& p, const model::TensorShard& target, int64_t first, int64_t count) {
  const Box a = box_of(p.shard, p.first, p.count), b = box_of(target, first, count);
  if (a.rows.empty() || b.rows.empty()) return false;
  if (std::max(a.l0, b.l0) >= std::min(a.l1, b.l1) || std::max(a.c0, b.c0) >= std::min(a.c1, b.c1)) return false;
  for (const auto& [x0, x1] : a.rows)
    for (const auto& [y0, y1] : b.rows)
      if (std::max(x0, y0) < std::min(x1, y1)) return true;
  return false;
}

}  // namespace

TrainerState read_trainer_state(const std::string& path) {
  const fs::path p = fs::path(path) / kStateFile;
  const json st = read_json(p);
  TrainerState s;
  try {
    s.step = st.at("step").get<int64_t>();
    s.optimizer_steps = st.at("optimizer_steps").get<int64_t>();
    s.consumed_samples = st.at("consumed_samples").get<int64_t>();
    s.seed = st.at("seed").get<uint64_t>();
    s.precision = st.at("precision").get<std::string>();
    s.lr = st.value("lr", 0.0);
    s.loss = st.contains("loss") && st["loss"].is_number() ? st["loss"].get<double>() : NAN;
    s.skipped_steps = st.value("skipped_steps", int64_t(0));
    s.rollbacks = st.value("rollbacks", int64_t(0));
    s.train_seconds = st.value("train_seconds", 0.0);
    s.frozen = st.value("frozen", std::vector<std::string>{});
    if (st.contains("layout") && st["layout"].is_object()) {
      const json& l = st["layout"];
      s.layout.tensor_parallel = l.value("tensor_parallel", 0);
      s.layout.pipeline_parallel = l.value("pipeline_parallel", 0);
      s.layout.data_parallel = l.value("data_parallel", 0);
      s.layout.global_batch_size = l.value("global_batch_size", int64_t(0));
      s.layout.micro_batch_size = l.value("micro_batch_size", int64_t(0));
    }
  } catch (const json::exception& e) {
    fail("{}: {}\nhint: the checkpoint is damaged or not a llamatrain checkpoint", p.string(), e.what());
  }
  return s;
}

void check_checkpoint_compatible(const std::string& path, const model::LlamaConfig& c) {
  const model::LlamaConfig saved = io::read_hf_config(path);
  auto differ = [&](const char* what, auto a, auto b) {
    if (a != b)
      fail("checkpoint {}: {} is {}, but the configured model has {}\nhint: resume with the model settings the "
           "run started with, or start a new run (another exp_manager.name or explicit_log_dir)",
           path, what, a, b);
  };
  differ("hidden_size", saved.dim, c.dim);
  differ("intermediate_size", saved.ffn_dim, c.ffn_dim);
  differ("num_hidden_layers", saved.n_layers, c.n_layers);
  differ("num_attention_heads", saved.n_heads, c.n_heads);
  differ("num_key_value_heads", saved.n_kv_heads, c.n_kv_heads);
  if (saved.vocab_size > c.vocab_size && saved.vocab_size % c.vocab_multiple == 0)
    fail("checkpoint {}: vocab_size is {}, but the configured model has {}\nhint: a vocab_size that counts padding "
         "rows is an earlier llamatrain's (checkpoints now hold the real vocabulary); start a new run from its "
         "weights with model.init_from={}",
         path, saved.vocab_size, c.vocab_size, path);
  differ("vocab_size", saved.vocab_size, c.vocab_size);
  differ("tie_word_embeddings", saved.tie_embeddings, c.tie_embeddings);
}

TrainerState load_checkpoint(const std::string& path, model::LlamaModel& model, const io::BytesDone& progress) {
  check_checkpoint_compatible(path, model.config());
  TrainerState state = read_trainer_state(path);
  io::load_hf_weights(model, path, progress);
  // Moments: every optimizer*.safetensors file holds element ranges of some rank's local tensors,
  // each placed in the full tensor by its shard; copy the parts that overlap what this model keeps
  // (its local tensor, or the ZeRO-1 range of it), and require that every element is found once.
  std::vector<std::unique_ptr<io::SafetensorsFile>> files;          // metadata
  std::vector<std::unique_ptr<io::SafetensorsCheckpoint>> readers;  // dtype-converting reads
  for (const auto& e : fs::directory_iterator(path))
    if (is_optimizer_file(e.path().filename().string())) {
      files.push_back(std::make_unique<io::SafetensorsFile>(e.path().string()));
      readers.push_back(std::make_unique<io::SafetensorsCheckpoint>(e.path().string()));
    }
  if (files.empty()) fail("checkpoint {}: no optimizer*.safetensors\nhint: the checkpoint is incomplete", path);
  std::vector<float> buf, staged, cover;
  for (const auto& t : model.state_tensors()) {
    if (t.name.rfind("weight.", 0) == 0) continue;
    if (std::find(state.frozen.begin(), state.frozen.end(), t.param) != state.frozen.end()) {
      // Frozen when saved, trainable now: its moments start at zero.
      model.backend().zero(t.data, size_t(t.stored()) * (t.dtype == model::StateDType::f32 ? 4 : 2));
      continue;
    }
    // The file tensors that may hold part of this one.
    std::vector<std::pair<size_t, Piece>> sources;
    for (size_t fi = 0; fi < files.size(); fi++)
      if (const io::TensorView* view = files[fi]->find(t.name)) {
        Piece src = piece_of(*files[fi], *view, t.name, t.shard);
        if (may_overlap(src, t.shard, t.first, t.numel)) sources.emplace_back(fi, std::move(src));
      }
    // bf16 moments (and any in a device's memory, or without their frozen parts) are assembled in
    // fp32 on the host (exact from bf16 files), then rounded and copied over once at the end. With
    // several sources, `cover` marks the elements found, to tell a gap from an element found twice.
    const bool f32 = t.dtype == model::StateDType::f32;
    const bool host = model.backend().host_memory();
    const bool direct = f32 && host && t.holes.empty();
    float* dst = static_cast<float*>(t.data);
    if (!direct) {
      staged.assign(size_t(t.numel), 0.0f);
      dst = staged.data();
    }
    const bool count_twice = sources.size() > 1;
    if (count_twice) cover.assign(size_t(t.numel), 0.0f);
    int64_t copied = 0;
    for (const auto& [fi, src] : sources) {
      buf.resize(size_t(src.count));
      readers[fi]->read_f32(t.name, {src.count}, buf.data());
      const int64_t n =
          model::copy_between_shards(dst, t.shard, t.first, t.numel, buf.data(), src.shard, src.first, src.count);
      copied += n;
      if (progress && n > 0) progress(n * (f32 ? 4 : 2));
      if (count_twice && n > 0) {
        std::fill(buf.begin(), buf.end(), 1.0f);
        model::copy_between_shards(cover.data(), t.shard, t.first, t.numel, buf.data(), src.shard, src.first,
                                   src.count);
      }
    }
    const int64_t found =
        count_twice ? int64_t(std::count(cover.begin(), cover.end(), 1.0f)) : std::min(copied, t.numel);
    if (found != t.numel)
      fail("checkpoint {}: the optimizer files hold {} of the {} elements of {} this run needs\nhint: the "
           "checkpoint is incomplete",
           path, found, t.numel, t.name);
    if (copied != t.numel)
      fail("checkpoint {}: {} elements of {} are in more than one optimizer file\nhint: the checkpoint is damaged "
           "(an optimizer file copied in, or left from another save)",
           path, copied - t.numel, t.name);
    if (direct) continue;
    if (!t.holes.empty()) {  // the frozen parts have no moments: keep the others, packed
      std::vector<float> kept(size_t(t.stored()));
      t.for_each_kept([&](int64_t element, int64_t at, int64_t n) {
        std::memcpy(kept.data() + at, staged.data() + element, sizeof(float) * size_t(n));
      });
      staged.swap(kept);
    }
    if (f32) {
      model.backend().write_elements(static_cast<float*>(t.data), t.stored(), [&](float* h, int64_t first, int64_t n) {
        std::memcpy(h, staged.data() + first, sizeof(float) * size_t(n));
      });
    } else {
      model.backend().write_elements(static_cast<bf16*>(t.data), t.stored(), [&](bf16* h, int64_t first, int64_t n) {
        bf16_from_float(h, staged.data() + first, n);
      });
    }
  }
  return state;
}

}  // namespace llamatrain::train
