// Checkpoint save / verify / load / prune; see checkpoint.h. A save is one AtomicDir (core/file.h):
// every file is written into step_N.tmp-XXXXXX next to the final folder, fsynced, and the folder is
// renamed into place (then the parent fsynced): the rename is the commit point.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
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
#include "io/safetensors.h"

namespace llamatrain::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kFormat = "llamatrain-checkpoint";
constexpr int kVersion = 1;
constexpr int64_t kCrcBlock = 64 << 20;

// CRC32C of each kCrcBlock-byte block of a file, blocks computed in parallel.
std::vector<uint32_t> block_crcs(const fs::path& p, int64_t* size_out, const io::BytesDone& progress = {}) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", p.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("cannot stat {}: {}", p.string(), std::strerror(errno));
  }
  const int64_t size = st.st_size;
  *size_out = size;
  std::vector<uint32_t> crcs(size_t((size + kCrcBlock - 1) / kCrcBlock));
  if (size == 0) {
    ::close(fd);
    return crcs;
  }
  void* map = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) fail("cannot map {}: {}", p.string(), std::strerror(errno));
  ::madvise(map, size_t(size), MADV_SEQUENTIAL);
  const auto* bytes = static_cast<const uint8_t*>(map);
  const int64_t n = int64_t(crcs.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < n; b++) {
    const int64_t begin = b * kCrcBlock, len = std::min(kCrcBlock, size - begin);
    crcs[size_t(b)] = crc32c(bytes + begin, size_t(len));
    if (progress) {
#pragma omp critical(checkpoint_progress)
      progress(len);
    }
  }
  ::munmap(map, size_t(size));
  return crcs;
}

json file_record(const fs::path& p) {
  int64_t size = 0;
  const auto crcs = block_crcs(p, &size);
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

// What an interrupted save leaves: AtomicDir temporaries "step_N.tmp-XXXXXX" (and "step_N.old-XXXXXX").
bool is_leftover(const std::string& name) {
  return name.rfind("step_", 0) == 0 && (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos);
}

json read_json(const fs::path& p) {
  const std::string text = read_small_file(p.string(), 64 << 20, "checkpoint state");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}\nhint: the checkpoint is damaged; an older one will be used", p.string(),
         e.what());
  }
}

}  // namespace

int64_t checkpoint_tensor_bytes(const model::LlamaModel& model) {
  const int64_t n = model.num_params();
  return model.precision() == model::Precision::bf16_sr ? 3 * 2 * n : 3 * 4 * n;  // weights + two moments
}

std::string save_checkpoint(const std::string& checkpoints_dir, model::LlamaModel& model, const TrainerState& state,
                            const std::string& tokenizer_model, const std::string& config_yaml,
                            const io::BytesDone& progress) {
  create_directories(checkpoints_dir);
  const std::string final_path = (fs::path(checkpoints_dir) / ("step_" + std::to_string(state.step))).string();
  // A same-step folder (from a run resumed at an earlier checkpoint) is replaced whole, atomically.
  AtomicDir out(final_path, {"*"});
  const fs::path tmp(out.temp_path());
  const bool sr = model.precision() == model::Precision::bf16_sr;
  io::write_hf_weights(model, tmp.string(), sr ? "bfloat16" : "float32", 5'000'000'000, progress);

  std::vector<io::TensorToWrite> moments;
  std::map<std::string, std::string> meta{{"format", kFormat}, {"kind", "adamw"}};
  for (const auto& t : model.state_tensors()) {
    if (t.name.rfind("weight.", 0) == 0) continue;  // the weights are the HF part
    moments.push_back({t.name, t.dtype == model::StateDType::bf16 ? io::DType::BF16 : io::DType::F32, {t.numel},
                       t.data});
    meta["shape." + t.name] = json(t.shape).dump();
  }
  io::write_safetensors(out.file(kOptimizerFile), moments, meta, progress);
  if (!tokenizer_model.empty()) {
    const MappedFile tok(tokenizer_model, "tokenizer");
    write_file_atomic(out.file("tokenizer.model"),
                      std::string_view(reinterpret_cast<const char*>(tok.data()), tok.size()));
  }
  write_file_atomic(out.file("train_config.yaml"), config_yaml);

  json files = json::object();
  for (const auto& e : fs::directory_iterator(tmp)) files[e.path().filename().string()] = file_record(e.path());
  json st{{"format", kFormat},
          {"version", kVersion},
          {"llamatrain_version", LLAMATRAIN_VERSION},
          {"step", state.step},
          {"optimizer_steps", state.optimizer_steps},
          {"consumed_samples", state.consumed_samples},
          {"seed", state.seed},
          {"precision", state.precision},
          {"lr", state.lr},
          {"loss", std::isfinite(state.loss) ? json(state.loss) : json(nullptr)},
          {"skipped_steps", state.skipped_steps},
          {"rollbacks", state.rollbacks},
          {"train_seconds", state.train_seconds},
          {"num_params", model.num_params()},
          {"files", files}};
  write_file_atomic(out.file(kStateFile), st.dump(2) + "\n");
  out.commit();
  return final_path;
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
  for (const char* required : {kStateFile, kOptimizerFile, "config.json"})
    if (std::string(required) != kStateFile && !st["files"].contains(required))
      return fmt::format("{}: incomplete, {} is not listed", path, required);
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
  } catch (const json::exception& e) {
    fail("{}: {}\nhint: the checkpoint is damaged or not a llamatrain checkpoint", p.string(), e.what());
  }
  return s;
}

TrainerState load_checkpoint(const std::string& path, model::LlamaModel& model, const io::BytesDone& progress) {
  const model::LlamaConfig saved = io::read_hf_config(path);
  const model::LlamaConfig& c = model.config();
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
  differ("vocab_size", saved.vocab_size, c.vocab_size);
  differ("tie_word_embeddings", saved.tie_embeddings, c.tie_embeddings);

  TrainerState state = read_trainer_state(path);
  io::load_hf_weights(model, path, progress);
  const io::SafetensorsCheckpoint opt((fs::path(path) / kOptimizerFile).string());
  std::vector<float> buf;
  for (const auto& t : model.state_tensors()) {
    if (t.name.rfind("weight.", 0) == 0) continue;
    buf.resize(size_t(t.numel));
    opt.read_f32(t.name, {t.numel}, buf.data());
    if (progress) progress(int64_t(opt.get(t.name).nbytes));
    if (t.dtype == model::StateDType::f32)
      std::memcpy(t.data, buf.data(), sizeof(float) * size_t(t.numel));
    else
      bf16_from_float(static_cast<bf16*>(t.data), buf.data(), t.numel);
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
