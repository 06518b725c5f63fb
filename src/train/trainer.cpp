// run_training: see trainer.h. The loop body reads top to bottom as one step: micro-batches, the
// non-finite guard, the update, then the periodic work (log, validate, checkpoint).
#include "train/trainer.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "core/memory.h"
#include "io/hf_checkpoint.h"
#include "io/hf_config.h"
#include "io/hf_export.h"
#include "kernels/cpu/matmul_peak.h"
#include "kernels/cpu/ops.h"
#include "obs/metrics.h"
#include "obs/progress.h"
#include "obs/tensorboard.h"
#include "obs/throughput.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/layout.h"
#include "parallel/pipeline.h"
#include "parallel/watchdog.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/gather_weights.h"

namespace llamatrain::train {

namespace fs = std::filesystem;

namespace {

constexpr size_t kDpBucketElements = size_t(1) << 22;  // 16 MB of fp32 gradients per all-reduce

// SIGTERM (SLURM preemption, `scancel`) and SIGINT (Ctrl-C) ask the loop to save and stop after the
// current step. A second signal at least 2 s after the first stops at once; one sooner is the same
// request delivered twice (the launcher and the scheduler both signal the ranks), not an insistence.
std::atomic<int> g_stop_signal{0};
std::atomic<int64_t> g_stop_signal_ms{0};
// Under a multi-rank launcher a signal also ends the launcher's output forwarding: a rank writing to
// it would block forever and never save. On a stop signal such output turns non-blocking, so a
// line the launcher no longer reads is dropped (train_log.txt keeps it) and the checkpoint is saved.
std::atomic<bool> g_release_output_on_stop{false};

int64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

extern "C" void on_stop_signal(int sig) {
  const int64_t t = monotonic_ms();
  if (g_stop_signal.exchange(sig) != 0) {
    if (t - g_stop_signal_ms.load() < 2000) return;
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop_signal_ms = t;
  if (g_release_output_on_stop)
    for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
      const int flags = fcntl(fd, F_GETFL);
      if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    }
}

// True when fd is not a file: under a launcher that is its forwarding pipe, socket or pseudo-terminal
// (mpirun gives each rank a pty of its own), which nobody else writes to.
bool is_forwarded_output(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode);
}

struct StopSignalScope {
  using Handler = void (*)(int);
  Handler old_term, old_int;
  explicit StopSignalScope(bool multi_rank) {
    install_temporary_cleanup_handlers();  // ours replace them for the loop, and stay
    g_stop_signal = 0;
    g_release_output_on_stop = multi_rank && is_forwarded_output(STDOUT_FILENO) && is_forwarded_output(STDERR_FILENO);
    old_term = std::signal(SIGTERM, on_stop_signal);
    old_int = std::signal(SIGINT, on_stop_signal);
  }
  ~StopSignalScope() {
    std::signal(SIGTERM, old_term);
    std::signal(SIGINT, old_int);
    g_release_output_on_stop = false;
  }
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0;
}

// Steps listed in $LLAMATRAIN_INJECT_NONFINITE ("5,6,7") get a NaN gradient: a fault injection that
// tests the skip-and-rollback path through the real checks.
std::set<int64_t> injected_nonfinite_steps() {
  std::set<int64_t> steps;
  const char* env = std::getenv("LLAMATRAIN_INJECT_NONFINITE");
  if (!env) return steps;
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) steps.insert(std::strtoll(item.c_str(), nullptr, 10));
  return steps;
}

bool g_quiet = false;  // ranks other than 0 print nothing (errors still reach stderr)
std::FILE* g_log_file = nullptr;  // <log dir>/train_log.txt on rank 0: every line said, with its time

void say(const std::string& line) {
  if (g_quiet) return;
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (g_log_file) {
    const std::time_t t = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", std::gmtime(&t));
    std::fprintf(g_log_file, "[%s] %s\n", stamp, line.c_str());
    std::fflush(g_log_file);
  }
}

// Opens train_log.txt for appending (a resumed run continues it) and closes it at the end of the run.
struct LogFileScope {
  explicit LogFileScope(const fs::path& path) {
    g_log_file = std::fopen(path.c_str(), "a");
    if (!g_log_file) fail("cannot write {}: {}", path.string(), std::strerror(errno));
  }
  ~LogFileScope() {
    if (g_log_file) std::fclose(g_log_file);
    g_log_file = nullptr;
  }
};

// A progress bar for long I/O (checkpoints of a few hundred MB and up); small ones print their one
// summary line only.
class IoProgress {
 public:
  IoProgress(const std::string& label, int64_t total_bytes) {
    if (total_bytes < (256 << 20)) return;
    obs::ProgressOptions o;
    o.label = label;
    o.total = total_bytes;
    o.unit = obs::ProgressUnit::kBytes;
    bar_.emplace(o);
  }
  io::BytesDone callback() {
    if (!bar_) return {};
    return [this](int64_t n) { bar_->advance(n); };
  }

 private:
  std::optional<obs::Progress> bar_;
};

// The job's processes must be the ones the config describes.
void check_layout(const TrainConfig& c, int world_size) {
  if (c.world_size() != world_size)
    fail("trainer.devices x trainer.num_nodes = {} x {} = {}, but the job has {} process{}, expected them to agree\n"
         "hint: set trainer.devices to the processes per node and trainer.num_nodes to the nodes (mpirun -np N: "
         "trainer.devices=N trainer.num_nodes=1)",
         c.trainer.devices, c.trainer.num_nodes, c.world_size(), world_size, world_size == 1 ? "" : "es");
}

// The job's ranks and their groups (parallel/layout.h); the communicators are null where the group
// has one rank, so `if (dp)` reads "with data parallelism".
struct Ranks {
  parallel::ParallelLayout layout;
  parallel::ParallelGroups groups;
  parallel::Communicator* world = nullptr;  // every rank (broadcasts, barriers, the stop signal)
  parallel::Communicator* dp = nullptr;     // this rank's data-parallel replicas
  parallel::Communicator* tp = nullptr;     // its tensor-parallel group
  parallel::Communicator* pp = nullptr;     // its pipeline
  parallel::Communicator* mp = nullptr;     // its model replica (TP x PP)

  Ranks(const TrainConfig& c, parallel::Communicator* w) {
    const int size = w ? w->size() : 1;
    layout = parallel::ParallelLayout::make(size, std::max(1, c.model.tensor_model_parallel_size),
                                            std::max(1, c.model.pipeline_model_parallel_size), w ? w->rank() : 0);
    if (size == 1) return;
    world = w;
    groups = parallel::ParallelGroups::make(*w, layout);
    auto use = [](const std::unique_ptr<parallel::Communicator>& g) { return g && g->size() > 1 ? g.get() : nullptr; };
    dp = use(groups.dp), tp = use(groups.tp), pp = use(groups.pp), mp = use(groups.mp);
  }
};

// The mean over the data-parallel ranks of a value each rank computed (itself without dp).
double dp_mean(parallel::Communicator* dp, double v) {
  if (!dp || dp->size() == 1) return v;
  dp->all_reduce(&v, 1);
  return v / dp->size();
}

// Rank 0's string on every rank.
std::string broadcast_string(parallel::Communicator* dp, std::string s) {
  if (!dp || dp->size() == 1) return s;
  uint64_t n = s.size();
  dp->broadcast(&n, sizeof n, 0);
  s.resize(n);
  dp->broadcast(s.data(), n, 0);
  return s;
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

double evaluate_loss(model::LlamaModel& m, const TrainData& data, data::Split split, int64_t batches,
                     int64_t global_batch_size, int micro_batch_size, parallel::Communicator* dp,
                     parallel::Communicator* pp) {
  const int B = micro_batch_size, T = int(data.seq_length());
  const int ranks = dp ? dp->size() : 1, rank = dp ? dp->rank() : 0;
  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T);
  double sum = 0;
  int64_t count = 0;
  const int64_t micro = global_batch_size / (int64_t(B) * ranks);  // this rank's micro-batches per batch
  for (int64_t b = 0; b < batches; b++) {
    // Megatron's order: block mb of B x ranks samples, this rank's B of them.
    auto fill = [&](int64_t mb) {
      data.fill(split, b * global_batch_size + (mb * ranks + rank) * B, B, tokens.data(), targets.data());
    };
    if (!pp) {
      for (int64_t mb = 0; mb < micro; mb++) {
        fill(mb);
        sum += m.forward(tokens.data(), targets.data(), B, T).loss;
      }
    } else {
      // Forward only down the pipeline; the last stage has the losses.
      parallel::PipelineStage stage;
      stage.forward = [&](int mb, int slot, const float* input) {
        fill(mb);
        m.stage_forward(slot, tokens.data(), input, B, T);
        if (m.plan().last_stage()) sum += m.stage_loss(slot, targets.data()).loss;
      };
      stage.output = [&](int slot) { return m.stage_output(slot); };
      parallel::run_forward_only(*pp, int(micro), size_t(m.stage_tokens(B, T) * m.config().dim), stage);
    }
    count += micro;
  }
  if (pp) pp->all_reduce(&sum, 1);  // only the last stage's is not 0
  return count ? dp_mean(dp, sum / double(count)) : NAN;
}

TrainResult run_training(const TrainConfig& cfg, const std::vector<std::string>& notes,
                         parallel::Communicator* world) {
  const double t_start = now_s();
  check_layout(cfg, world ? world->size() : 1);
  // The layout: TP innermost, then DP, then PP (Megatron's order). A replica's TP x PP ranks read the
  // same samples; the data-parallel rank chooses which.
  const Ranks ranks(cfg, world);
  const parallel::ParallelLayout& lay = ranks.layout;
  parallel::Communicator* const dp = ranks.dp;
  parallel::Communicator* const all = ranks.world;
  const int dp_size = lay.dp_size, dp_rank = lay.dp_rank;
  const bool rank0 = lay.rank == 0;
  // How long a rank may wait while rank 0 works alone (checkpoints, sample indices).
  const double long_wait_s = all ? parallel::resolve_long_wait_timeout() : 0;
  using LongWait = parallel::Communicator::LongWait;
  g_quiet = !rank0;
  TrainResult result;
  result.last_val_loss = NAN;
  result.log_dir = resolve_log_dir(cfg);
  const fs::path log_dir(result.log_dir);
  const fs::path ckpt_dir = cfg.exp_manager.checkpoint_callback_params.dirpath
                                ? fs::path(*cfg.exp_manager.checkpoint_callback_params.dirpath)
                                : log_dir / "checkpoints";

  // ---- the run's folder can be written, and the data files exist (before the model loads) ----
  const char* log_key = cfg.exp_manager.explicit_log_dir ? "exp_manager.explicit_log_dir" : "exp_manager.exp_dir";
  if (path_exists(log_dir.string()) && !is_directory(log_dir.string()))
    fail("{}: {} is a file, expected a folder for the run's logs and checkpoints\nhint: choose another path",
         log_key, log_dir.string());
  const DataConfig& dc = cfg.model.data;
  if (!dc.fine_tuning) {
    for (const auto* items : {&dc.data_prefix.train, &dc.data_prefix.validation, &dc.data_prefix.test})
      if (!items->empty())
        for (const auto& prefix : data::parse_data_prefix(*items).prefixes)
          for (const char* ext : {".idx", ".bin"})
            if (!is_regular_file(prefix + ext))
              fail("model.data.data_prefix: {}{} does not exist\nhint: data_prefix entries are the output prefix of "
                   "`llamatrain preprocess` plus _<key>_document, without .bin/.idx (e.g. data/corpus_text_document)",
                   prefix, ext);
  } else {
    for (const auto* ds : {&dc.train_ds, &dc.validation_ds, &dc.test_ds})
      for (const auto& f : ds->file_names)
        if (!is_regular_file(f)) fail("model.data.*_ds.file_names: {} does not exist\nhint: check the path", f);
  }

  // ---- tokenizer and model shape ----
  // The tokenizer: the configured one, or model.init_from's tokenizer.model when that folder has one
  // (pretraining on indexed data needs none; checkpoints and exports then carry none).
  std::string tok_path = cfg.model.tokenizer_model_path();
  const bool tok_from_init = cfg.model.init_from && tok_path == (fs::path(*cfg.model.init_from) / "tokenizer.model").string();
  if (tok_from_init && !is_regular_file(tok_path)) tok_path.clear();
  std::optional<data::Tokenizer> tok;
  if (!tok_path.empty()) tok.emplace(tok_path);
  model::LlamaConfig mc;
  if (cfg.model.init_from) {
    mc = io::read_hf_config(*cfg.model.init_from);
  } else {
    if (!tok)
      fail("model vocabulary: no tokenizer and no model.init_from, expected one of them\nhint: set "
           "model.tokenizer.model=/path/tokenizer.model (the tokenizer the data was preprocessed with)");
    mc = cfg.model.llama_config(int(cfg.model.padded_vocab_size(tok->vocab_size())));
  }
  if (tok && tok->vocab_size() > mc.vocab_size)
    fail("tokenizer {} has {} pieces, but the model's vocab_size is {}, expected at most that\nhint: use the "
         "tokenizer of model.init_from",
         tok_path, tok->vocab_size(), mc.vocab_size);
  // The kernels index tokens of a micro-batch with int: B x T must stay below 2^31.
  if (cfg.model.micro_batch_size * cfg.model.data.seq_length >= (int64_t(1) << 31))
    fail("model.micro_batch_size {} x model.data.seq_length {} = {} tokens per micro-batch, expected fewer than "
         "2^31\nhint: lower model.micro_batch_size (gradient accumulation keeps the global batch)",
         cfg.model.micro_batch_size, cfg.model.data.seq_length,
         cfg.model.micro_batch_size * cfg.model.data.seq_length);
  const int B = int(cfg.model.micro_batch_size);
  const int T = int(cfg.model.data.seq_length);
  if (T > mc.max_seq_len)
    fail("model.data.seq_length {} exceeds the model's max_position_embeddings {}, expected at most that\nhint: lower "
         "model.encoder_seq_length",
         T, mc.max_seq_len);
  const int64_t gbs = cfg.model.global_batch_size;
  const int64_t num_micro = cfg.num_micro_batches();  // per data-parallel rank
  const bool zero1 = cfg.model.distributed_optimizer && dp_size > 1;
  const model::Precision precision = cfg.trainer.precision;
  // NeMo's activations_checkpoint_*: granularity null | selective | full; with full, method block
  // recomputes the first num_layers layers only, uniform recomputes every layer (each from its own
  // input; a larger num_layers would only keep more layers' activations at once here).
  const model::Recompute recompute =
      model::parse_recompute(cfg.model.activations_checkpoint_granularity.value_or("none"));
  const int recompute_layers = recompute == model::Recompute::full &&
                                       cfg.model.activations_checkpoint_method.value_or("uniform") == "block"
                                   ? int(cfg.model.activations_checkpoint_num_layers.value_or(1))
                                   : -1;
  const auto ct = precision == model::Precision::fp32 ? cpu::ComputeType::f32 : cpu::ComputeType::bf16;

  const model::ShardPlan plan =
      model::ShardPlan::make(mc, lay.tp_size, lay.tp_rank, lay.pp_size, lay.pp_rank,
                             cfg.model.sequence_parallel && lay.tp_size > 1,
                             lay.pp_size > 1 ? cfg.model.pipeline_layers() : std::vector<int>{});
  // 1F1B keeps up to PP - stage micro-batches in flight on a stage.
  const int slots = ranks.pp ? parallel::pipeline_slots(lay.pp_size, lay.pp_rank, int(num_micro)) : 1;
  // bf16 compute keeps its matmul operands as bf16 values in floats where the fp32 kernel is the faster
  // (2 more bytes each). That choice is probed (once per shape, then cached) only when it decides
  // whether the job fits; otherwise the known choice, else the larger figure, sizes the check.
  auto state_for = [&](bool floats) {
    return model::LlamaModel::state_bytes(mc, plan, precision, zero1 ? dp_size : 1, floats);
  };
  auto activations_for = [&](bool floats) {
    return model::LlamaModel::activation_bytes(mc, plan, precision, B, T, recompute, recompute_layers, slots,
                                                floats) +
           (plan.last_stage() && lay.tp_size == 1
                ? cpu::lmhead_ce_scratch_bytes(B * T, mc.dim, mc.vocab_size, ct, floats)
                : 0);
  };
  const bool float_operands = model::LlamaModel::float_operands_for_check(
      mc, plan, precision, int64_t(B) * T, available_memory_bytes(),
      [&](bool floats) { return state_for(floats) + activations_for(floats); });
  const int64_t state = state_for(float_operands), activations = activations_for(float_operands);
  check_memory_fits(state + activations,
                    fmt::format("training {} parameters in {} at micro batch {} x seq {}",
                                obs::format_count(double(mc.num_params())), model::precision_name(precision), B, T),
                    fmt::format("weights, gradients and optimizer state {:.1f} GB, activations {:.1f} GB", state / 1e9,
                                activations / 1e9),
                    recompute == model::Recompute::full
                        ? "lower model.micro_batch_size (gradient accumulation keeps the global batch), or use a "
                          "machine with more memory"
                        : "set model.activations_checkpoint_granularity=full, lower model.micro_batch_size, or use "
                          "a machine with more memory");

  const std::string export_dir =
      cfg.convert_to_hf ? (cfg.model.output_dir ? *cfg.model.output_dir : (log_dir / "hf").string()) : "";
  if (!export_dir.empty()) io::check_export_target(export_dir);

  std::error_code ec;
  const std::string config_yaml = to_yaml(cfg);
  if (rank0) {
    try {
      create_directories(log_dir.string());
    } catch (const Error& e) {
      fail("{}: {}", log_key, e.what());
    }
    write_file_atomic((log_dir / "train_config.yaml").string(), config_yaml);
  }
  std::optional<LogFileScope> log_file;
  if (rank0) log_file.emplace(log_dir / "train_log.txt");
  say(fmt::format("llamatrain train: log dir {}", log_dir.string()));
  for (const auto& n : notes) say("  note: " + n);
  if (all)
    say(fmt::format("parallel layout: {} ranks = data {} x tensor {} x pipeline {}{}; {} micro-batches of {} per data-"
                    "parallel rank per step{}",
                    lay.world_size, dp_size, lay.tp_size, lay.pp_size, plan.sequence_parallel ? " (sequence parallel)" : "",
                    num_micro, B, zero1 ? "; optimizer state sharded (ZeRO-1)" : ""));

  if (lay.pp_size > 1) {
    // What each stage computes, and a split that balances them better when there is one: a small
    // model's lm head can outweigh several layers.
    auto busiest_share = [&](const std::vector<int>& split) {
      std::vector<double> work;
      for (int s = 0; s < lay.pp_size; s++)
        work.push_back(obs::stage_flops(mc, 1, T, split[size_t(s)], s == lay.pp_size - 1));
      return *std::max_element(work.begin(), work.end()) / std::accumulate(work.begin(), work.end(), 0.0);
    };
    const std::vector<int> split = cfg.model.pipeline_layers();
    std::string stages;
    for (int s = 0, l0 = 0; s < lay.pp_size; l0 += split[size_t(s)], s++) {
      const int n = split[size_t(s)];
      stages += fmt::format("{}{}{}", s ? ", " : "",
                            n == 1 ? fmt::format("layer {}", l0) : fmt::format("layers {}-{}", l0, l0 + n - 1),
                            s == lay.pp_size - 1 ? " + lm head" : "");
    }
    const double busiest = busiest_share(split);
    say(fmt::format("pipeline stages: {}; the busiest does {:.0f}% of a step's work ({:.0f}% when balanced)", stages,
                    100 * busiest, 100.0 / lay.pp_size));
    const std::vector<int> better = obs::balanced_pipeline_split(mc, lay.pp_size, T);
    if (busiest_share(better) < 0.95 * busiest)
      say(fmt::format("  hint: model.num_layers_in_first_pipeline_stage={} model.num_layers_in_last_pipeline_stage={} "
                      "would bring the busiest stage to {:.0f}%",
                      better.front(), better.back(), 100 * busiest_share(better)));
  }

  model::LlamaModel model(mc, precision, uint64_t(cfg.model.seed), plan, ranks.tp);
  model.set_recompute(recompute, recompute_layers);
  model.set_activation_slots(slots);
  // ZeRO-1: this rank keeps the AdamW moments of one shard of the flat parameter arena.
  std::optional<parallel::ZeroShards> shards;
  if (zero1) {
    shards.emplace(size_t(model.num_params()), dp_size);
    const auto r = shards->range(dp_rank);
    model.set_optimizer_shard(int64_t(r.begin), int64_t(r.end), int64_t(shards->padded_size()));
  }
  say(fmt::format("model: {:.2f}M parameters{} (C {}, L {}, H {}, Hkv {}, F {}, V {}), {}, recompute {}, "
                  "memory {} (state {} + activations {}{})",
                  double(mc.num_params()) / 1e6,
                  model.is_sharded() ? fmt::format(", {:.2f}M on rank 0", double(model.num_params()) / 1e6) : "",
                  mc.dim, mc.n_layers, mc.n_heads, mc.n_kv_heads, mc.ffn_dim, mc.vocab_size,
                  model::precision_name(precision),
                  recompute_layers < 0 || recompute_layers >= mc.n_layers
                      ? std::string(model::recompute_name(recompute))
                      : fmt::format("{} in layers 0-{}", model::recompute_name(recompute), recompute_layers - 1),
                  obs::format_bytes(double(state + activations)), obs::format_bytes(double(state)),
                  obs::format_bytes(double(activations)), model.is_sharded() ? " on rank 0" : ""));

  // ---- starting point: a checkpoint of this run, an explicit one, model.init_from, or random ----
  TrainerState st;
  st.seed = uint64_t(cfg.model.seed);
  st.precision = model::precision_name(precision);
  std::optional<std::string> resume_path;
  if (!rank0) {
    // Rank 0 chooses (below) and tells the others.
  } else if (cfg.model.resume_from_checkpoint) {
    const std::string why = verify_checkpoint(*cfg.model.resume_from_checkpoint);
    if (!why.empty())
      fail("model.resume_from_checkpoint: {}\nhint: point it at a complete checkpoint folder (step_N)", why);
    resume_path = *cfg.model.resume_from_checkpoint;
  } else if (cfg.exp_manager.resume_if_exists) {
    // The newest checkpoint that verifies (each file's size and CRC32C), newest first.
    auto all = list_checkpoints(ckpt_dir.string());
    for (auto it = all.rbegin(); it != all.rend() && !resume_path; ++it) {
      IoProgress bar("verifying " + it->path, checkpoint_file_bytes(it->path));
      const std::string why = verify_checkpoint(it->path, bar.callback());
      if (why.empty())
        resume_path = it->path;
      else
        say(fmt::format("warning: skipping checkpoint {}: {}", it->path, why));
    }
    if (!resume_path && !cfg.exp_manager.resume_ignore_no_checkpoint)
      fail("exp_manager.resume_if_exists: no usable checkpoint in {}, and resume_ignore_no_checkpoint is false\n"
           "hint: set exp_manager.resume_ignore_no_checkpoint=true to start fresh",
           ckpt_dir.string());
  }
  if (all) {
    LongWait wait(all, long_wait_s, "rank 0 verifying checkpoints");
    const std::string chosen = broadcast_string(all, resume_path.value_or(""));
    resume_path = chosen.empty() ? std::nullopt : std::optional<std::string>(chosen);
  }
  if (resume_path) {
    const double t0 = now_s();
    say(fmt::format("resuming from {} ...", *resume_path));
    IoProgress bar("loading checkpoint", rank0 ? checkpoint_tensor_bytes(model) : 0);
    st = load_checkpoint(*resume_path, model, bar.callback());
    say(fmt::format("resumed at step {} ({} samples consumed) in {}", st.step, st.consumed_samples,
                    obs::format_duration(now_s() - t0)));
  } else if (cfg.model.init_from) {
    const double t0 = now_s();
    say(fmt::format("loading weights from {} ...", *cfg.model.init_from));
    int64_t bytes = 0;
    for (const auto& e : fs::directory_iterator(*cfg.model.init_from, ec))
      if (e.path().extension() == ".safetensors") bytes += int64_t(e.file_size(ec));
    if (model.is_sharded())  // a model-parallel rank reads its part only (the files' dtype: about their share)
      bytes = int64_t(double(bytes) * double(model.num_params()) / double(mc.num_params()));
    IoProgress bar("loading " + *cfg.model.init_from, rank0 ? bytes : 0);
    io::load_hf_weights(model, *cfg.model.init_from, bar.callback());
    say(fmt::format("loaded in {}", obs::format_duration(now_s() - t0)));
  } else {
    const float std_ = float(cfg.model.init_method_std);
    model.init_random(std_, cfg.model.use_scaled_init_method ? std_ / std::sqrt(2.0f * mc.n_layers) : 0.0f);
  }

  // ---- data ----
  const auto requested =
      data::requested_num_samples(cfg.trainer.max_steps, gbs, std::max<int64_t>(1, cfg.trainer.val_check_interval),
                                  cfg.trainer.limit_val_batches, cfg.trainer.limit_test_batches);
  say("data: building sample indices ...");
  const double t_data = now_s();
  // Rank 0 builds (and caches) the sample indices first; the others then read them from the cache.
  std::optional<TrainData> data_holder;
  if (rank0) data_holder.emplace(cfg, tok ? &*tok : nullptr, mc.eos_id, requested);
  if (all) {
    LongWait wait(all, long_wait_s, "rank 0 building the sample indices");
    all->barrier();
  }
  if (!rank0) data_holder.emplace(cfg, tok ? &*tok : nullptr, mc.eos_id, requested);
  const TrainData& data = *data_holder;
  std::string desc = data.describe();
  if (!desc.empty() && desc.back() == '\n') desc.pop_back();
  say(fmt::format("data ready in {}:\n{}", obs::format_duration(now_s() - t_data), desc));
  const bool validate = cfg.trainer.val_check_interval > 0 && cfg.trainer.limit_val_batches > 0 &&
                        data.has(data::Split::valid);

  // ---- loggers ----
  std::optional<obs::MetricsWriter> metrics;
  std::unique_ptr<obs::TensorBoardWriter> tb;
  if (rank0) {
    metrics.emplace((log_dir / "metrics.jsonl").string());
    if (cfg.exp_manager.create_tensorboard_logger) tb = std::make_unique<obs::TensorBoardWriter>(log_dir.string());
  }
  auto record = [&](const nlohmann::ordered_json& r) {
    if (metrics) metrics->write(r);
  };
  auto scalar = [&](const char* tag, double v, int64_t step) {
    if (tb) tb->add_scalar(tag, float(v), step);
  };

  const LrSchedule sched = cfg.lr_schedule();
  model::AdamWConfig opt;
  opt.beta1 = float(cfg.model.optim.betas.at(0));
  opt.beta2 = float(cfg.model.optim.betas.at(1));
  opt.eps = float(cfg.model.optim.eps);
  opt.weight_decay = float(cfg.model.optim.weight_decay);
  opt.grad_clip = float(cfg.trainer.gradient_clip_val.value_or(0.0));
  // MFU's denominator: the job's matmul rate on a large square product in the run's compute type, the
  // sum over ranks of each one's rate measured at the same time (ranks sharing a machine share it).
  if (all) all->barrier();
  double peak_gflops = cpu::measure_matmul_gflops(1024, 1024, 1024, ct, 0.2);
  if (all) all->all_reduce(&peak_gflops, 1);
  const double flops_per_step = obs::step_flops(mc, gbs, T);
  const int64_t max_steps = cfg.trainer.max_steps;
  const int64_t log_every = std::max<int64_t>(1, cfg.trainer.log_every_n_steps);
  const auto& ckp = cfg.exp_manager.checkpoint_callback_params;
  const bool checkpoints = cfg.exp_manager.create_checkpoint_callback;
  const int64_t nonfinite_limit = std::max<int64_t>(1, cfg.trainer.max_consecutive_nonfinite);
  std::set<int64_t> inject = injected_nonfinite_steps();  // each fires once (not again after a rollback)

  say(fmt::format("training: steps {} -> {}, global batch {} = micro batch {} x {} accumulation, seq {}, "
                  "lr schedule {}",
                  st.step, max_steps, gbs, B, num_micro, T, cfg.model.optim.sched.name));

  auto save = [&](const char* why) {
    const double t0 = now_s();
    std::string path;
    {
      IoProgress bar("saving checkpoint", rank0 ? checkpoint_tensor_bytes(model, true) : 0);
      const std::string why_wait = fmt::format("rank 0 writing checkpoint step_{}", st.step);
      LongWait wait(all, long_wait_s, why_wait), wait_mp(ranks.mp, long_wait_s, why_wait);
      path = save_checkpoint(ckpt_dir.string(), model, st, tok_path, config_yaml, bar.callback(),
                             SaveGroups{all, ranks.mp, lay});
    }
    result.last_checkpoint = path;
    if (!rank0) return;
    int64_t bytes = 0;
    for (const auto& e : fs::directory_iterator(path)) bytes += int64_t(e.file_size());
    const auto removed = prune_checkpoints(ckpt_dir.string(), int(ckp.save_top_k));
    const double dt = now_s() - t0;
    say(fmt::format("checkpoint ({}): {} ({}, {}, {}/s){}", why, path, obs::format_bytes(double(bytes)),
                    obs::format_duration(dt), obs::format_bytes(bytes / std::max(dt, 1e-9)),
                    removed.empty() ? "" : fmt::format("; removed {} older", removed.size())));
  };

  StopSignalScope signals(all != nullptr);
  // One (tokens, targets) pair per activation slot: a pipeline stage reads them again in the backward.
  std::vector<std::vector<int32_t>> tokens(size_t(slots), std::vector<int32_t>(size_t(B) * T)),
      targets(size_t(slots), std::vector<int32_t>(size_t(B) * T));
  // Plain data parallelism: buckets of gradients are all-reduced while the backward of the step's
  // last micro-batch goes on (model.optim.overlap_grad_sync), in the order it completes them.
  std::optional<parallel::GradReducer> reducer;
  if (dp && !zero1) {
    std::vector<parallel::GradRange> order;
    if (cfg.model.overlap_grad_sync)
      for (const auto& [b, e] : model.grad_ready_order()) order.push_back({size_t(b), size_t(e)});
    reducer.emplace(*dp, model.grad_data(), size_t(model.num_params()), kDpBucketElements, order);
  }
  auto last_micro_batch = [&](bool last) {
    if (!reducer || !cfg.model.overlap_grad_sync) return;
    if (last)
      model.set_grad_ready_hook([&](int64_t b, int64_t e) { reducer->ready(size_t(b), size_t(e)); });
    else
      model.set_grad_ready_hook({});
  };
  std::vector<float> shard_buf(zero1 ? shards->shard_size() : 0), gathered(zero1 ? shards->padded_size() : 0);
  const double t_loop = now_s();
  int64_t steps_run = 0;  // steps computed by this process (a rollback repeats some)
  int64_t nonfinite_run = 0;
  double t_last_ckpt = now_s(), t_log = now_s();
  int64_t steps_since_log = 0;
  // Time blocked in communication since the last log line (every group; waiting for slower ranks and
  // pipeline stages included).
  double comm_mark = parallel::blocked_seconds();
  obs::StepTimeAverage step_times;
  while (st.step < max_steps) {
    const double t_step = now_s();
    const int64_t step = st.step + 1;
    steps_run++;
    const double lr = sched.lr(st.step);
    model.zero_grad();
    // (fault injection: a NaN the backward accumulates into, reduced to every rank like any gradient)
    if (inject.erase(step) && rank0) model.grad_data()[0] = NAN;
    double loss_sum = 0;
    // Megatron's consumption order: block mb holds B x DP samples, this rank reads its B of them.
    auto fill = [&](int64_t mb, int slot) {
      data.fill(data::Split::train, st.consumed_samples + (mb * dp_size + dp_rank) * B, B,
                tokens[size_t(slot)].data(), targets[size_t(slot)].data());
    };
    if (!ranks.pp) {
      for (int64_t mb = 0; mb < num_micro; mb++) {
        fill(mb, 0);
        last_micro_batch(mb == num_micro - 1);
        loss_sum += model.forward_backward(tokens[0].data(), targets[0].data(), B, T, 1.0f / float(num_micro)).loss;
      }
    } else {
      parallel::PipelineStage stage;
      stage.forward = [&](int mb, int slot, const float* input) {
        fill(mb, slot);
        model.stage_forward(slot, tokens[size_t(slot)].data(), input, B, T);
      };
      stage.output = [&](int slot) { return model.stage_output(slot); };
      stage.backward = [&](int mb, int slot, const float* doutput) {
        last_micro_batch(mb == num_micro - 1);
        loss_sum += model.stage_backward(slot, tokens[size_t(slot)].data(), targets[size_t(slot)].data(), doutput,
                                         1.0f / float(num_micro)).loss;
      };
      stage.input_grad = [&] { return model.stage_input_grad(); };
      parallel::run_1f1b(*ranks.pp, int(num_micro), size_t(model.stage_tokens(B, T) * mc.dim), stage);
      ranks.pp->all_reduce(&loss_sum, 1);  // the last stage's losses, on every stage
    }
    last_micro_batch(false);
    // Sums over the model-parallel copies of a parameter (SP norm weights, the tied embedding).
    model.reduce_model_parallel_grads(lay.pp_size > 1 ? ranks.groups.embedding.get() : nullptr);
    const int64_t window_begin = st.consumed_samples;
    st.consumed_samples += gbs;
    double loss = loss_sum / double(num_micro);
    loss = dp_mean(dp, loss);
    // Gradients: the mean over the data-parallel ranks (ZeRO-1: of this rank's shard only). The global
    // norm: each rank's part (its ZeRO-1 shard, or all its tensors), summed over the model's ranks (and
    // over the data-parallel shards under ZeRO-1).
    float norm;
    if (zero1) {
      parallel::reduce_scatter_gradients(*dp, model.grad_data(), *shards);
      double sq = model.grad_sum_squares(model.shard_begin(), model.shard_end());
      all->all_reduce(&sq, 1);
      norm = float(std::sqrt(sq));
    } else {
      if (reducer) reducer->finish();
      double sq = model.grad_sum_squares(0, model.num_params());
      if (ranks.mp) ranks.mp->all_reduce(&sq, 1);
      norm = float(std::sqrt(sq));
    }
    st.step = step;
    if (std::isfinite(loss) && std::isfinite(norm)) {
      nonfinite_run = 0;
      st.optimizer_steps++;
      model.optimizer_update(opt, float(lr), int(st.optimizer_steps), norm);
      if (zero1) {
        // Every rank's updated shard to every rank, then the bf16 copies from the fp32 weights.
        const auto r = shards->range(dp_rank);
        std::copy(model.param_data() + r.begin, model.param_data() + r.end, shard_buf.begin());
        std::fill(shard_buf.begin() + ptrdiff_t(r.size()), shard_buf.end(), 0.0f);
        dp->all_gather(gathered.data(), shard_buf.data(), shards->shard_size());
        std::copy(gathered.begin(), gathered.begin() + model.num_params(), model.param_data());
        model.params_changed();
      }
    } else {
      st.skipped_steps++;
      nonfinite_run++;
      say(fmt::format("step {}: loss {:.4f} / grad norm {:.4f} is not finite: update skipped (samples {}-{}; {} in a row, "
                      "rollback after {})",
                      step, loss, norm, window_begin, st.consumed_samples - 1, nonfinite_run, nonfinite_limit));
      if (nonfinite_run >= nonfinite_limit) {
        std::vector<std::string> warnings;
        std::optional<CheckpointInfo> ck;
        if (rank0) ck = latest_valid_checkpoint(ckpt_dir.string(), &warnings);
        for (const auto& w : warnings) say("warning: " + w);
        if (all) {
          LongWait wait(all, long_wait_s, "rank 0 verifying checkpoints");
          const std::string chosen = broadcast_string(all, ck ? ck->path : "");
          if (!chosen.empty()) ck = CheckpointInfo{chosen, 0};
        }
        if (!ck)
          fail("training diverged: {} steps in a row had a non-finite loss or gradient norm (up to step {}), and "
               "there is no checkpoint to roll back to\nhint: lower model.optim.lr or raise warmup, check the data, "
               "or save checkpoints earlier (exp_manager.checkpoint_callback_params.every_n_train_steps)",
               nonfinite_run, step);
        TrainerState keep = st;
        st = load_checkpoint(ck->path, model);
        say(fmt::format("rollback: {} non-finite steps in a row; restored {} (step {}); steps {}-{} discarded and "
                        "samples {}-{} skipped",
                        nonfinite_run, ck->path, st.step, st.step + 1, step, st.consumed_samples,
                        keep.consumed_samples - 1));
        record(nlohmann::ordered_json{{"step", step},
                                             {"event", "rollback"},
                                             {"to_step", st.step},
                                             {"skipped_samples_begin", st.consumed_samples},
                                             {"skipped_samples_end", keep.consumed_samples}});
        st.consumed_samples = keep.consumed_samples;
        st.skipped_steps = keep.skipped_steps;
        st.rollbacks = keep.rollbacks + 1;
        st.train_seconds = keep.train_seconds;
        nonfinite_run = 0;
        continue;
      }
    }
    st.lr = lr;
    st.loss = loss;
    const double dt = now_s() - t_step;
    st.train_seconds += dt;
    step_times.add(dt);
    steps_since_log++;

    const bool last = st.step == max_steps;
    if (st.step % log_every == 0 || st.step == 1 || last) {
      const double interval = now_s() - t_log;
      const double step_s = interval / double(steps_since_log);
      const double tok_s = double(gbs) * T / step_s;
      const double mfu = obs::mfu(flops_per_step, step_s, peak_gflops * 1e9);
      const double rss = peak_rss_bytes();
      const double comm_s = (parallel::blocked_seconds() - comm_mark) / double(steps_since_log);
      say(fmt::format("step {}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.2f} seq/s | {} tok/s | MFU {:.1f}% "
                      "{}| mem {} | ETA {}",
                      st.step, max_steps, loss, lr, norm, double(gbs) / step_s, obs::format_count(tok_s), 100 * mfu,
                      all ? fmt::format("| comm {} ({:.1f}%) ",
                                       comm_s < 1 ? fmt::format("{:.1f}ms", 1e3 * comm_s) : obs::format_duration(comm_s),
                                       100 * comm_s / step_s)
                         : "",
                      obs::format_bytes(rss), obs::format_duration(step_times.eta_s(max_steps - st.step))));
      record(nlohmann::ordered_json{{"step", st.step},
                                           {"loss", loss},
                                           {"lr", lr},
                                           {"grad_norm", norm},
                                           {"consumed_samples", st.consumed_samples},
                                           {"step_time_s", step_s},
                                           {"tokens_per_s", tok_s},
                                           {"mfu", mfu},
                                           {"comm_time_s", comm_s},
                                           {"peak_rss_bytes", rss}});
      scalar("reduced_train_loss", loss, st.step);
      scalar("lr", lr, st.step);
      scalar("grad_norm", norm, st.step);
      scalar("consumed_samples", double(st.consumed_samples), st.step);
      scalar("train_step_timing in s", step_s, st.step);
      scalar("tokens_per_s", tok_s, st.step);
      scalar("mfu", mfu, st.step);
      if (all) scalar("comm_time_s", comm_s, st.step);
      if (tb) tb->flush();
      t_log = now_s();
      steps_since_log = 0;
      comm_mark = parallel::blocked_seconds();
    }
    if (validate && (st.step % cfg.trainer.val_check_interval == 0 || last)) {
      const double t0 = now_s();
      const double blocked0 = parallel::blocked_seconds();
      const double val =
          evaluate_loss(model, data, data::Split::valid, cfg.trainer.limit_val_batches, gbs, B, dp, ranks.pp);
      result.last_val_loss = val;
      say(fmt::format("validation at step {}: loss {:.4f}, perplexity {:.2f} ({} batches, {})", st.step, val,
                      std::exp(val), cfg.trainer.limit_val_batches, obs::format_duration(now_s() - t0)));
      record(nlohmann::ordered_json{{"step", st.step}, {"val_loss", val}, {"val_ppl", std::exp(val)}});
      scalar("val_loss", val, st.step);
      if (tb) tb->flush();
      t_log += now_s() - t0;  // validation time is not step time
      comm_mark += parallel::blocked_seconds() - blocked0;
    }
    // A signal reaches the ranks at different moments: they stop together, after the same step.
    double stop_signal = g_stop_signal.load();
    if (all) all->all_reduce(&stop_signal, 1);
    const bool stop = stop_signal != 0;
    if (checkpoints) {
      const bool by_steps = ckp.every_n_train_steps && *ckp.every_n_train_steps > 0 &&
                            st.step % *ckp.every_n_train_steps == 0;
      const bool by_time = ckp.train_time_interval && now_s() - t_last_ckpt >= *ckp.train_time_interval;
      if (by_steps || by_time || last || stop) {
        save(stop ? "stop signal" : last ? "end" : by_steps ? "every_n_train_steps" : "train_time_interval");
        t_last_ckpt = now_s();
        t_log = now_s();
        comm_mark = parallel::blocked_seconds();
      }
    }
    if (stop) {
      const int sig = g_stop_signal.load() != 0 ? g_stop_signal.load() : SIGTERM;
      say(fmt::format("stopped by signal {} after step {}{}", sig, st.step,
                      checkpoints ? "; run the same command to resume" : ""));
      result.stop_signal = sig;
      break;
    }
  }
  result.steps = st.step;
  result.last_loss = st.loss;
  const double loop_s = now_s() - t_loop;
  if (steps_run > 0)
    say(fmt::format("train loop: {} steps in {} = {} tokens/s end to end (data, logging, validation and "
                    "checkpoints included)",
                    steps_run, obs::format_duration(loop_s), obs::format_count(double(steps_run) * double(gbs) * T / loop_s)));

  // The export: one replica's weights gathered onto rank 0 (the same bytes whatever the layout).
  std::unique_ptr<model::LlamaModel> whole;
  if (!export_dir.empty() && result.stop_signal == 0 && model.is_sharded() && dp_rank == 0) {
    LongWait wait(ranks.mp, long_wait_s, "rank 0 exporting");
    whole = gather_full_weights(model, *ranks.mp);
  }
  if (!export_dir.empty() && result.stop_signal == 0 && rank0) {
    model::LlamaModel& out = whole ? *whole : model;
    const double t0 = now_s();
    io::ExportOptions eo;
    eo.torch_dtype = precision == model::Precision::fp32 ? "float32" : "bfloat16";
    eo.tokenizer_model = tok_path;
    IoProgress bar("exporting", out.num_params() * (precision == model::Precision::fp32 ? 4 : 2));
    eo.progress = bar.callback();
    say(fmt::format("exporting Hugging Face checkpoint to {} ...", export_dir));
    const auto rep = io::export_hf(out, export_dir, eo);
    say(fmt::format("exported {} ({}, {} shard{}) in {}; reloaded and checked: max logit difference {:.2g} "
                    "(bound {:.2g})",
                    rep.dir, obs::format_bytes(double(rep.bytes)), rep.num_shards, rep.num_shards == 1 ? "" : "s",
                    obs::format_duration(now_s() - t0), rep.max_abs_logit_diff, rep.tolerance));
    result.hf_export = rep.dir;
  }
  say(fmt::format("done: {} steps, last loss {:.4f}, total time {}", result.steps, result.last_loss,
                  obs::format_duration(now_s() - t_start)));
  return result;
}

}  // namespace llamatrain::train
