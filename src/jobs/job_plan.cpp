// plan_job (jobs/job_plan.h): each check catches its own Error, so one run reports every problem
// it can find, not just the first; the figures need the preflight to pass.
#include "jobs/job_plan.h"

#include <malloc.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>

#include "core/error.h"
#include "core/file.h"
#include "core/memory.h"
#include "data/blend.h"
#include "data/indexed_dataset.h"
#include "model/machine.h"
#include "model/llama.h"
#include "obs/progress.h"
#include "obs/throughput.h"
#include "parallel/data_parallel.h"
#include "io/hf_checkpoint.h"
#include "train/checkpoint.h"
#include "train/data.h"

namespace llamatrain::train {

namespace fs = std::filesystem;
using Status = PlanCheck::Status;

bool JobPlan::ok() const {
  return std::none_of(checks.begin(), checks.end(), [](const PlanCheck& c) { return c.status == Status::fail; });
}

int64_t JobPlan::peak_rank_bytes() const {
  int64_t peak = 0;
  for (const RankMemory& m : stages) peak = std::max(peak, m.peak());
  return peak;
}

namespace {

std::string error_text(const std::exception& e) { return e.what(); }

// The nearest folder of path that exists (path itself, or an ancestor): where it would be created.
fs::path existing_ancestor(const std::string& path) {
  fs::path p = fs::absolute(path);
  while (!p.empty() && !fs::exists(p) && p != p.root_path()) p = p.parent_path();
  return p;
}

int64_t free_disk_bytes(const fs::path& folder) {
  struct statvfs s {};
  if (statvfs(folder.c_str(), &s) != 0) return -1;
  return int64_t(s.f_bavail) * int64_t(s.f_frsize);
}

// The first rank of each pipeline stage (TP innermost, then DP, then PP: train/run_plan.cpp).
std::vector<RunPlan> stage_plans(const TrainConfig& cfg) {
  const int world = int(cfg.world_size());
  const int pp = std::max(1, cfg.model.pipeline_model_parallel_size);
  std::vector<RunPlan> plans;
  for (int s = 0; s < pp; s++) plans.push_back(preflight(cfg, world, s * (world / pp), false));
  return plans;
}

// What a rank's communication holds: the pipeline's received activations and gradients, and with
// plain data parallelism the staging copies of the all-reduce buckets made of several ranges.
int64_t communication_bytes(const TrainConfig& cfg, const RunPlan& p) {
  int64_t bytes = 0;
  if (p.layout.pp_size > 1) {
    const int64_t tokens = p.shard.sequence_parallel ? int64_t(p.B) * p.T / p.layout.tp_size : int64_t(p.B) * p.T;
    const int receivers = (p.layout.pp_rank > 0) + (p.layout.pp_rank < p.layout.pp_size - 1);
    bytes += int64_t(receivers) * p.slots * tokens * p.model.dim * int64_t(sizeof(float));
  }
  if (p.layout.dp_size > 1 && !p.zero1) {
    std::vector<parallel::GradRange> order;
    if (cfg.model.overlap_grad_sync)
      for (const auto& [b, e] : model::LlamaModel::grad_ready_order(p.model, p.shard))
        order.push_back({size_t(b), size_t(e)});
    bytes += int64_t(parallel::GradReducer::staging_elements(size_t(model::LlamaModel::num_trainable(p.model, p.shard)),
                                                             kDpBucketElements, order)) *
             int64_t(sizeof(float));
  }
  return bytes;
}

// OpenMPI's own memory in each training process (every one initializes MPI, a single process too:
// shared-memory segments, buffers), measured with OpenMPI 4.1 on one and two ranks of a node.
constexpr int64_t kMpiRuntimeBytes = 16'000'000;

RankMemory rank_memory(const TrainConfig& cfg, const RunPlan& p, int64_t runtime) {
  RankMemory m;
  m.stage = p.layout.pp_rank;
  m.weights = p.memory.weights;
  m.gradients = p.memory.gradients;
  m.optimizer = p.memory.optimizer;
  m.activations = p.memory.activations;
  m.float_operands = p.memory.float_operands;
  m.communication = communication_bytes(cfg, p);
  // A GPU's runtime (context, workspace, kernel scratch: the backend's figure), or this CPU process's.
  m.runtime = p.memory.runtime + (runtime > 0 ? runtime + kMpiRuntimeBytes : 0);
  // The gathered weights are host memory: the rank's own memory on this CPU; beside an accelerator's
  // (planned with runtime 0), the host's, which the accelerator's figure does not hold.
  const bool model_parallel = p.layout.tp_size * p.layout.pp_size > 1;
  if (runtime > 0 && model_parallel && p.layout.tp_rank == 0 && p.layout.pp_rank == 0)
    m.save_gather = p.model.num_params() * 4;
  if (runtime > 0 && cfg.exp_manager.checkpoint_callback_params.async_save.value_or(false) && saves_before_the_end(cfg))
    m.save_copy = save_copy_bytes(p);
  const bool writes_export = p.layout.dp_rank == 0 && p.layout.tp_rank == 0 && p.layout.pp_rank == 0;
  if (runtime > 0 && !p.export_dir.empty() && writes_export)
    m.export_hf = p.model.num_params() * (4 + (p.precision == model::Precision::fp32 ? 4 : 2));
  return m;
}

// ", embedding and lm head padded to R rows (r per tensor-parallel rank)" when the layout pads the
// vocabulary (model/shard.h: the padding rows are inert, but they are memory), else "".
std::string padded_rows_text(const RunPlan& p) {
  const int tp = p.layout.tp_size;
  const int64_t rows = p.model.padded_vocab_size(tp);
  if (rows == p.model.vocab_size) return "";
  return fmt::format(", embedding and lm head padded to {} rows{}", rows,
                     tp > 1 ? fmt::format(" ({} per tensor-parallel rank)", rows / tp) : "");
}

// The step model's view of fine-tuning samples (StepWork's fractions), from the first (up to)
// 256 samples of the train split as the run fills them: text inputs, the attention pairs the kernel
// computes (within documents where the samples have them, padding included) and those among the text.
void data_shape(const TrainData& data, StepWork* w) {
  const int64_t n = std::min<int64_t>(data.size(data::Split::train), 256), T = data.seq_length();
  if (n == 0) return;
  MicroBatch mb = data.micro_batch(1);
  double text = 0, kernel_pairs = 0, text_pairs = 0;
  for (int64_t i = 0; i < n; i++) {
    data.fill(data::Split::train, i, mb);
    text += double(mb.real_tokens);
    text_pairs += mb.attention_pairs;
    for (int64_t t = 0; t < T; t++)
      kernel_pairs += mb.doc_start.empty() ? double(t) + 0.5 : double(t - mb.doc_start[size_t(t)]) + 0.5;
  }
  const double full = double(n) * double(T) * double(T) / 2;
  w->text_fraction = text / (double(n) * double(T));
  w->attention_fraction = kernel_pairs / full;
  w->text_attention_fraction = text_pairs / full;
}

// The data files exist, their token type can hold the tokenizer's ids, and the ids they hold (all of
// them, or evenly spaced blocks of a large file) are inside the vocabulary.
// Fine-tuning data: train's own TrainData reads, tokenizes, renders (chat templates) and packs the
// JSONL, so every refusal of train's is a FAIL here, with its words; `shape` gets its samples' shape.
PlanCheck check_data(const TrainConfig& cfg, const RunPlan& p, StepWork* shape) {
  const DataConfig& dc = cfg.model.data;
  if (dc.fine_tuning) {
    const TrainData data(cfg, p.tokenizer.get(), p.model.eos_id, {0, 0, 0});
    data_shape(data, shape);
    std::string detail = fmt::format("fine-tuning: {} train samples", data.size(data::Split::train));
    if (data.has(data::Split::valid)) detail += fmt::format(", {} validation", data.size(data::Split::valid));
    if (data.has(data::Split::test)) detail += fmt::format(", {} test", data.size(data::Split::test));
    std::string desc = data.describe();
    while (!desc.empty() && desc.back() == '\n') desc.pop_back();
    return {Status::pass, "data", detail + "\n" + desc};
  }
  const int64_t vocab = p.tokenizer ? p.tokenizer->vocab_size() : p.model.vocab_size;
  const std::string vocab_what = p.tokenizer ? fmt::format("tokenizer {} ({} pieces)", p.tokenizer_path, vocab)
                                             : fmt::format("the model's vocab_size {}", vocab);
  std::vector<std::string> prefixes;
  for (const auto* items : {&dc.data_prefix.train, &dc.data_prefix.validation, &dc.data_prefix.test})
    if (!items->empty())
      for (const auto& prefix : data::parse_data_prefix(*items).prefixes)
        if (std::find(prefixes.begin(), prefixes.end(), prefix) == prefixes.end()) prefixes.push_back(prefix);
  int64_t tokens = 0, max_id = -1;
  std::string dtypes;
  for (const std::string& prefix : prefixes) {
    const data::IndexedDataset ds(prefix);
    if (ds.dtype() == data::TokenDtype::kUint16 && vocab > 65536)
      return {Status::fail, "data",
              fmt::format("{}: uint16 tokens cannot hold the ids of {}\nhint: preprocess the data again with this "
                          "tokenizer",
                          prefix, vocab_what)};
    tokens += ds.num_tokens();
    if (dtypes.find(data::dtype_name(ds.dtype())) == std::string::npos)
      dtypes += (dtypes.empty() ? "" : ", ") + std::string(data::dtype_name(ds.dtype()));
    // Up to 64 blocks of 256 Ki tokens, evenly spaced over the file.
    const int item = data::dtype_itemsize(ds.dtype());
    const int64_t n = int64_t(ds.bin_size()) / item, block = int64_t(1) << 18,
                  blocks = std::min<int64_t>(64, (n + block - 1) / block);
    int64_t file_max = -1;
    for (int64_t b = 0; b < blocks; b++) {
      const int64_t start = blocks == 1 ? 0 : (n - block) * b / (blocks - 1), end = std::min(n, start + block);
      const uint8_t* d = ds.bin_data();
      for (int64_t i = std::max<int64_t>(0, start); i < end; i++) {
        int64_t id = 0;
        if (item == 2) {
          uint16_t v;
          std::memcpy(&v, d + i * 2, 2);
          id = v;
        } else {
          int32_t v;
          std::memcpy(&v, d + i * 4, 4);
          id = v;
        }
        file_max = std::max(file_max, id);
      }
    }
    if (file_max >= vocab)
      return {Status::fail, "data",
              fmt::format("{} holds token id {}, but {} has ids up to {}\nhint: the data was tokenized with another "
                          "tokenizer: preprocess it again with this one",
                          prefix, file_max, vocab_what, vocab - 1)};
    max_id = std::max(max_id, file_max);
  }
  return {Status::pass, "data",
          fmt::format("{} file{}, {} tokens ({}), ids up to {} within {}", prefixes.size(),
                      prefixes.size() == 1 ? "" : "s", obs::format_count(double(tokens)), dtypes, max_id, vocab_what)};
}

// model.init_from's weights can be opened as train opens them (safetensors headers or pytorch_model.bin
// archives, shards of an index) and hold what the model reads: a folder without weights, a truncated
// header or archive, a missing shard, a missing tensor, a wrong shape or dtype, a tensor the architecture lacks is a FAIL before the
// job waits for nodes, in train's words. The tensors' values are read when the run starts.
PlanCheck check_weights(const TrainConfig& cfg, const RunPlan& p) {
  if (!cfg.model.init_from) return {Status::pass, "weights", "random initialization (no model.init_from)"};
  const size_t tensors = io::check_hf_weights(*cfg.model.init_from, p.model, &p.growth);
  return {Status::pass, "weights",
          fmt::format("{}: {} tensors, each of the model's shape", *cfg.model.init_from, tensors)};
}

// A resume would load a checkpoint this model can take.
PlanCheck check_resume(const TrainConfig& cfg, const RunPlan& p) {
  std::string path;
  if (cfg.model.resume_from_checkpoint) {
    path = *cfg.model.resume_from_checkpoint;
    const std::string why = verify_checkpoint(path);
    if (!why.empty())
      return {Status::fail, "resume",
              fmt::format("model.resume_from_checkpoint: {}\nhint: point it at a complete checkpoint folder (step_N)",
                          why)};
  } else if (cfg.exp_manager.resume_if_exists) {
    std::vector<std::string> warnings;
    const auto ck = latest_valid_checkpoint(p.checkpoint_dir, &warnings);
    if (!ck && !warnings.empty()) {
      std::vector<std::string> damaged;
      for (const auto& w : warnings) damaged.push_back(w.substr(w.find(": ") + 2));  // ("skipping checkpoint X: why")
      return {Status::fail, "resume", all_checkpoints_damaged(p.checkpoint_dir, damaged)};
    }
    if (!ck) {
      if (!cfg.exp_manager.resume_ignore_no_checkpoint)
        return {Status::fail, "resume",
                fmt::format("exp_manager.resume_if_exists: no usable checkpoint in {}, and resume_ignore_no_checkpoint "
                            "is false\nhint: set exp_manager.resume_ignore_no_checkpoint=true to start fresh",
                            p.checkpoint_dir)};
      return {warnings.empty() ? Status::pass : Status::warn, "resume",
              fmt::format("no checkpoint in {} yet: the run starts from step 0{}", p.checkpoint_dir,
                          warnings.empty() ? "" : "; " + warnings.front())};
    }
    path = ck->path;
  } else {
    return {Status::pass, "resume", "starts from step 0 (exp_manager.resume_if_exists is false)"};
  }
  check_checkpoint_compatible(path, p.model);
  const TrainerState st = read_trainer_state(path);
  return {Status::pass, "resume", fmt::format("resumes from {} (step {} of {})", path, st.step, cfg.trainer.max_steps)};
}

// The folders the run writes can be created or written.
PlanCheck check_outputs(const RunPlan& p) {
  std::vector<std::pair<std::string, std::string>> outputs = {{"log dir", p.log_dir},
                                                              {"checkpoints", p.checkpoint_dir}};
  if (!p.export_dir.empty()) outputs.emplace_back("export", p.export_dir);
  for (const auto& [what, path] : outputs) {
    const fs::path at = existing_ancestor(path);
    if (!fs::is_directory(at) || access(at.c_str(), W_OK | X_OK) != 0)
      return {Status::fail, "outputs",
              fmt::format("{} {}: {} is not a writable folder\nhint: choose a path this user can write (a shared "
                          "filesystem every node sees)",
                          what, path, at.string())};
  }
  return {Status::pass, "outputs", fmt::format("{} writable", p.log_dir)};
}

// Disk for the checkpoints the run keeps, one more while a save completes, and the export.
PlanCheck check_disk(const TrainConfig& cfg, const RunPlan& p) {
  const auto& cb = cfg.exp_manager.checkpoint_callback_params;
  const int64_t every = cb.every_n_train_steps.value_or(0);
  const int64_t saves = (every > 0 ? cfg.trainer.max_steps / every : 0) + 1;  // + the one at the end
  const int64_t kept = cb.save_top_k > 0 ? std::min(saves, cb.save_top_k) : saves;
  const int64_t one = checkpoint_disk_bytes(p.model, p.precision);
  const int64_t exported = p.export_dir.empty() ? 0 : p.model.num_params() * 4;
  const int64_t need = one * (kept + 1) + exported;
  const fs::path at = existing_ancestor(p.checkpoint_dir);
  const int64_t have = free_disk_bytes(at);
  const std::string detail =
      fmt::format("keeping {} checkpoint{} of {} (one more while a save completes){} needs {}; {} free at {}", kept,
                  kept == 1 ? "" : "s", obs::format_bytes(double(one)), exported ? " and the export" : "",
                  obs::format_bytes(double(need)), have < 0 ? "unknown" : obs::format_bytes(double(have)), at.string());
  if (have >= 0 && have < need)
    return {Status::fail, "disk",
            detail +
                "\nhint: free disk space, keep fewer checkpoints (exp_manager.checkpoint_callback_params.save_top_k) "
                "or write them elsewhere (exp_manager.checkpoint_callback_params.dirpath)"};
  return {Status::pass, "disk", detail};
}

// What a training step sustains of the probes' rates (which are the fastest of a few calls): 0.83, the
// median ratio of predicted to measured step times of bench/plan_vs_measured.sh on a 2-core AVX-512
// machine (docs/performance.md, "Predicted step times").
constexpr double kSustainedFraction = 0.83;

// This CPU's rates for the step model: each matmul shape probed once (a large one at fewer rows: the
// rate hardly changes with them), the attention kernel at the rank's head shape, the memory-bound
// kernels at the AdamW kernel's rate, and a small kernel call's fixed cost, all measured with this
// process's threads; a rank runs with its share of the node's cores, which scales the rates when
// that is fewer threads than the probes had, at the fraction of them a step sustains.
MachineRates this_cpu_rates(const RunPlan& p, int ranks_per_node, double probe_seconds) {
  const model::Precision prec = p.precision;
  MachineRates m;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  m.name = fmt::format("this CPU ({} core{})", cores, cores == 1 ? "" : "s");
  const int threads = model::compute_threads();
  const int rank_threads = std::max(1, int(cores) / std::max(1, ranks_per_node));
  const double share = double(std::min(threads, rank_threads)) / threads * kSustainedFraction;
  auto cache = std::make_shared<std::map<std::tuple<int64_t, int64_t, int64_t>, double>>();
  m.matmul_seconds = [=](int64_t M, int64_t N, int64_t K) {
    const int64_t Mp = std::clamp<int64_t>(int64_t(4e8 / std::max<double>(1.0, double(N) * double(K))), 16, M);
    const int64_t Np = std::min<int64_t>(N, 8192), Kp = std::min<int64_t>(K, 8192);
    auto [it, fresh] = cache->try_emplace({Mp, Np, Kp}, 0.0);
    if (fresh) {
      double rate = model::matmul_gflops(prec, int(Mp), int(Np), int(Kp), probe_seconds);
      if (prec != model::Precision::fp32)  // bf16 compute takes the faster of the two kernels per shape
        rate = std::max(rate, model::matmul_gflops(model::Precision::fp32, int(Mp), int(Np), int(Kp), probe_seconds));
      it->second = rate * 1e9;
    }
    return 2.0 * double(M) * double(N) * double(K) / (it->second * share);
  };
  m.memory_bytes_per_s = model::memory_bytes_per_s(probe_seconds * 5) * share;
  m.kernel_call_s = model::kernel_call_seconds(probe_seconds);
  const int t = p.layout.tp_size;  // attention at one sequence of the rank's heads (B hardly changes the rate)
  m.attention_flops_per_s =
      model::attention_flops_per_s(1, p.T, p.model.n_heads / t, std::max(1, p.model.n_kv_heads / t), p.model.head_dim(),
                                   probe_seconds) *
      share;
  m.intra_node_bytes_per_s = m.memory_bytes_per_s / 4;  // MPI's shared memory: a copy in, a copy out
  m.activation_bytes = 4;                               // the CPU ranks exchange fp32 activations
  m.inter_node_bytes_per_s = 10e9 / 8;                  // assumed 10 Gb/s Ethernet between nodes
  return m;
}

StepWork step_work(const RunPlan& p, const std::vector<RunPlan>& stages, int ranks_per_node) {
  StepWork w;
  w.model = p.model;
  w.dp = p.layout.dp_size;
  w.tp = p.layout.tp_size;
  w.pp = p.layout.pp_size;
  w.ranks_per_node = ranks_per_node;
  w.B = p.B;
  w.T = p.T;
  w.micro_batches = p.micro_batches;
  w.split = p.pipeline_split;
  w.precision = p.precision;
  w.recompute = p.recompute;
  w.recompute_layers = p.recompute_layers;
  w.zero1 = p.zero1;
  w.sequence_parallel = p.shard.sequence_parallel;
  for (const RunPlan& s : stages)
    w.params_per_rank = std::max(w.params_per_rank, model::LlamaModel::num_params(s.model, s.shard));
  return w;
}

// A rank's peak under other settings, or -1 when the layout rejects them.
int64_t peak_with(TrainConfig cfg, int64_t runtime) {
  try {
    int64_t peak = 0;
    for (const RunPlan& s : stage_plans(cfg)) peak = std::max(peak, rank_memory(cfg, s, runtime).peak());
    return peak;
  } catch (const Error&) {
    return -1;
  }
}

// Overrides, one change at a time and then together, that bring a rank within `limit` bytes.
std::vector<std::string> memory_suggestions(const TrainConfig& cfg, int64_t runtime, int64_t limit,
                                            int ranks_per_node) {
  struct Change {
    std::string override_text;
    std::function<void(TrainConfig&)> apply;
  };
  std::vector<Change> changes;
  if (cfg.model.activations_checkpoint_granularity.value_or("") != "full")
    changes.push_back({"model.activations_checkpoint_granularity=full", [](TrainConfig& c) {
                         c.model.activations_checkpoint_granularity = "full";
                         c.model.activations_checkpoint_method = "uniform";
                       }});
  if (!cfg.model.distributed_optimizer && cfg.data_parallel_size() > 1)
    changes.push_back(
        {"model.distributed_optimizer=true", [](TrainConfig& c) { c.model.distributed_optimizer = true; }});
  for (int64_t mb = cfg.model.micro_batch_size / 2; mb >= 1; mb /= 2)
    if (cfg.model.global_batch_size % (mb * cfg.data_parallel_size()) == 0) {
      changes.push_back(
          {fmt::format("model.micro_batch_size={}", mb), [mb](TrainConfig& c) { c.model.micro_batch_size = mb; }});
      break;
    }
  // (tensor parallelism: not on GPUs, where preflight refuses it)
  const bool gpu = cfg.trainer.accelerator == "gpu" || cfg.trainer.accelerator == "cuda";
  const int tp = std::max(1, cfg.model.tensor_model_parallel_size);
  for (int t = tp * 2; !gpu && t <= ranks_per_node && t <= 64; t *= 2)
    if (cfg.world_size() % (int64_t(t) * std::max(1, cfg.model.pipeline_model_parallel_size)) == 0) {
      changes.push_back({fmt::format("model.tensor_model_parallel_size={}", t),
                         [t](TrainConfig& c) { c.model.tensor_model_parallel_size = t; }});
    }
  std::vector<std::string> fits;
  for (const Change& ch : changes) {
    TrainConfig c = cfg;
    ch.apply(c);
    const int64_t peak = peak_with(c, runtime);
    if (peak >= 0 && peak <= limit)
      fits.push_back(fmt::format("{} (a rank then needs {})", ch.override_text, obs::format_bytes(double(peak))));
  }
  if (fits.empty() && changes.size() > 1) {  // all of them at once
    TrainConfig c = cfg;
    std::string all;
    for (const Change& ch : changes)
      if (ch.override_text.find("tensor_model_parallel_size") == std::string::npos ||
          all.find("tensor_model_parallel_size") == std::string::npos) {
        ch.apply(c);
        all += (all.empty() ? "" : " ") + ch.override_text;
      }
    const int64_t peak = peak_with(c, runtime);
    if (peak >= 0 && peak <= limit)
      fits.push_back(fmt::format("{} (a rank then needs {})", all, obs::format_bytes(double(peak))));
  }
  return fits;
}

}  // namespace

namespace {

// The machine the figures are for: a named one's, or (no name, a GPU config) this machine's GPU when
// it has published figures; nullptr for this CPU. Moves trainer.accelerator to the named machine's
// device and says so in *device_check; *failed where a GPU config has no GPU to plan for.
const Accelerator* planned_machine(TrainConfig& cfg, const JobTarget& target, std::optional<PlanCheck>* device_check,
                                   std::optional<PlanCheck>* failed) {
  const Accelerator* acc = nullptr;
  if (!target.hardware.empty() && target.hardware != "cpu") {
    acc = find_accelerator(target.hardware);
    if (!acc) fail("--hardware {}: not a known machine, expected one of cpu, {}", target.hardware, accelerator_names());
  }
  const std::string accelerator = cfg.trainer.accelerator;
  const bool gpu_config = accelerator == "gpu" || accelerator == "cuda";
  if (acc && acc->gpu && !gpu_config) {
    if (accelerator != "auto")
      *device_check = PlanCheck{Status::warn, "device",
                                fmt::format("trainer.accelerator={} trains on the cpu; these figures are for {} "
                                            "(trainer.accelerator=gpu)\nhint: add trainer.accelerator=gpu to the job",
                                            accelerator, acc->name)};
    cfg.trainer.accelerator = "gpu";
  } else if (acc && !acc->gpu && gpu_config) {
    *device_check = PlanCheck{Status::warn, "device",
                              fmt::format("trainer.accelerator={} asks for a GPU, but {} has none; these figures are "
                                          "for its cores\nhint: trainer.accelerator=cpu (on Trainium: tpu)",
                                          accelerator, acc->name)};
    cfg.trainer.accelerator = "cpu";
  } else if (!acc && gpu_config) {
    std::string why;
    if (model::device_usable(model::Device::cuda, &why))
      for (const Accelerator& a : accelerators())
        if (a.gpu && model::device_description(model::Device::cuda).find(" " + a.name) != std::string::npos) acc = &a;
    if (!acc)
      *failed =
          PlanCheck{Status::fail, "device",
                    fmt::format("trainer.accelerator={}: {}, expected a GPU to plan for\nhint: name the GPU the "
                                "job runs on: --hardware {}",
                                accelerator,
                                why.empty() ? "this machine's GPU " + model::device_description(model::Device::cuda) +
                                                  " has no published figures here"
                                            : "no usable GPU on this machine (" + why + ")",
                                accelerator_names())};
  }
  return acc;
}

// What the job is: its layout, its model, a grown vocabulary and what is frozen.
void describe_job(const JobPlan& jp, std::vector<PlanCheck>* checks) {
  const RunPlan& p = jp.plan;
  checks->push_back(
      {Status::pass, "layout",
       fmt::format("{} node{} x {} rank{}: data {} x tensor {} x pipeline {}{}", jp.nodes, jp.nodes == 1 ? "" : "s",
                   jp.ranks_per_node, jp.ranks_per_node == 1 ? "" : "s", p.layout.dp_size, p.layout.tp_size,
                   p.layout.pp_size, p.layout.pp_size > 1 ? " (" + p.pipeline_stages() + ")" : "")});
  checks->push_back({Status::pass, "model",
                     fmt::format("{} parameters, vocab_size {}{}{}", obs::format_count(double(p.model.num_params())),
                                 p.model.vocab_size,
                                 p.tokenizer ? fmt::format(" (tokenizer {} pieces)", p.tokenizer->vocab_size()) : "",
                                 padded_rows_text(p))});
  if (p.growth.active()) checks->push_back({Status::pass, "resize", p.growth.describe()});
  if (const std::string frozen = freeze_summary(p.model); !frozen.empty())
    checks->push_back(
        {Status::pass, "freeze",
         frozen + (p.model.frozen_parts.empty() ? "" : " (parts keep their gradient buffer, not their moments)")});
}

// async_save unset: decided as train decides it at its start, on this machine (an accelerator's job
// decides on its host, whose memory is not planned here). Sets it in cfg where decided here.
void plan_async_save(TrainConfig& cfg, const std::vector<RunPlan>& stages, bool accelerator, int64_t runtime,
                     JobPlan* jp) {
  auto& async = cfg.exp_manager.checkpoint_callback_params.async_save;
  if (async || !saves_before_the_end(cfg)) return;
  if (accelerator) {
    jp->checks.push_back({Status::pass, "async save",
                          "decided when the job starts, from its host's free memory "
                          "(exp_manager.checkpoint_callback_params.async_save unset)"});
    return;
  }
  bool fits = true;
  int64_t copy = 0;
  for (const RunPlan& s : stages) {
    copy = std::max(copy, save_copy_bytes(s));
    fits = fits && async_save_fits(save_copy_bytes(s), rank_memory(cfg, s, runtime).peak(), jp->memory_per_rank);
  }
  async = fits;
  jp->checks.push_back(
      {Status::pass, "async save",
       fmt::format("{}: the host copy of a save written behind the steps ({} on the rank that "
                   "holds most) {} beside the steps with a fifth of the memory left "
                   "(exp_manager.checkpoint_callback_params.async_save unset; true or false decides)",
                   fits ? "on" : "off", obs::format_bytes(double(copy)), fits ? "fits" : "does not fit")});
}

// The busiest rank's activations under each recompute choice (a choice the layout refuses is left out).
std::vector<std::pair<std::string, int64_t>> activations_by_recompute(const TrainConfig& cfg) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const char* mode : {"none", "selective", "full"}) {
    TrainConfig c = cfg;
    c.model.activations_checkpoint_granularity =
        std::string(mode) == "none" ? std::nullopt : std::optional<std::string>(mode);
    if (std::string(mode) == "full") c.model.activations_checkpoint_method = "uniform";
    try {
      int64_t most = 0;
      for (const RunPlan& s : stage_plans(c)) most = std::max(most, s.memory.activations);
      out.emplace_back(mode, most);
    } catch (const Error&) {
    }
  }
  return out;
}

// The busiest rank's peak against what a rank has (avail: the machine's, shared by its ranks).
PlanCheck check_memory(const TrainConfig& cfg, const Accelerator* acc, int64_t avail, int64_t runtime, JobPlan* jp) {
  const int64_t peak = jp->peak_rank_bytes();
  const std::string where = acc ? acc->name : "this machine";
  if (jp->memory_per_rank < 0)
    return {Status::warn, "memory",
            fmt::format("a rank needs {}; {}'s free memory is unknown", obs::format_bytes(double(peak)), where)};
  if (peak <= jp->memory_per_rank)
    return {Status::pass, "memory",
            fmt::format("a rank needs {} of {} ({:.0f}%)", obs::format_bytes(double(peak)),
                        obs::format_bytes(double(jp->memory_per_rank)),
                        100.0 * double(peak) / double(jp->memory_per_rank))};
  jp->suggestions = memory_suggestions(cfg, runtime, jp->memory_per_rank, jp->ranks_per_node);
  return {Status::fail, "memory",
          fmt::format(
              "a rank needs {}, but {} has {} per rank{}\nhint: {}", obs::format_bytes(double(peak)), where,
              obs::format_bytes(double(jp->memory_per_rank)),
              acc ? "" : fmt::format(" ({} free over {} ranks)", obs::format_bytes(double(avail)), jp->ranks_per_node),
              jp->suggestions.empty() ? "use more nodes, a larger tensor or pipeline parallel size, or full recompute"
                                      : "these overrides fit: " + jp->suggestions.front())};
}

}  // namespace

JobPlan plan_job(TrainConfig cfg, const JobTarget& target) {
  JobPlan jp;
  // The device the job runs on: a named GPU's (the CUDA backend, planned for without one here), the
  // GPU of this machine when the config asks for one, else what trainer.accelerator says.
  std::optional<PlanCheck> device_check, no_device;
  const Accelerator* acc = planned_machine(cfg, target, &device_check, &no_device);
  if (no_device) {
    jp.checks.push_back(*no_device);
    return jp;
  }
  jp.nodes = cfg.trainer.num_nodes;
  jp.ranks_per_node = cfg.trainer.devices;
  jp.max_steps = cfg.trainer.max_steps;

  std::vector<RunPlan> stages;
  try {
    stages = stage_plans(cfg);
  } catch (const Error& e) {
    jp.checks.push_back({Status::fail, "layout", error_text(e)});
    return jp;
  }
  jp.planned = true;
  jp.plan = stages.front();
  const RunPlan& p = jp.plan;
  if (device_check) jp.checks.push_back(*device_check);
  const MachineRates rates =
      acc ? machine_rates(*acc, p.precision) : this_cpu_rates(p, jp.ranks_per_node, target.probe_seconds);
  jp.hardware = acc ? acc->description : rates.name;
  StepWork work = step_work(p, stages, jp.ranks_per_node);
  // This process's resident memory now, its kernels probed: the libraries and the kernels' own state,
  // as a rank has them (an accelerator's runtime is not counted).
  if (!acc) ::malloc_trim(0);  // what the probes freed is not the runtime's
  const int64_t runtime = acc ? 0 : std::max<int64_t>(0, current_rss_bytes());
  describe_job(jp, &jp.checks);
  auto guarded = [&](const char* what, auto&& check) {
    try {
      jp.checks.push_back(check());
    } catch (const Error& e) {
      jp.checks.push_back({Status::fail, what, error_text(e)});
    } catch (const std::filesystem::filesystem_error& e) {
      jp.checks.push_back({Status::fail, what, filesystem_error_message(e)});
    }
  };
  guarded("weights", [&] { return check_weights(cfg, p); });
  guarded("data", [&] { return check_data(cfg, p, &work); });
  jp.prediction = predict_step(work, rates);
  guarded("resume", [&] { return check_resume(cfg, p); });
  guarded("outputs", [&] { return check_outputs(p); });
  guarded("disk", [&] { return check_disk(cfg, p); });

  // Memory per rank: the accelerator's, or this machine's shared by the node's ranks.
  const int64_t avail = acc ? acc->memory_bytes : available_memory_bytes();
  jp.memory_per_rank = avail < 0 ? -1 : acc ? avail : avail / std::max(1, jp.ranks_per_node);
  plan_async_save(cfg, stages, acc != nullptr, runtime, &jp);
  for (const RunPlan& s : stages) jp.stages.push_back(rank_memory(cfg, s, runtime));
  jp.activations_by_recompute = activations_by_recompute(cfg);
  jp.checks.push_back(check_memory(cfg, acc, avail, runtime, &jp));
  return jp;
}

}  // namespace llamatrain::train
