// Checkpoint save / verify / load / prune; see checkpoint.h. A save is one AtomicDir (core/file.h):
// every file is written into step_N.tmp-XXXXXX next to the final folder, fsynced, and the folder is
// renamed into place (then the parent fsynced): the rename is the commit point. A load reshards:
// each moment tensor is assembled from the pieces of the files' tensors that overlap it
// (model::copy_between_shards), so the layout that wrote a checkpoint does not matter.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/file.h"
#include "io/hf_checkpoint.h"
#include "io/hf_config.h"
#include "io/hf_export.h"
#include "io/safetensors.h"
#include "parallel/communicator.h"
#include "train/gather_weights.h"

namespace llamatrain::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kFormat = "llamatrain-checkpoint";
constexpr int kVersion = 1;
constexpr int64_t kCrcBlock = kWrittenCrcBlock;  // the blocks AtomicFile checksums as it writes

// CRC32C of each kCrcBlock-byte block of a file, blocks computed in parallel. Read with pread in
// pieces of kCrcPiece bytes, not mapped: a mapping's pages count in the process's resident memory
// (and in a SLURM job's memory limit) until it is unmapped, so checking a 100 GB checkpoint would
// need 100 GB of room; this needs kCrcPiece per thread.
constexpr size_t kCrcPiece = 4 << 20;
std::vector<uint32_t> block_crcs(const fs::path& p, int64_t* size_out, const io::BytesDone& progress = {}) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", p.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("cannot stat {}: {}", p.string(), std::strerror(e));
  }
  const int64_t size = st.st_size;
  *size_out = size;
  std::vector<uint32_t> crcs(size_t((size + kCrcBlock - 1) / kCrcBlock));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  const int64_t n = int64_t(crcs.size());
  std::string error;  // the first failure (an exception may not leave the parallel region)
#pragma omp parallel
  {
    std::vector<uint8_t> piece(kCrcPiece);
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < n; b++) {
      const int64_t begin = b * kCrcBlock, len = std::min(kCrcBlock, size - begin);
      uint32_t crc = 0;
      for (int64_t at = 0; at < len;) {
        const ssize_t got =
            ::pread(fd, piece.data(), size_t(std::min<int64_t>(int64_t(kCrcPiece), len - at)), begin + at);
        if (got <= 0) {
          const std::string why = got < 0 ? std::strerror(errno) : "the file ended early (truncated while read?)";
#pragma omp critical(checkpoint_crc_error)
          if (error.empty()) error = fmt::format("cannot read {} at byte {}: {}", p.string(), begin + at, why);
          break;
        }
        crc = crc32c(piece.data(), size_t(got), crc);
        at += got;
      }
      crcs[size_t(b)] = crc;
      if (progress) {
#pragma omp critical(checkpoint_progress)
        progress(len);
      }
    }
  }
  ::close(fd);
  if (!error.empty()) fail("{}", error);
  return crcs;
}

// A file's size and block checksums: those its writer computed as it wrote (large files), else read.
json file_record(const fs::path& p) {
  std::error_code ec;
  int64_t size = int64_t(fs::file_size(p, ec));
  std::optional<std::vector<uint32_t>> written;
  if (!ec) written = take_written_crcs(p.string(), uint64_t(size));
  const auto crcs = written ? std::move(*written) : block_crcs(p, &size);
  return json{{"bytes", size}, {"crc32c_block_bytes", kCrcBlock}, {"crc32c", crcs}};
}

int64_t step_of(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() <= 5 || name.size() > 5 + 18) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); i++) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

bool is_optimizer_file(const std::string& name) {
  return name.rfind("optimizer", 0) == 0 && name.ends_with(".safetensors");
}

// What an interrupted save leaves: AtomicDir temporaries "step_N.tmp-XXXXXX" (and "step_N.old-XXXXXX").
bool is_leftover(const std::string& name) {
  return name.rfind("step_", 0) == 0 &&
         (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos);
}

json read_json(const fs::path& p) {
  const std::string text = read_small_file(p.string(), 64 << 20, "checkpoint state");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}\nhint: the checkpoint is damaged; an older one will be used", p.string(), e.what());
  }
}

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

int64_t checkpoint_tensor_bytes(const model::LlamaModel& model, bool full_weights) {
  const int64_t weights = full_weights ? model.config().num_params() : model.num_params();
  const int64_t moments = model.shard_end() - model.shard_begin();  // of each of the two
  return (weights + 2 * moments) * (model.precision() == model::Precision::bf16_sr ? 2 : 4);
}

std::string save_checkpoint(const std::string& checkpoints_dir, model::LlamaModel& model, const TrainerState& state,
                            const std::string& tokenizer_model, const std::string& config_yaml,
                            const io::BytesDone& progress, parallel::Communicator* dp) {
  SaveGroups groups;
  groups.world = dp;
  if (dp) groups.layout = parallel::ParallelLayout::make(dp->size(), 1, 1, dp->rank());
  return save_checkpoint(checkpoints_dir, model, state, tokenizer_model, config_yaml, progress, groups);
}
namespace {

// Bytes [offset, offset + bytes) of a moment tensor's element range as a checkpoint stores it: the
// frozen parts it keeps no moments for (StateTensor::holes) as zeros, the rest read from host memory
// or (device) from the backend's.
void read_moments(model::Kernels* device, const model::StateTensor& t, void* out, size_t offset, size_t bytes) {
  const int64_t size = t.dtype == model::StateDType::f32 ? 4 : 2;
  const int64_t lo = int64_t(offset) / size, hi = int64_t(offset + bytes) / size;
  std::memset(out, 0, bytes);
  t.for_each_kept([&](int64_t element, int64_t at, int64_t n) {
    const int64_t b = std::max(element, lo), e = std::min(element + n, hi);
    if (b >= e) return;
    const auto* src = static_cast<const std::byte*>(t.data) + (at + b - element) * size;
    std::byte* dst = static_cast<std::byte*>(out) + (b - lo) * size;
    if (!device) {
      std::memcpy(dst, src, size_t((e - b) * size));
    } else {
      device->read_elements(src, (e - b) * size,
                            [&](const std::byte* h, int64_t f, int64_t m) { std::memcpy(dst + f, h, size_t(m)); });
    }
  });
}

// model.freeze's parts of tensors, for the record: [{"tensor": "wte", "elements": [begin, end]}, ...]
json frozen_parts_json(const model::LlamaConfig& c) {
  json out = json::array();
  for (const auto& p : c.frozen_parts) out.push_back({{"tensor", p.tensor}, {"elements", {p.begin, p.end}}});
  return out;
}

}  // namespace

std::string save_checkpoint(const std::string& checkpoints_dir, model::LlamaModel& model, const TrainerState& state,
                            const std::string& tokenizer_model, const std::string& config_yaml,
                            const io::BytesDone& progress, const SaveGroups& groups) {
  CheckpointSave save(checkpoints_dir, model, state, tokenizer_model, config_yaml, groups, false);
  save.write(progress);
  return save.commit();
}

CheckpointSave::CheckpointSave(const std::string& checkpoints_dir, model::LlamaModel& model, const TrainerState& state,
                               std::string tokenizer_model, std::string config_yaml, const SaveGroups& groups,
                               bool copy, CheckpointSave* reuse)
    : model_(model),
      state_(state),
      tokenizer_model_(std::move(tokenizer_model)),
      config_yaml_(std::move(config_yaml)),
      groups_(groups) {
  parallel::Communicator* world = groups.world;
  const parallel::ParallelLayout& layout = groups.layout;
  rank_ = world ? world->rank() : 0, ranks_ = world ? world->size() : 1;
  const model::ShardPlan& plan = model.plan();
  CHECK(layout.world_size == ranks_ && layout.rank == rank_ && layout.tp_size == plan.tp_size &&
            layout.pp_size == plan.pp_size && layout.tp_rank == plan.tp_rank && layout.pp_rank == plan.pp_rank,
        "save_checkpoint: the layout (world {}, rank {}, TP {} rank {}, PP {} rank {}) is not the world's and the "
        "model's (world {}, rank {}, TP {} rank {}, PP {} rank {})",
        layout.world_size, layout.rank, layout.tp_size, layout.tp_rank, layout.pp_size, layout.pp_rank, ranks_, rank_,
        plan.tp_size, plan.tp_rank, plan.pp_size, plan.pp_rank);
  CHECK(!model.is_sharded() || (groups.mp && groups.mp->size() == plan.tp_size * plan.pp_size),
        "save_checkpoint of a model-parallel rank without its model-parallel communicator");
  zero1_ = model.shard_begin() != 0 || model.shard_end() != model.num_trainable();
  final_path_ = (fs::path(checkpoints_dir) / ("step_" + std::to_string(state.step))).string();
  // Rank 0 owns the folder: a same-step folder (from a run resumed at an earlier checkpoint) is
  // replaced whole, atomically. The other ranks write their moments into its temporary name.
  if (rank_ == 0) {
    create_directories(checkpoints_dir);
    out_.emplace(final_path_, std::vector<std::string>{"*"});
    tmp_ = out_->temp_path();
  }
  if (ranks_ > 1) tmp_ = world->broadcast_string(tmp_, 0);

  // Weights: the whole model as an HF folder, written by rank 0 (from replica dp 0's gathered
  // weights under model parallelism, a copy by construction), the same bytes under any layout.
  if (model.is_sharded()) {
    if (layout.dp_rank == 0) weights_ = gather_full_weights(model, *groups.mp);
  } else if (rank_ == 0 && copy) {
    const model::LlamaConfig& c = model.config();
    if (reuse && reuse->weights_ && reuse->weights_->num_params() == model.num_params()) {
      weights_ = std::move(reuse->weights_);
    } else {
      weights_ = std::make_unique<model::LlamaModel>(c, model::Precision::fp32, 0, model::ShardPlan::single(c), nullptr,
                                                     model::Device::cpu);
    }
    model.copy_params_to_host(weights_->param_data());
    copy_bytes_ += weights_->num_params() * int64_t(sizeof(float));
  }
  writes_weights_ = weights_ != nullptr || (!model.is_sharded() && rank_ == 0);

  // AdamW moments, by every rank holding some no other rank holds: its ZeRO-1 shard, or (whole
  // moments) dp rank 0's; tensors replicated over model-parallel ranks only from the copy that counts
  // (in_norm).
  if (zero1_ || layout.dp_rank == 0) {
    writes_moments_ = true;
    model::Kernels& k = model.backend();
    for (const model::StateTensor& t : model.state_tensors()) {
      if (t.name.rfind("weight.", 0) == 0) continue;  // the weights are the HF part
      const model::ParamSpec* spec = model.find_param(t.param);
      CHECK(spec != nullptr, "no parameter tensor {}", t.param);
      if (spec->owned.numel() == 0) continue;  // another rank holds and writes the same moments
      moments_.push_back({t, spec->in_norm, spec->owned, {}});
      if (!copy) continue;
      Moment& m = moments_.back();
      if (reuse && reuse->moments_.size() >= moments_.size())  // the same model's tensors, in order
        m.copy = std::move(reuse->moments_[moments_.size() - 1].copy);
      m.copy.resize(size_t(t.stored()) * (t.dtype == model::StateDType::f32 ? 4 : 2));
      k.read_elements(
          static_cast<const std::byte*>(t.data), int64_t(m.copy.size()),
          [&](const std::byte* h, int64_t first, int64_t n) { std::memcpy(m.copy.data() + first, h, size_t(n)); });
      m.state.data = m.copy.data();
      copy_bytes_ += int64_t(m.copy.size());
    }
    moments_on_host_ = copy || k.host_memory();
  }
}

CheckpointSave::~CheckpointSave() = default;

void CheckpointSave::write(const io::BytesDone& progress) {
  try {
    if (writes_weights_) {
      const char* weight_dtype = model_.precision() == model::Precision::bf16_sr ? "bfloat16" : "float32";
      io::write_hf_weights(weights_ ? *weights_ : model_, tmp_, weight_dtype, 5'000'000'000, progress);
      // Rank 0 writes every file but the moments, which other ranks may be writing now (under names of
      // their own until they are complete).
      for (const auto& e : fs::directory_iterator(tmp_))
        if (const std::string name = e.path().filename().string(); name.rfind("optimizer", 0) != 0)
          records_[name] = file_record(e.path());
    }
    if (writes_moments_) {
      const std::string name = write_moments(progress);
      records_[name] = file_record(fs::path(tmp_) / name);
    }
  } catch (...) {
    error_ = std::current_exception();
  }
  done_.store(true);
}

// Each tensor is stored as the element range of the local tensor it covers, with the local tensor's
// place in the full one, so any layout can read them back.
std::string CheckpointSave::write_moments(const io::BytesDone& progress) {
  std::vector<io::TensorToWrite> tensors;
  std::map<std::string, std::string> meta{{"format", kFormat}, {"kind", "adamw"}};
  std::vector<std::vector<float>> packed_f32;  // parts written from a packed copy
  std::vector<std::vector<bf16>> packed_bf16;
  model::Kernels* device = moments_on_host_ ? nullptr : &model_.backend();
  for (const Moment& m : moments_) {
    const model::StateTensor& t = m.state;
    const bool b16 = t.dtype == model::StateDType::bf16;
    const void* data = t.data;
    model::TensorShard shard = t.shard;
    int64_t first = t.first, count = t.numel;
    if (m.in_norm && (device || !t.holes.empty())) {
      // A device's memory, or moments without their frozen parts: read in pieces as the writer asks.
      tensors.push_back(
          {t.name,
           b16 ? io::DType::BF16 : io::DType::F32,
           {count},
           nullptr,
           [device, &t](void* out, size_t offset, size_t bytes) { read_moments(device, t, out, offset, bytes); }});
    } else if (!m.in_norm) {
      // A kv-head replica's wqkv: only the elements it owns (its q rows), in the owned order, where
      // those of [first, first + count) of the local tensor are one contiguous range.
      CHECK(!device, "a partly owned tensor ({}) on a device", t.name);
      std::vector<std::byte> raw(size_t(t.numel) * (b16 ? 2 : 4));
      read_moments(device, t, raw.data(), 0, raw.size());
      std::vector<float> src(size_t(t.numel));
      if (b16)
        float_from_bf16(src.data(), reinterpret_cast<const bf16*>(raw.data()), t.numel);
      else
        std::memcpy(src.data(), raw.data(), raw.size());
      int64_t begin = -1;
      t.shard.for_each_run([&](int64_t local, int64_t full, int64_t n) {
        for (int64_t i = std::max(local, t.first); begin < 0 && i < std::min(local + n, t.first + t.numel); i++)
          if (const int64_t o = m.owned.local_offset(full + (i - local)); o >= 0) begin = o;
      });
      std::vector<float> out(size_t(m.owned.numel()), 0.0f);
      count =
          model::copy_between_shards(out.data(), m.owned, 0, m.owned.numel(), src.data(), t.shard, t.first, t.numel);
      if (count == 0) continue;
      first = begin;
      shard = m.owned;
      out.erase(out.begin(), out.begin() + first);
      out.resize(size_t(count));
      if (b16) {
        packed_bf16.emplace_back(out.size());
        bf16_from_float(packed_bf16.back().data(), out.data(), count);
        data = packed_bf16.back().data();
      } else {
        packed_f32.push_back(std::move(out));
        data = packed_f32.back().data();
      }
      tensors.push_back({t.name, b16 ? io::DType::BF16 : io::DType::F32, {count}, data});
    } else {
      tensors.push_back({t.name, b16 ? io::DType::BF16 : io::DType::F32, {count}, data});
    }
    meta["shape." + t.name] = json(t.shape).dump();
    meta["range." + t.name] = json({first, count}).dump();
    meta["shard." + t.name] = shard.to_json();
  }
  const bool one_file = !model_.is_sharded() && !zero1_;  // dp rank 0 is then the only writer
  const std::string name =
      one_file ? kOptimizerFile : fmt::format("optimizer-{:05d}-of-{:05d}.safetensors", rank_ + 1, ranks_);
  io::write_safetensors(tmp_ + "/" + name, tensors, meta, progress);
  return name;
}

std::string CheckpointSave::commit() {
  CHECK(done_.load(), "CheckpointSave::commit before write");
  parallel::Communicator* world = groups_.world;
  // Every rank's file records and failure; a failure anywhere fails the save on every rank.
  std::string failure;
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  const std::string mine = json{{"files", records_}, {"error", failure}}.dump();
  const std::vector<std::string> all = ranks_ > 1 ? world->gather_strings(mine) : std::vector<std::string>{mine};
  if (error_) std::rethrow_exception(error_);  // this rank's own error, as it was thrown
  json files = json::object();
  for (size_t r = 0; r < all.size(); r++) {
    const json j = json::parse(all[r]);
    if (!j.at("error").get<std::string>().empty())
      fail("checkpoint {}: rank {} failed to write its part: {}", final_path_, r, j.at("error").get<std::string>());
    for (const auto& [name, rec] : j.at("files").items()) files[name] = rec;
  }
  if (rank_ == 0) {
    std::vector<std::string> more;
    if (!tokenizer_model_.empty())  // tokenizer.model, or tokenizer.json and its tokenizer_config.json
      for (const auto& f : io::tokenizer_source_files(tokenizer_model_)) {
        write_file_atomic(out_->file(f.name), f.bytes);
        more.push_back(f.name);
      }
    write_file_atomic(out_->file("train_config.yaml"), config_yaml_);
    more.push_back("train_config.yaml");
    for (const auto& name : more) files[name] = file_record(fs::path(tmp_) / name);
    const model::LlamaConfig& c = model_.config();
    const parallel::ParallelLayout& layout = groups_.layout;
    json st{{"format", kFormat},
            {"version", kVersion},
            {"llamatrain_version", LLAMATRAIN_VERSION},
            {"step", state_.step},
            {"optimizer_steps", state_.optimizer_steps},
            {"consumed_samples", state_.consumed_samples},
            {"seed", state_.seed},
            {"precision", state_.precision},
            {"lr", state_.lr},
            {"loss", std::isfinite(state_.loss) ? json(state_.loss) : json(nullptr)},
            {"skipped_steps", state_.skipped_steps},
            {"rollbacks", state_.rollbacks},
            {"train_seconds", state_.train_seconds},
            {"num_params", c.num_params()},
            {"frozen", c.frozen},
            {"frozen_parts", frozen_parts_json(c)},
            {"layout",
             {{"tensor_parallel", layout.tp_size},
              {"pipeline_parallel", layout.pp_size},
              {"data_parallel", layout.dp_size},
              {"zero1", zero1_},
              {"global_batch_size", state_.layout.global_batch_size},
              {"micro_batch_size", state_.layout.micro_batch_size}}},
            {"files", files}};
    write_file_atomic(out_->file(kStateFile), st.dump(2) + "\n");
    out_->commit();
  }
  if (ranks_ > 1) world->barrier();  // no rank goes on before the checkpoint exists
  return final_path_;
}

std::vector<CheckpointInfo> list_checkpoints(const std::string& checkpoints_dir) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step < 0 || !fs::is_directory(e.path(), ec)) continue;
    if (!fs::exists(e.path() / kStateFile, ec)) continue;
    out.push_back({e.path().string(), step});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

int64_t checkpoint_file_bytes(const std::string& path) {
  try {
    const json st = read_json(fs::path(path) / kStateFile);
    int64_t total = 0;
    for (const auto& [name, rec] : st.at("files").items()) total += rec.value("bytes", int64_t(0));
    return total;
  } catch (const std::exception&) {
    return 0;
  }
}

std::string verify_checkpoint(const std::string& path, const io::BytesDone& progress) {
  const fs::path dir(path);
  json st;
  try {
    st = read_json(dir / kStateFile);
  } catch (const Error& e) {
    return e.what();
  }
  if (st.value("format", "") != kFormat || !st.contains("files") || !st["files"].is_object())
    return fmt::format("{}: not a llamatrain checkpoint state (format or files missing)", (dir / kStateFile).string());
  if (st.value("version", 0) > kVersion)
    return fmt::format("{}: written by a newer llamatrain (checkpoint version {}, this one reads {})",
                       (dir / kStateFile).string(), st.value("version", 0), kVersion);
  for (const auto& [name, rec] : st["files"].items()) {
    const fs::path p = dir / name;
    std::error_code ec;
    if (!fs::exists(p, ec)) return fmt::format("{}: missing", p.string());
    try {
      int64_t size = 0;
      const auto crcs = block_crcs(p, &size, progress);
      if (size != rec.value("bytes", int64_t(-1)))
        return fmt::format("{}: {} bytes, expected {} (truncated or overwritten)", p.string(), size,
                           rec.value("bytes", int64_t(-1)));
      if (rec.value("crc32c_block_bytes", int64_t(0)) != kCrcBlock ||
          crcs != rec.value("crc32c", std::vector<uint32_t>{}))
        return fmt::format("{}: checksum mismatch (the file's content changed after it was saved)", p.string());
    } catch (const Error& e) {
      return e.what();
    }
  }
  if (!st["files"].contains("config.json")) return fmt::format("{}: incomplete, config.json is not listed", path);
  bool moments = false;
  for (const auto& [name, rec] : st["files"].items()) moments |= is_optimizer_file(name);
  if (!moments) return fmt::format("{}: incomplete, no optimizer*.safetensors is listed", path);
  return "";
}

std::optional<CheckpointInfo> latest_valid_checkpoint(const std::string& checkpoints_dir,
                                                      std::vector<std::string>* warnings) {
  auto all = list_checkpoints(checkpoints_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::string why = verify_checkpoint(it->path);
    if (why.empty()) return *it;
    if (warnings) warnings->push_back(fmt::format("skipping checkpoint {}: {}", it->path, why));
  }
  return std::nullopt;
}

std::string all_checkpoints_damaged(const std::string& checkpoints_dir, const std::vector<std::string>& damaged) {
  return fmt::format(
      "exp_manager.resume_if_exists: every checkpoint in {} is damaged ({}), and starting again from step 0 would "
      "lose the run:\n  {}\nhint: repair or restore one (model.resume_from_checkpoint=PATH resumes from a copy kept "
      "elsewhere); to start over from step 0 instead, move them out of {} or set exp_manager.resume_if_exists=false",
      checkpoints_dir, damaged.size(), fmt::join(damaged, "\n  "), checkpoints_dir);
}

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

int64_t checkpoint_disk_bytes(const model::LlamaConfig& c, model::Precision p) {
  return c.num_params() * 3 * (p == model::Precision::bf16_sr ? 2 : 4);  // weights and the two moments
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

std::vector<std::string> prune_checkpoints(const std::string& checkpoints_dir, int keep) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec))
    if (is_leftover(e.path().filename().string())) {
      fs::remove_all(e.path(), ec);
      removed.push_back(e.path().string());
    }
  if (keep <= 0) return removed;
  auto all = list_checkpoints(checkpoints_dir);
  for (size_t i = 0; i + size_t(keep) < all.size(); i++) {
    fs::remove_all(all[i].path, ec);
    if (ec) fail("cannot remove old checkpoint {}: {}", all[i].path, ec.message());
    removed.push_back(all[i].path);
  }
  return removed;
}

}  // namespace llamatrain::train
