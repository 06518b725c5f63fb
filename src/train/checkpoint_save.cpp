// Checkpoint save (checkpoint.h): the weights as Hugging Face safetensors, the moments of each rank's
// shard in optimizer files, trainer_state.json with every file's size and block checksums
// (checkpoint_format.h), all in one AtomicDir that a rename commits; written in place or, the copy
// taken, behind the steps.
#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "io/hf_checkpoint.h"
#include "io/hf_export.h"
#include "io/safetensors.h"
#include "parallel/communicator.h"
#include "train/checkpoint_format.h"
#include "train/gather_weights.h"

namespace llamatrain::train {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_format;

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

}  // namespace llamatrain::train
