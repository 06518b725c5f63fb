// preflight (train/run_plan.h): each check in the order a job would hit it, with the config key in
// its message; the model's and the layout's own rules (model/shard.h, model/config.h) are called with
// the config's names for their fields.
#include "train/run_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "core/file.h"
#include "core/memory.h"
#include "io/hf_checkpoint.h"
#include "io/hf_config.h"
#include "io/hf_export.h"
#include "model/machine.h"
#include "obs/progress.h"
#include "obs/throughput.h"
#include "parallel/pipeline.h"

namespace llamatrain::train {

namespace fs = std::filesystem;

namespace {

// The job's processes must be the ones the config describes.
void check_world(const TrainConfig& c, int world_size) {
  if (c.world_size() != world_size)
    fail("trainer.devices x trainer.num_nodes = {} x {} = {}, but the job has {} process{}, expected them to agree\n"
         "hint: set trainer.devices to the processes per node and trainer.num_nodes to the nodes (mpirun -np N: "
         "trainer.devices=N trainer.num_nodes=1)",
         c.trainer.devices, c.trainer.num_nodes, c.world_size(), world_size, world_size == 1 ? "" : "es");
}

// The run's folder can be made, and the data files exist (before the model loads).
void check_files(const TrainConfig& cfg, const std::string& log_dir) {
  const char* log_key = cfg.exp_manager.explicit_log_dir ? "exp_manager.explicit_log_dir" : "exp_manager.exp_dir";
  if (path_exists(log_dir) && !is_directory(log_dir))
    fail("{}: {} is a file, expected a folder for the run's logs and checkpoints\nhint: choose another path", log_key,
         log_dir);
  const DataConfig& dc = cfg.model.data;
  if (!dc.fine_tuning) {
    for (const auto* items : {&dc.data_prefix.train, &dc.data_prefix.validation, &dc.data_prefix.test})
      if (!items->empty())
        for (const auto& prefix : data::parse_data_prefix(*items).prefixes)
          for (const char* ext : {".idx", ".bin"})
            if (!is_regular_file(prefix + ext))
              fail_as(
                  "data",
                  "model.data.data_prefix: {}{} does not exist\nhint: data_prefix entries are the output prefix of "
                  "`llamatrain preprocess` plus _<key>_document, without .bin/.idx (e.g. data/corpus_text_document)",
                  prefix, ext);
  } else {
    for (const auto* ds : {&dc.train_ds, &dc.validation_ds, &dc.test_ds})
      for (const auto& f : ds->file_names)
        if (!is_regular_file(f))
          fail_as("data", "model.data.*_ds.file_names: {} does not exist\nhint: check the path", f);
  }
}

// A tokenizer other than model.init_from's own against its vocab_size. Larger: the model grows to the
// tokenizer's pieces (model.new_token_init). Smaller: an error, unless the checkpoint's extra rows can
// only be padding or added tokens: its folder's tokenizer.model has no more pieces than this one, or,
// without one, vocab_size is at most this tokenizer's count padded to a multiple of 128 (Megatron's
// largest usual make_vocab_size_divisible_by).
void plan_vocabulary(const TrainConfig& cfg, const data::Tokenizer& tok, RunPlan& p) {
  // The folder's own tokenizer: tokenizer.model, else tokenizer.json (Qwen2.5 pads vocab_size past it).
  const std::string base_path = data::resolve_tokenizer_path(*cfg.model.init_from, data::TokenizerLibrary::kAuto);
  const std::string base = is_regular_file(base_path) ? base_path : "";
  const int64_t V = p.model.vocab_size, n = tok.vocab_size();
  if (n < V) {
    const int64_t base_pieces = base.empty() ? -1 : data::Tokenizer(base).vocab_size();
    if (base.empty() ? (n + 127) / 128 * 128 < V : n < base_pieces)
      fail("model.tokenizer.model: {} has {} pieces, but model.init_from {} has {}, expected at least {}\n"
           "hint: use the checkpoint's own tokenizer{}, or one extended from it (every base piece at its id, new "
           "pieces after them: `llamatrain tokenizer merge`), which grows the model",
           p.tokenizer_path, n, *cfg.model.init_from,
           base.empty() ? fmt::format("vocab_size {}", V)
                        : fmt::format("a {} of {} pieces", fs::path(base).filename().string(), base_pieces),
           base.empty() ? V : base_pieces, base.empty() ? "" : " (" + base + ")");
    return;
  }
  if (n == V) return;
  const io::NewTokenInit init = io::parse_new_token_init(cfg.model.new_token_init);
  if (init == io::NewTokenInit::subword_mean && base.empty())
    fail("model.new_token_init: subword_mean splits each new piece with the checkpoint's tokenizer, but "
         "model.init_from {} has no tokenizer.model\nhint: copy the base model's tokenizer.model into {}, or set "
         "model.new_token_init=mean",
         *cfg.model.init_from, *cfg.model.init_from);
  p.growth = io::plan_vocab_growth(V, tok, init, base, float(cfg.model.init_method_std), uint64_t(cfg.model.seed));
  p.model.vocab_size = int(n);
}

// The tokenizer (the configured one, or model.init_from's tokenizer.model when that folder has one;
// pretraining on indexed data needs none, and checkpoints and exports then carry none) and the model.
void plan_model(const TrainConfig& cfg, RunPlan& p) {
  p.tokenizer_path = cfg.model.tokenizer_model_path();
  const bool tok_from_init =
      cfg.model.init_from && (p.tokenizer_path == (fs::path(*cfg.model.init_from) / "tokenizer.model").string() ||
                              p.tokenizer_path == (fs::path(*cfg.model.init_from) / "tokenizer.json").string());
  if (tok_from_init && !is_regular_file(p.tokenizer_path)) p.tokenizer_path.clear();
  if (!p.tokenizer_path.empty()) p.tokenizer = std::make_shared<const data::Tokenizer>(p.tokenizer_path);
  const data::Tokenizer* tok = p.tokenizer.get();
  if (!cfg.model.init_from) {
    if (!tok)
      fail("model vocabulary: no tokenizer and no model.init_from, expected one of them\nhint: set "
           "model.tokenizer.model=/path/tokenizer.model (the tokenizer the data was preprocessed with)");
    p.model = cfg.model.llama_config(tok->vocab_size());
    return;
  }
  p.model = io::read_hf_config(*cfg.model.init_from);
  p.model.vocab_multiple = std::max(1, cfg.model.make_vocab_size_divisible_by);  // padding rows: model/shard.h
  if (tok && !tok_from_init) plan_vocabulary(cfg, *tok, p);
  if (tok && tok_from_init && tok->vocab_size() > p.model.vocab_size)
    fail("model.init_from: {} has {} pieces, but its config.json has vocab_size {}, expected at most that\nhint: "
         "the folder's tokenizer.model is not its model's; set model.tokenizer.model to the model's tokenizer",
         p.tokenizer_path, tok->vocab_size(), p.model.vocab_size);
}

// The micro-batch: its tokens index the kernels with int, and the sequence fits the model.
void plan_shapes(const TrainConfig& cfg, RunPlan& p) {
  const ModelConfig& m = cfg.model;
  if (m.micro_batch_size * m.data.seq_length >= (int64_t(1) << 31))
    fail("model.micro_batch_size {} x model.data.seq_length {} = {} tokens per micro-batch, expected fewer than "
         "2^31\nhint: lower model.micro_batch_size (gradient accumulation keeps the global batch)",
         m.micro_batch_size, m.data.seq_length, m.micro_batch_size * m.data.seq_length);
  p.model.check_seq_len(m.data.seq_length, FieldNames("", {{"seq_len", "model.data.seq_length"},
                                                           {"max_seq_len", "the model's max_position_embeddings"}}));
  p.B = int(m.micro_batch_size);
  p.T = int(m.data.seq_length);
  p.global_batch = m.global_batch_size;
  p.micro_batches = cfg.num_micro_batches();
  p.precision = cfg.trainer.precision;
  // NeMo's activations_checkpoint_*: granularity null | selective | full; with full, method block
  // recomputes the first num_layers layers only, uniform recomputes every layer (each from its own
  // input; a larger num_layers would only keep more layers' activations at once here).
  p.recompute = model::parse_recompute(m.activations_checkpoint_granularity.value_or("none"));
  const bool block = m.activations_checkpoint_method.value_or("uniform") == "block";
  p.recompute_layers =
      p.recompute == model::Recompute::full && block ? int(m.activations_checkpoint_num_layers.value_or(1)) : -1;
}

// The device the model runs on, and the layouts it runs: on a GPU, one GPU per rank and data
// parallelism only (tensor and pipeline parallelism run on the cpu).
void plan_device(const TrainConfig& cfg, RunPlan& p, bool here) {
  // Lightning's "tpu" is the seeds' XLA (Neuron) path: there is no such device here, so the CPU.
  const std::string& acc = cfg.trainer.accelerator;
  if (acc == "tpu")
    p.device = model::Device::cpu;
  else if (!here && (acc == "gpu" || acc == "cuda"))  // planned for, not used: it need not be here
    p.device = model::Device::cuda;
  else
    p.device = model::choose_device(acc, "trainer.accelerator");
  if (std::string why; acc == "auto" && !model::device_usable(model::Device::cuda, &why))
    p.device_note = "trainer.accelerator=auto: no usable GPU (" + why + "), so training on the cpu";
  if (p.device != model::Device::cuda) return;
  const parallel::ParallelLayout& lay = p.layout;
  if (lay.tp_size > 1 || lay.pp_size > 1)
    fail("trainer.accelerator={}: model.tensor_model_parallel_size {} and model.pipeline_model_parallel_size {}, "
         "expected 1 and 1: on GPUs llamatrain trains with data parallelism (one GPU per rank, optionally "
         "model.distributed_optimizer=true); tensor and pipeline parallelism run on the cpu\nhint: set "
         "model.tensor_model_parallel_size=1 model.pipeline_model_parallel_size=1 (a model that does not fit one "
         "GPU: trainer.accelerator=cpu)",
         acc, lay.tp_size, lay.pp_size);
}

// model.freeze: the model tensors and parts its patterns freeze (an Error for one that matches
// nothing), with model.freeze_base_vocab the rows init_from had before the vocabulary grew, and every
// pipeline stage keeps something to train.
void plan_freeze(const TrainConfig& cfg, RunPlan& p) {
  std::vector<std::string> patterns = cfg.model.freeze;
  if (cfg.model.freeze_base_vocab) {
    if (!p.growth.active())
      fail("model.freeze_base_vocab: true, but the vocabulary does not grow in this run ({}), so there are no new "
           "rows to train alone\nhint: start from the folder before the extension (model.init_from with "
           "model.tokenizer.model of more pieces), or freeze rows by number: "
           "model.freeze: [\"model.embed_tokens.weight[:N]\", \"lm_head.weight[:N]\"] with N the base vocabulary's "
           "size",
           cfg.model.init_from
               ? "model.init_from " + *cfg.model.init_from + " already has a row for every piece of the tokenizer"
               : "no model.init_from");
    patterns.push_back(fmt::format("model.embed_tokens.weight[:{}]", p.growth.base_rows));
    if (!p.model.tie_embeddings) patterns.push_back(fmt::format("lm_head.weight[:{}]", p.growth.base_rows));
  }
  const io::FreezeSet frozen = io::resolve_freeze(
      p.model, patterns,
      cfg.model.freeze_base_vocab && cfg.model.freeze.empty() ? "model.freeze_base_vocab" : "model.freeze");
  p.model.frozen = frozen.tensors;
  p.model.frozen_parts = frozen.parts;
  const parallel::ParallelLayout& lay = p.layout;
  if (p.model.frozen.empty() || lay.pp_size == 1) return;
  const std::vector<int> split = cfg.model.pipeline_layers();
  for (int s = 0; s < lay.pp_size; s++) {
    const auto plan = model::ShardPlan::make(p.model, 1, 0, lay.pp_size, s, false, split);
    if (model::LlamaModel::num_trainable(p.model, plan) == 0)
      fail("model.freeze: pipeline stage {} (of {}) holds only frozen tensors, expected something to train on "
           "every stage\nhint: freeze fewer tensors, or use fewer pipeline stages "
           "(model.pipeline_model_parallel_size)",
           s, lay.pp_size);
  }
}

// This rank's part of the model, and what it will hold.
void plan_memory(const TrainConfig& cfg, RunPlan& p, bool here) {
  const parallel::ParallelLayout& lay = p.layout;
  p.zero1 = cfg.model.distributed_optimizer && lay.dp_size > 1;
  p.pipeline_split = cfg.model.pipeline_layers();
  // The vocabulary is known now: the tensor-parallel rule again, with it, in the config's words.
  model::check_tensor_parallel(p.model, lay.tp_size, FieldNames("", {{"tp_size", "model.tensor_model_parallel_size"}}));
  p.shard = model::ShardPlan::make(p.model, lay.tp_size, lay.tp_rank, lay.pp_size, lay.pp_rank,
                                   cfg.model.sequence_parallel && lay.tp_size > 1,
                                   lay.pp_size > 1 ? p.pipeline_split : std::vector<int>{});
  p.shard.check_micro_batch(
      p.B, p.T,
      FieldNames("", {{"seq_len", "model.data.seq_length"}, {"tp_size", "model.tensor_model_parallel_size"}}));
  p.slots = lay.pp_size > 1 ? parallel::pipeline_slots(lay.pp_size, lay.pp_rank, int(p.micro_batches)) : 1;
  const model::TrainingShape shape{
      p.precision, p.B, p.T, p.recompute, p.recompute_layers, p.slots, p.zero1 ? lay.dp_size : 1, p.device};
  p.memory = model::MemoryPlan::for_check(p.model, p.shard, shape, here ? model::available_bytes(p.device) : -1);
  if (!here) return;
  model::check_device_memory_fits(
      p.device, p.memory.total(),
      fmt::format("training {} parameters in {} at micro batch {} x seq {}",
                  obs::format_count(double(p.model.num_params())), model::precision_name(p.precision), p.B, p.T),
      fmt::format("weights, gradients and optimizer state {:.1f} GB, activations {:.1f} GB{}", p.memory.state / 1e9,
                  p.memory.activations / 1e9,
                  p.memory.runtime > 0 ? fmt::format(", runtime {:.1f} GB", p.memory.runtime / 1e9) : ""),
      p.recompute == model::Recompute::full
          ? "lower model.micro_batch_size (gradient accumulation keeps the global batch), or use a "
            "machine with more memory"
          : "set model.activations_checkpoint_granularity=full, lower model.micro_batch_size, or use "
            "a machine with more memory");
}

}  // namespace

std::string resolve_log_dir(const TrainConfig& c) {
  const ExpManagerConfig& e = c.exp_manager;
  if (e.explicit_log_dir && !e.explicit_log_dir->empty()) return *e.explicit_log_dir;
  const fs::path base = fs::path(e.exp_dir && !e.exp_dir->empty() ? *e.exp_dir : "nemo_experiments") / e.name;
  std::string version;
  if (e.version && !e.version->empty())
    version = *e.version;
  else if (const char* v = std::getenv("NEMO_EXPM_VERSION"); v && *v)
    version = v;
  else if (const char* j = std::getenv("SLURM_JOB_ID"); j && *j)
    version = j;
  else if (!e.resume_if_exists) {
    char buf[32];
    const std::time_t t = std::time(nullptr);
    std::strftime(buf, sizeof buf, "%Y-%m-%d_%H-%M-%S", std::localtime(&t));
    version = buf;
  }
  return (version.empty() ? base : base / version).string();
}

RunPlan preflight(const TrainConfig& cfg, int world_size, int rank, bool here) {
  check_world(cfg, world_size);
  RunPlan p;
  // TP innermost, then DP, then PP (Megatron's order): a replica's TP x PP ranks read the same
  // samples; the data-parallel rank chooses which.
  p.layout = parallel::ParallelLayout::make(world_size, std::max(1, cfg.model.tensor_model_parallel_size),
                                            std::max(1, cfg.model.pipeline_model_parallel_size), rank);
  p.log_dir = resolve_log_dir(cfg);
  const auto& dirpath = cfg.exp_manager.checkpoint_callback_params.dirpath;
  p.checkpoint_dir = dirpath ? *dirpath : (fs::path(p.log_dir) / "checkpoints").string();
  check_files(cfg, p.log_dir);
  plan_model(cfg, p);
  plan_shapes(cfg, p);
  plan_device(cfg, p, here);
  plan_freeze(cfg, p);
  plan_memory(cfg, p, here);
  if (cfg.convert_to_hf) {
    p.export_dir = cfg.model.output_dir ? *cfg.model.output_dir : (fs::path(p.log_dir) / "hf").string();
    io::check_export_target(p.export_dir);
  }
  return p;
}

std::string freeze_summary(const model::LlamaConfig& mc) {
  if (mc.frozen.empty() && mc.frozen_parts.empty()) return "";
  int64_t whole = 0, partly = 0, frozen = 0;
  for (const auto& t : io::hf_tensor_slices(mc)) {
    const int64_t n = t.rows * t.cols;
    int64_t in = mc.is_frozen(t.param) ? n : 0;
    for (const auto& p : mc.frozen_parts)
      if (p.tensor == t.param)
        in += std::max<int64_t>(0, std::min(p.end, t.element + n) - std::max(p.begin, t.element));
    whole += in == n;
    partly += in > 0 && in < n;
    frozen += in;
  }
  const int64_t all = mc.num_params();
  return fmt::format("{} tensors{}, {} parameters ({:.1f}% of the model); training {} parameters", whole,
                     partly > 0 ? fmt::format(" and part of {} other{}", partly, partly > 1 ? "s" : "") : "",
                     obs::format_count(double(frozen)), 100.0 * double(frozen) / double(all),
                     obs::format_count(double(all - frozen)));
}

double RunPlan::busiest_stage_share(const std::vector<int>& split) const {
  std::vector<double> work;
  for (int s = 0; s < layout.pp_size; s++)
    work.push_back(obs::stage_flops(model, 1, T, split[size_t(s)], s == layout.pp_size - 1));
  return *std::max_element(work.begin(), work.end()) / std::accumulate(work.begin(), work.end(), 0.0);
}

std::string RunPlan::pipeline_stages() const {
  std::string stages;
  for (int s = 0, l0 = 0; s < layout.pp_size; l0 += pipeline_split[size_t(s)], s++) {
    const int n = pipeline_split[size_t(s)];
    stages += fmt::format("{}{}{}", s ? ", " : "",
                          n == 1 ? fmt::format("layer {}", l0) : fmt::format("layers {}-{}", l0, l0 + n - 1),
                          s == layout.pp_size - 1 ? " + lm head" : "");
  }
  return stages;
}

std::vector<int> RunPlan::better_pipeline_split() const {
  const std::vector<int> better = obs::balanced_pipeline_split(model, layout.pp_size, T);
  return busiest_stage_share(better) < 0.95 * busiest_stage_share(pipeline_split) ? better : std::vector<int>{};
}

std::string RunPlan::recompute_text() const {
  return recompute_layers < 0 || recompute_layers >= model.n_layers
             ? std::string(model::recompute_name(recompute))
             : fmt::format("{} in layers 0-{}", model::recompute_name(recompute), recompute_layers - 1);
}

bool saves_before_the_end(const TrainConfig& cfg) {
  const auto& cb = cfg.exp_manager.checkpoint_callback_params;
  if (!cfg.exp_manager.create_checkpoint_callback) return false;
  return (cb.every_n_train_steps && *cb.every_n_train_steps < cfg.trainer.max_steps) || cb.train_time_interval;
}

int64_t save_copy_bytes(const RunPlan& p) {
  const bool model_parallel = p.layout.tp_size * p.layout.pp_size > 1;
  int64_t bytes = 0;
  if (p.zero1 || p.layout.dp_rank == 0) bytes = p.memory.optimizer;
  if (!model_parallel && p.layout.rank == 0) bytes += p.model.num_params() * 4;
  return bytes;
}

bool async_save_fits(int64_t copy_bytes, int64_t steps_bytes, int64_t memory_per_rank) {
  if (copy_bytes == 0) return true;
  return memory_per_rank >= 0 && double(copy_bytes + steps_bytes) <= 0.8 * double(memory_per_rank);
}

}  // namespace llamatrain::train
