// run_training (train/trainer.h) as a Trainer that reads top to bottom as named steps: preflight (the
// RunPlan), start (the run folder, the model from its starting point, the data, the loggers), then per
// step train_step (micro-batches, gradient reduction, the global norm, the update), the non-finite
// guard and rollback, the record, validation, checkpoints and the stop signal, and at the end the
// Hugging Face export. Data, tensor and pipeline parallelism enter through the groups of Ranks and the
// micro-batch loop; the model itself is layout-agnostic. Each step that tools care about also prints
// its @event line (train/events.h); a failure prints the error event on its rank (run_training).
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>

#include <fmt/ranges.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/error.h"
#include "core/file.h"
#include "core/host.h"
#include "core/memory.h"
#include "data/piece_lengths.h"
#include "io/hf_checkpoint.h"
#include "io/hf_export.h"
#include "model/machine.h"
#include "obs/throughput.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/watchdog.h"
#include "train/checkpoint.h"
#include "train/console.h"
#include "train/data.h"
#include "train/events.h"
#include "train/gather_weights.h"
#include "train/run_log.h"
#include "train/signals.h"

namespace llamatrain::train {

namespace fs = std::filesystem;
using LongWait = parallel::Communicator::LongWait;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The job's communicators for this rank's layout; null where the group has one rank, so `if (dp)`
// reads "with data parallelism".
struct Ranks {
  parallel::ParallelGroups groups;
  parallel::Communicator* world = nullptr;  // every rank (broadcasts, barriers, the stop signal)
  parallel::Communicator* dp = nullptr;     // this rank's data-parallel replicas
  parallel::Communicator* tp = nullptr;     // its tensor-parallel group
  parallel::Communicator* pp = nullptr;     // its pipeline
  parallel::Communicator* mp = nullptr;     // its model replica (TP x PP)

  Ranks(const parallel::ParallelLayout& layout, parallel::Communicator* w) {
    if (!w || w->size() == 1) return;
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

// Rank 0's string on every rank (s itself without a world).
std::string from_rank0(parallel::Communicator* c, std::string s) {
  return c ? c->broadcast_string(std::move(s), 0) : s;
}

// One training step's outcome, before the loop decides what to do with it.
struct StepResult {
  int64_t step = 0;          // its number (1-based)
  double lr = 0, loss = 0;   // the loss: the mean over the global batch
  double embedding_lr = -1;  // the embedding and output layer's rate (< 0: lr)
  float grad_norm = 0;       // the global L2 norm before clipping
  int64_t first_sample = 0;  // the global batch's samples [first_sample, first_sample + global batch)
  double seconds = 0;
  bool finite() const { return std::isfinite(loss) && std::isfinite(grad_norm); }
};

class Trainer {
 public:
  Trainer(const TrainConfig& cfg, const std::vector<std::string>& notes, const RunCommand& command,
          parallel::Communicator* world, const InjectedFaults& faults)
      : cfg_(cfg),
        notes_(notes),
        command_(command),
        faults_(faults),
        plan_(preflight(cfg, world ? world->size() : 1, world ? world->rank() : 0)),
        ranks_(plan_.layout, world),
        console_(plan_.layout.rank != 0),
        long_wait_s_(ranks_.world ? parallel::resolve_long_wait_timeout() : 0) {}

  ~Trainer() {
    if (writer_.valid()) writer_.wait();  // a save in flight stays uncommitted: its temporary folder goes
  }
  TrainResult run();
  // The kind of failure an Error without its own code means at the step now running (events.h).
  const char* context() const { return context_; }
  int rank() const { return plan_.layout.rank; }
  const Console& console() const { return console_; }

 private:
  bool rank0() const { return plan_.layout.rank == 0; }
  void say(const std::string& line) const { console_.say(line); }
  void event(const char* kind, nlohmann::ordered_json fields) const {
    console_.event(event_line(kind, std::move(fields)));
  }
  void start();
  std::optional<std::string> find_resume(std::vector<std::string>* warnings, std::string* error);
  void describe_run(const std::optional<std::string>& resume);
  void make_model();
  void say_freeze_changes(const std::vector<std::string>& saved);
  BatchLayout batch_layout() const;
  void decide_async_save();
  void say_layout_changes(const BatchLayout& saved);
  void choose_starting_point(const std::optional<std::string>& resume);
  void check_resume_tokenizer(const std::string& resume) const;
  void open_data();
  void prepare_steps();
  StepResult train_step();
  double micro_batches();
  float reduce_gradients();
  // A device arena (n floats at p) for the host-staged collectives, and their piece size.
  parallel::StagedArena staged(float* p, size_t n) const;
  static size_t staged_piece() { return model::Kernels::host_piece_bytes() / sizeof(float); }
  bool skip(const StepResult& s);
  void rollback(const StepResult& s);
  void record(const StepResult& s);
  void validate();
  void save(const char* why, bool behind);
  void maybe_save(bool stop);
  void finish_save(bool wait);
  void commit_save(CheckpointSave& save, const char* why, double t0, double pause);
  void export_hf();

  const TrainConfig& cfg_;
  const std::vector<std::string>& notes_;
  const RunCommand& command_;
  InjectedFaults faults_;  // a test's (train/faults.h); none in a normal run
  const char* context_ = "config";
  const RunPlan plan_;
  const Ranks ranks_;
  Console console_;
  const double long_wait_s_;  // how long a rank may wait while rank 0 works alone
  TrainResult result_;
  std::string config_yaml_;
  std::unique_ptr<model::LlamaModel> model_;
  std::optional<parallel::ZeroShards> shards_;  // ZeRO-1: this rank keeps the AdamW moments of one shard
  TrainerState st_;
  std::optional<TrainData> data_;
  bool validate_ = false;
  std::optional<data::PieceLengths> piece_lengths_;  // the tokenizer's (validation's bits per byte)
  std::optional<RunLog> log_;
  std::optional<LrSchedule> sched_;
  double embedding_lr_scale_ = -1;  // model.optim.embedding_lr / model.optim.lr (< 0: not set)
  model::AdamWConfig opt_;
  double peak_gflops_ = 0, flops_per_step_ = 0;
  bool async_save_ = false;     // checkpoints written behind the steps (decide_async_save)
  int64_t runtime_bytes_ = 0;   // resident before the model was made: libraries, runtime (plan's "runtime")
  int ranks_on_this_host_ = 1;  // (describe_run)
  // One (tokens, targets) pair per activation slot: a pipeline stage reads them again in the backward.
  std::vector<MicroBatch> batches_;  // per activation slot
  std::optional<parallel::GradReducer> reducer_;
  std::unique_ptr<model::GpuCollectives> gpu_dp_;  // data parallelism on GPUs through NCCL (else host-staged)
  int64_t steps_run_ = 0;                          // steps computed by this process (a rollback repeats some)
  int64_t nonfinite_run_ = 0;
  int64_t rollbacks_since_save_ = 0;  // rollbacks with no checkpoint saved since (the divergence budget)
  double t_last_ckpt_ = 0, t_log_ = 0;
  int64_t steps_since_log_ = 0;
  // This rank's micro-batches since the last record: sequences, their text inputs and attention pairs
  // (MicroBatch), so that tokens/s and MFU count the work on text only (padding and cross-document
  // pairs left out) as this rank saw it.
  double seqs_since_log_ = 0, real_since_log_ = 0, pairs_since_log_ = 0;
  double seqs_run_ = 0, real_run_ = 0;  // the same over the whole loop
  double comm_mark_ = 0;                // parallel::blocked_seconds() at the last record
  obs::StepTimeAverage step_times_;
  // async_save: the save being written behind the steps (its writer thread declared last, so that it
  // ends first), why it was made, when, and how long the copy paused training.
  std::unique_ptr<CheckpointSave> pending_;
  std::unique_ptr<CheckpointSave> spare_;  // the last one committed: its copies' memory serves the next
  const char* pending_why_ = "";
  double pending_t0_ = 0, pending_pause_ = 0;
  std::future<void> writer_;
};

TrainResult Trainer::run() {
  const double t_start = now_s();
  start();
  StopSignalScope signals(ranks_.world != nullptr);
  prepare_steps();
  const double t_loop = now_s();
  context_ = "train";
  const int64_t max_steps = cfg_.trainer.max_steps;
  while (st_.step < max_steps) {
    const StepResult s = train_step();
    if (!s.finite() && skip(s)) continue;  // rolled back to the last checkpoint
    st_.lr = s.lr;
    st_.loss = s.loss;
    st_.train_seconds += s.seconds;
    step_times_.add(s.seconds);
    steps_since_log_++;
    const bool last = st_.step == max_steps;
    if (st_.step % std::max<int64_t>(1, cfg_.trainer.log_every_n_steps) == 0 || st_.step == 1 || last) record(s);
    if (validate_ && (st_.step % cfg_.trainer.val_check_interval == 0 || last)) validate();
    // A signal reaches the ranks at different moments: they stop together, after the same step.
    double signal = stop_signal();
    if (ranks_.world) ranks_.world->all_reduce(&signal, 1);
    maybe_save(signal != 0);
    finish_save(false);  // a save written behind the steps is committed once every rank's part is
    if (signal != 0) {
      result_.stop_signal = stop_signal() != 0 ? stop_signal() : SIGTERM;
      event("signal",
            {{"signal", result_.stop_signal}, {"name", sigabbrev_np(result_.stop_signal)}, {"step", st_.step}});
      say(fmt::format("stopped by signal {} after step {}{}", result_.stop_signal, st_.step,
                      cfg_.exp_manager.create_checkpoint_callback ? "; run the same command to resume" : ""));
      break;
    }
  }
  finish_save(true);
  result_.steps = st_.step;
  result_.last_loss = st_.loss;
  const double loop_s = now_s() - t_loop;
  if (steps_run_ > 0) {
    const double real_fraction = seqs_run_ > 0 ? real_run_ / (seqs_run_ * plan_.T) : 1.0;  // text, not padding
    say(fmt::format(
        "train loop: {} steps in {} = {} tokens/s end to end (data, logging, validation and "
        "checkpoints included{})",
        steps_run_, obs::format_duration(loop_s),
        obs::format_count(double(steps_run_) * double(plan_.global_batch) * plan_.T * real_fraction / loop_s),
        real_fraction < 1.0
            ? fmt::format("; text tokens only, {:.1f}% of the inputs were padding", 100.0 * (1.0 - real_fraction))
            : ""));
  }
  if (!plan_.export_dir.empty() && result_.stop_signal == 0) export_hf();
  // The process's peak resident memory over the whole run, saves and the export included: what a
  // SLURM --mem must allow (the step lines' figure is the peak up to that step).
  const double peak_rss = peak_rss_bytes();
  say(fmt::format("done: {} steps, last loss {:.4f}, total time {}, peak memory {} (rank 0's host)", result_.steps,
                  result_.last_loss, obs::format_duration(now_s() - t_start), obs::format_bytes(peak_rss)));
  event("end", {{"reason", result_.stop_signal ? "signal" : "max_steps"},
                {"steps", result_.steps},
                {"max_steps", max_steps},
                {"last_loss", result_.last_loss},
                {"last_val_loss", result_.last_val_loss},
                {"checkpoint", result_.last_checkpoint},
                {"skipped_steps", st_.skipped_steps},
                {"rollbacks", st_.rollbacks},
                {"peak_rss_bytes", peak_rss},
                {"seconds", now_s() - t_start}});
  return result_;
}

// ---- start: the run folder, the model from its starting point, the data, the loggers ----

void Trainer::start() {
  result_.last_val_loss = NAN;
  result_.log_dir = plan_.log_dir;
  config_yaml_ = to_yaml(cfg_);
  if (rank0()) {
    try {
      create_directories(plan_.log_dir);
    } catch (const Error& e) {
      fail("{}: {}", cfg_.exp_manager.explicit_log_dir ? "exp_manager.explicit_log_dir" : "exp_manager.exp_dir",
           e.what());
    }
    write_file_atomic((fs::path(plan_.log_dir) / "train_config.yaml").string(), config_yaml_);
    console_.open_log((fs::path(plan_.log_dir) / "train_log.txt").string());
  }
  context_ = "checkpoint";
  std::vector<std::string> warnings;
  std::string resume_error;
  const std::optional<std::string> resume = find_resume(&warnings, &resume_error);
  describe_run(resume);
  for (const auto& w : warnings) say(w);
  if (!resume_error.empty()) throw Error(resume_error, "checkpoint");
  context_ = "config";
  runtime_bytes_ = std::max<int64_t>(0, current_rss_bytes());  // what the process holds before the model
  make_model();
  context_ = "checkpoint";
  choose_starting_point(resume);
  context_ = "data";
  open_data();
  log_.emplace(console_, plan_.log_dir, rank0(), cfg_.exp_manager.create_tensorboard_logger, ranks_.world != nullptr);
  sched_.emplace(cfg_.lr_schedule());
  if (cfg_.model.optim.embedding_lr) {
    embedding_lr_scale_ = *cfg_.model.optim.embedding_lr / cfg_.model.optim.lr;
    say(fmt::format("embedding and output layer: peak learning rate {:.3e}, {:g}x the others' on the same schedule",
                    *cfg_.model.optim.embedding_lr, embedding_lr_scale_));
  }
  opt_.beta1 = float(cfg_.model.optim.betas.at(0));
  opt_.beta2 = float(cfg_.model.optim.betas.at(1));
  opt_.eps = float(cfg_.model.optim.eps);
  opt_.weight_decay = float(cfg_.model.optim.weight_decay);
  opt_.grad_clip = float(cfg_.trainer.gradient_clip_val.value_or(0.0));
  // MFU's denominator: the job's matmul rate on a large square product in the run's compute type, the
  // sum over ranks of each one's rate measured at the same time (ranks sharing a machine share it).
  if (ranks_.world) ranks_.world->barrier();
  peak_gflops_ = model::peak_matmul_gflops(plan_.device, plan_.precision, 0.2);
  if (ranks_.world) ranks_.world->all_reduce(&peak_gflops_, 1);
  flops_per_step_ = obs::step_flops(plan_.model, plan_.global_batch, plan_.T);
  say(fmt::format("training: steps {} -> {}, global batch {} = micro batch {} x {} accumulation, seq {}, "
                  "lr schedule {}",
                  st_.step, cfg_.trainer.max_steps, plan_.global_batch, plan_.B, plan_.micro_batches, plan_.T,
                  cfg_.model.optim.sched.name));
  decide_async_save();
}

// exp_manager.checkpoint_callback_params.async_save as given; unset, on where every rank's host copy
// (save_copy_bytes) fits beside its steps in what it may have: its share of the memory its node has
// left, plus what it holds already (run_plan.h async_save_fits, as plan predicts it). The ranks decide
// together: a save is collective, behind the steps on all of them or on none.
void Trainer::decide_async_save() {
  const auto& given = cfg_.exp_manager.checkpoint_callback_params.async_save;
  if (given || !saves_before_the_end(cfg_)) {  // (the end's and a signal's saves are written in place)
    async_save_ = given.value_or(false);
    return;
  }
  const int64_t copy = save_copy_bytes(plan_);
  // What a rank may have, as plan counts it: its share of what the node has left, plus what it holds.
  const int64_t avail = available_memory_bytes(), held = std::max<int64_t>(0, current_rss_bytes());
  const int64_t per_rank = avail < 0 ? -1 : avail / ranks_on_this_host_ + held;
  // What the steps hold in host memory at their peak, as plan counts it: the runtime and, on this CPU,
  // the state and activations (the activations come later); on an accelerator what the process holds.
  const int64_t steps =
      plan_.device == model::Device::cpu ? std::max(runtime_bytes_ + plan_.memory.total(), held) : held;
  float misfits = async_save_fits(copy, steps, per_rank) ? 0.0f : 1.0f;
  if (ranks_.world) ranks_.world->all_reduce(&misfits, 1);
  async_save_ = misfits == 0;
  const std::string room = per_rank < 0 ? "the unknown memory" : "the " + obs::format_bytes(double(per_rank));
  const std::string key = "exp_manager.checkpoint_callback_params.async_save";
  if (async_save_)
    say(fmt::format("checkpoints: written behind the steps ({} unset: a host copy of {} fits beside the steps in {} "
                    "a rank may use, a fifth left free)",
                    key, obs::format_bytes(double(copy)), room));
  else
    say(fmt::format("checkpoints: written in place ({} unset: a host copy of {} would not fit beside the steps in {} "
                    "a rank may use, a fifth left free{}; {}=true writes behind anyway)",
                    key, obs::format_bytes(double(copy)), room,
                    async_save_fits(copy, steps, per_rank) ? ", on another rank" : "", key));
}

// The first line names the job, its hosts, ranks and layout; the start event says the same and
// how the run was started, for a tool to repeat it.
void Trainer::describe_run(const std::optional<std::string>& resume) {
  const parallel::ParallelLayout& lay = plan_.layout;
  const JobInfo job = job_from_environment();
  // The distinct hosts, in the order of their first rank; the ranks on this one.
  std::vector<std::string> hosts;
  const std::string here = host_name();
  const auto rank_hosts = ranks_.world ? ranks_.world->gather_strings(here) : std::vector{here};
  for (const auto& h : rank_hosts)
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  ranks_on_this_host_ = int(std::max<ptrdiff_t>(1, std::count(rank_hosts.begin(), rank_hosts.end(), here)));
  std::string nodes = job.node_list;
  if (nodes.empty())
    for (const auto& h : hosts) nodes += (nodes.empty() ? "" : ",") + h;
  const std::string job_text =
      job.job_id.empty() ? ""
                         : fmt::format("job {}{} ", job.job_id, job.job_name.empty() ? "" : " (" + job.job_name + ")");
  const std::string device = model::device_description(plan_.device);
  say(fmt::format("llamatrain train: {}on {}: {} rank{} = data {} x tensor {} x pipeline {}; log dir {}; device {}{}",
                  job_text, nodes, lay.world_size, lay.world_size == 1 ? "" : "s", lay.dp_size, lay.tp_size,
                  lay.pp_size, plan_.log_dir, device,
                  lay.world_size > 1 && plan_.device == model::Device::cuda ? " on rank 0, one GPU per rank" : ""));
  nlohmann::ordered_json start = {{"job_id", job.job_id},
                                  {"job_name", job.job_name},
                                  {"nodes", nodes},
                                  {"hosts", hosts},
                                  {"ranks", lay.world_size},
                                  {"dp", lay.dp_size},
                                  {"tp", lay.tp_size},
                                  {"pp", lay.pp_size},
                                  {"launcher", job.launcher},
                                  {"launcher_command", launcher_command()},
                                  {"program", program_as_started()},
                                  {"device", model::device_name(plan_.device)},
                                  {"device_detail", device},
                                  {"precision", model::precision_name(plan_.precision)},
                                  {"config", command_.config},
                                  {"overrides", command_.overrides},
                                  {"cwd", fs::current_path().string()},
                                  {"run_dir", plan_.log_dir},
                                  {"checkpoint_dir", plan_.checkpoint_dir},
                                  {"resumed_from", resume ? nlohmann::ordered_json(*resume) : nlohmann::ordered_json()},
                                  {"max_steps", cfg_.trainer.max_steps}};
  if (!plan_.device_note.empty()) start["device_note"] = plan_.device_note;
  event("start", std::move(start));
  // No rank goes on (and may fail, and abort the job) before the start line is out.
  if (ranks_.world) ranks_.world->barrier();
  for (const auto& n : notes_) say("  note: " + n);
  if (!plan_.device_note.empty()) say("  note: " + plan_.device_note);
  if (ranks_.world)
    say(fmt::format("parallel layout: {} ranks = data {} x tensor {} x pipeline {}{}; {} micro-batches of {} per data-"
                    "parallel rank per step{}",
                    lay.world_size, lay.dp_size, lay.tp_size, lay.pp_size,
                    plan_.shard.sequence_parallel ? " (sequence parallel)" : "", plan_.micro_batches, plan_.B,
                    plan_.zero1 ? "; optimizer state sharded (ZeRO-1)" : ""));
  if (lay.pp_size == 1) return;
  // What each stage computes, and a split that balances them better when there is one: a small
  // model's lm head can outweigh several layers.
  say(fmt::format("pipeline stages: {}; the busiest does {:.0f}% of a step's work ({:.0f}% when balanced)",
                  plan_.pipeline_stages(), 100 * plan_.busiest_stage_share(plan_.pipeline_split), 100.0 / lay.pp_size));
  if (const std::vector<int> better = plan_.better_pipeline_split(); !better.empty())
    say(fmt::format("  hint: model.num_layers_in_first_pipeline_stage={} model.num_layers_in_last_pipeline_stage={} "
                    "would bring the busiest stage to {:.0f}%",
                    better.front(), better.back(), 100 * plan_.busiest_stage_share(better)));
}

void Trainer::make_model() {
  const model::LlamaConfig& mc = plan_.model;
  model_ = std::make_unique<model::LlamaModel>(mc, plan_.precision, uint64_t(cfg_.model.seed), plan_.shard, ranks_.tp,
                                               plan_.device);
  model_->set_recompute(plan_.recompute, plan_.recompute_layers);
  model_->set_activation_slots(plan_.slots);
  if (plan_.zero1) {
    shards_.emplace(size_t(model_->num_trainable()), plan_.layout.dp_size);
    const auto r = shards_->range(plan_.layout.dp_rank);
    model_->set_optimizer_shard(int64_t(r.begin), int64_t(r.end), int64_t(shards_->padded_size()));
  }
  const bool sharded = model_->is_sharded();
  const model::MemoryPlan& mem = plan_.memory;
  const int64_t vocab_rows = mc.padded_vocab_size(plan_.shard.tp_size);  // with the inert padding rows
  say(fmt::format(
      "model: {:.2f}M parameters{} (C {}, L {}, H {}, Hkv {}, F {}, V {}{}), {}, recompute {}, "
      "memory {} (state {} + activations {}{}{})",
      double(mc.num_params()) / 1e6,
      sharded ? fmt::format(", {:.2f}M on rank 0", double(model_->num_params()) / 1e6) : "", mc.dim, mc.n_layers,
      mc.n_heads, mc.n_kv_heads, mc.ffn_dim, mc.vocab_size,
      vocab_rows > mc.vocab_size ? fmt::format(" padded to {} rows", vocab_rows) : "",
      model::precision_name(plan_.precision), plan_.recompute_text(), obs::format_bytes(double(mem.total())),
      obs::format_bytes(double(mem.state)), obs::format_bytes(double(mem.activations)),
      mem.runtime > 0 ? " + GPU runtime " + obs::format_bytes(double(mem.runtime)) : "", sharded ? " on rank 0" : ""));
  if (const std::string frozen = freeze_summary(mc); !frozen.empty()) {  // model.freeze, over the whole model
    say("frozen: " + frozen);
    if (!mc.frozen_parts.empty())
      say("frozen parts have no AdamW moments but keep their gradient buffer: only whole tensors free both");
  }
}

// What changed in model.freeze since the checkpoint `saved` (its frozen tensors): one line for the
// tensors that train again (their optimizer state starts at zero), one for those frozen now (their
// optimizer state is dropped).
BatchLayout Trainer::batch_layout() const {
  return BatchLayout{cfg_.model.tensor_model_parallel_size, cfg_.model.pipeline_model_parallel_size,
                     int(cfg_.data_parallel_size()), cfg_.model.global_batch_size, cfg_.model.micro_batch_size};
}

// A resume under another layout (fewer nodes after one was lost, a new --nodes): the data-parallel
// ranks and the accumulation change, the global batch (and so the curve) does not; a new global batch
// changes the curve, and is said as such. (Older checkpoints do not record it: nothing is said.)
void Trainer::say_layout_changes(const BatchLayout& saved) {
  const BatchLayout now = batch_layout();
  const bool ranks_changed = saved.data_parallel > 0 && (saved.data_parallel != now.data_parallel ||
                                                         saved.tensor_parallel != now.tensor_parallel ||
                                                         saved.pipeline_parallel != now.pipeline_parallel);
  const bool batch_recorded = saved.global_batch_size > 0 && saved.micro_batch_size > 0;
  const bool global_changed = batch_recorded && saved.global_batch_size != now.global_batch_size;
  const bool micro_changed = batch_recorded && saved.micro_batch_size != now.micro_batch_size;
  if (ranks_changed)
    say(fmt::format("layout changed since the checkpoint: data {} x tensor {} x pipeline {} -> data {} x tensor {} x "
                    "pipeline {}",
                    saved.data_parallel, saved.tensor_parallel, saved.pipeline_parallel, now.data_parallel,
                    now.tensor_parallel, now.pipeline_parallel));
  if (batch_recorded && saved.accumulation() != now.accumulation())
    say(fmt::format(
        "gradient accumulation changed since the checkpoint: {} -> {} micro-batches of {} per data-parallel "
        "rank{}",
        saved.accumulation(), now.accumulation(), now.micro_batch_size,
        global_changed ? std::string() : fmt::format("; the global batch stays {} samples", now.global_batch_size)));
  if (global_changed)
    say(fmt::format("global batch changed since the checkpoint: {} -> {} samples (model.global_batch_size): the "
                    "run goes on with another batch, so its curve is not the one it would have had",
                    saved.global_batch_size, now.global_batch_size));
  if (!ranks_changed && !global_changed && !micro_changed) return;
  auto fields = [](const BatchLayout& l) {
    return nlohmann::ordered_json{{"dp", l.data_parallel},
                                  {"tp", l.tensor_parallel},
                                  {"pp", l.pipeline_parallel},
                                  {"global_batch_size", l.global_batch_size},
                                  {"micro_batch_size", l.micro_batch_size},
                                  {"accumulation", l.accumulation()}};
  };
  event("layout_changed", {{"from", fields(saved)}, {"to", fields(now)}});
}

void Trainer::say_freeze_changes(const std::vector<std::string>& saved) {
  const model::LlamaConfig& mc = plan_.model;
  std::vector<std::string> unfrozen, frozen;
  for (const std::string& t : saved)
    if (!mc.is_frozen(t)) unfrozen.push_back(io::hf_names_of(mc, t));
  for (const std::string& t : mc.frozen)
    if (std::find(saved.begin(), saved.end(), t) == saved.end()) frozen.push_back(io::hf_names_of(mc, t));
  if (!unfrozen.empty())
    say(fmt::format("unfrozen since the checkpoint (optimizer state starts at zero): {}", fmt::join(unfrozen, ", ")));
  if (!frozen.empty())
    say(fmt::format("frozen since the checkpoint (its optimizer state is dropped): {}", fmt::join(frozen, ", ")));
}

// The checkpoint to resume from, if any: an explicit one or the newest of this run that verifies.
// Rank 0 chooses and tells the others. What it finds wrong is returned, to be said after the first
// line: warnings (a damaged checkpoint skipped) and the error that stops the run.
std::optional<std::string> Trainer::find_resume(std::vector<std::string>* warnings, std::string* error) {
  std::optional<std::string> resume;
  if (!rank0()) {
  } else if (cfg_.model.resume_from_checkpoint) {
    const std::string why = verify_checkpoint(*cfg_.model.resume_from_checkpoint);
    if (!why.empty())
      *error =
          fmt::format("model.resume_from_checkpoint: {}\nhint: point it at a complete checkpoint folder (step_N)", why);
    else
      resume = *cfg_.model.resume_from_checkpoint;
  } else if (cfg_.exp_manager.resume_if_exists) {
    // The newest checkpoint that verifies (each file's size and CRC32C), newest first.
    const auto all = list_checkpoints(plan_.checkpoint_dir);
    std::vector<std::string> damaged;
    for (auto it = all.rbegin(); it != all.rend() && !resume; ++it) {
      IoProgress bar("verifying " + it->path, checkpoint_file_bytes(it->path));
      const std::string why = verify_checkpoint(it->path, bar.callback());
      if (why.empty())
        resume = it->path;
      else {
        warnings->push_back(fmt::format("warning: skipping checkpoint {}: {}", it->path, why));
        damaged.push_back(why);
      }
    }
    if (!resume && !damaged.empty())
      *error = all_checkpoints_damaged(plan_.checkpoint_dir, damaged);
    else if (!resume && !cfg_.exp_manager.resume_ignore_no_checkpoint)
      *error = fmt::format(
          "exp_manager.resume_if_exists: no usable checkpoint in {}, and resume_ignore_no_checkpoint is false\n"
          "hint: set exp_manager.resume_ignore_no_checkpoint=true to start fresh",
          plan_.checkpoint_dir);
  }
  if (ranks_.world) {
    LongWait wait(ranks_.world, long_wait_s_, "rank 0 verifying checkpoints");
    // (on an error rank 0 stops the job; the others wait at the next collective until then)
    const std::string chosen = from_rank0(ranks_.world, resume.value_or(""));
    resume = chosen.empty() ? std::nullopt : std::optional<std::string>(chosen);
  }
  return resume;
}

// A checkpoint of this run (find_resume), model.init_from, or random weights.
void Trainer::choose_starting_point(const std::optional<std::string>& resume) {
  st_.seed = uint64_t(cfg_.model.seed);
  st_.precision = model::precision_name(plan_.precision);
  st_.layout = batch_layout();
  const double t0 = now_s();
  if (resume) {
    check_resume_tokenizer(*resume);
    say(fmt::format("resuming from {} ...", *resume));
    IoProgress bar("loading checkpoint", rank0() ? checkpoint_tensor_bytes(*model_) : 0);
    st_ = load_checkpoint(*resume, *model_, bar.callback());
    say_freeze_changes(st_.frozen);
    say_layout_changes(st_.layout);
    st_.layout = batch_layout();  // this run's, for its checkpoints
    say(fmt::format("resumed at step {} ({} samples consumed) in {}", st_.step, st_.consumed_samples,
                    obs::format_duration(now_s() - t0)));
    event("checkpoint_loaded", {{"step", st_.step}, {"path", *resume}, {"consumed_samples", st_.consumed_samples}});
  } else if (cfg_.model.init_from) {
    say(fmt::format("loading weights from {} ...", *cfg_.model.init_from));
    int64_t bytes = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(*cfg_.model.init_from, ec))
      if (e.path().extension() == ".safetensors") bytes += int64_t(e.file_size(ec));
    if (model_->is_sharded())  // a model-parallel rank reads its part only (the files' dtype: about their share)
      bytes = int64_t(double(bytes) * double(model_->num_params()) / double(plan_.model.num_params()));
    IoProgress bar("loading " + *cfg_.model.init_from, rank0() ? bytes : 0);
    io::load_hf_weights(*model_, *cfg_.model.init_from, bar.callback(), &plan_.growth);
    say(fmt::format("loaded in {}", obs::format_duration(now_s() - t0)));
    if (plan_.growth.active()) say(plan_.growth.describe());
  } else {
    const float std_ = float(cfg_.model.init_method_std);
    model_->init_random(std_, cfg_.model.use_scaled_init_method ? std_ / std::sqrt(2.0f * plan_.model.n_layers) : 0.0f);
  }
}

// A checkpoint keeps the tokenizer it was trained with (tokenizer.model or tokenizer.json): resuming
// with another one, even of as many pieces, would read the data's ids as other text. Checkpoints
// written without one are not checked.
void Trainer::check_resume_tokenizer(const std::string& resume) const {
  if (plan_.tokenizer_path.empty()) return;
  for (const auto& f : io::tokenizer_source_files(plan_.tokenizer_path)) {
    if (f.name != "tokenizer.model" && f.name != "tokenizer.json") continue;
    const fs::path saved = fs::path(resume) / f.name;
    if (!fs::is_regular_file(saved)) continue;
    if (read_small_file(saved.string(), size_t(1) << 31, "the checkpoint's tokenizer") == f.bytes) continue;
    fail_as("config",
            "model.tokenizer.model: {} is not the tokenizer checkpoint {} was trained with ({}), expected the same "
            "one to resume\nhint: resume with model.tokenizer.model={}; to go on with another tokenizer, start a new "
            "run from the checkpoint's weights (model.init_from=EXPORT, a Hugging Face export of it, and a tokenizer "
            "that extends its own)",
            plan_.tokenizer_path, resume, saved.string(), saved.string());
  }
}

// Rank 0 builds (and caches) the sample indices first; the others then read them from the cache.
void Trainer::open_data() {
  const auto requested = data::requested_num_samples(cfg_.trainer.max_steps, plan_.global_batch,
                                                     std::max<int64_t>(1, cfg_.trainer.val_check_interval),
                                                     cfg_.trainer.limit_val_batches, cfg_.trainer.limit_test_batches);
  say("data: building sample indices ...");
  const double t0 = now_s();
  const data::Tokenizer* tok = plan_.tokenizer.get();
  if (rank0()) data_.emplace(cfg_, tok, plan_.model.eos_id, requested, plan_.model.vocab_size);
  if (ranks_.world) {
    LongWait wait(ranks_.world, long_wait_s_, "rank 0 building the sample indices");
    ranks_.world->barrier();
  }
  if (!rank0()) data_.emplace(cfg_, tok, plan_.model.eos_id, requested, plan_.model.vocab_size);
  std::string desc = data_->describe();
  if (!desc.empty() && desc.back() == '\n') desc.pop_back();
  say(fmt::format("data ready in {}:\n{}", obs::format_duration(now_s() - t0), desc));
  validate_ =
      cfg_.trainer.val_check_interval > 0 && cfg_.trainer.limit_val_batches > 0 && data_->has(data::Split::valid);
  if (validate_ && tok)
    piece_lengths_ = data::piece_lengths(*tok);
  else if (validate_)
    say("validation: bits per byte and per character left out: the run has no tokenizer (model.tokenizer.model)");
}

// The step's buffers, and with plain data parallelism the bucketed all-reduce of the gradients,
// overlapped with the backward of each step's last micro-batch (model.optim.overlap_grad_sync) in
// the order the backward completes them.
void Trainer::prepare_steps() {
  const size_t n = size_t(plan_.B) * plan_.T;
  batches_.assign(size_t(plan_.slots), data_->micro_batch(plan_.B));
  CHECK(batches_[0].tokens.size() == n);
  if (ranks_.dp && !plan_.zero1 && model_->backend().host_memory()) {  // (a device's: staged, reduce_gradients)
    std::vector<parallel::GradRange> order;
    if (cfg_.model.overlap_grad_sync)
      for (const auto& [b, e] : model_->grad_ready_order()) order.push_back({size_t(b), size_t(e)});
    reducer_.emplace(*ranks_.dp, model_->grad_data(), size_t(model_->num_trainable()), kDpBucketElements, order);
  }
  if (ranks_.dp && !model_->backend().host_memory()) {
    std::string why_not;
    gpu_dp_ = model::make_gpu_collectives(*ranks_.dp, &why_not);
    say(gpu_dp_ ? fmt::format("data parallel on GPUs: gradients are summed by {} on the GPUs, after the backward's "
                              "kernels on the same stream",
                              gpu_dp_->describe())
                : fmt::format("data parallel on GPUs: gradients are summed through host memory over MPI after the "
                              "backward, {} at a time{}",
                              obs::format_bytes(double(model::Kernels::host_piece_bytes())), why_not));
  }
  t_last_ckpt_ = t_log_ = now_s();
  comm_mark_ = parallel::blocked_seconds();
}

// ---- one step ----

StepResult Trainer::train_step() {
  const double t0 = now_s();
  StepResult s;
  s.step = st_.step + 1;
  s.lr = sched_->lr(st_.step);
  if (embedding_lr_scale_ >= 0) s.embedding_lr = s.lr * embedding_lr_scale_;
  steps_run_++;
  model_->zero_grad();
  // (fault injection: a NaN the backward accumulates into, reduced to every rank like any gradient)
  if (faults_.nonfinite_at(s.step) && rank0()) model_->backend().set(model_->grad_arena(), NAN);
  const double loss_sum = micro_batches();
  // Sums over the model-parallel copies of a parameter (SP norm weights, the tied embedding).
  model_->reduce_model_parallel_grads(plan_.layout.pp_size > 1 ? ranks_.groups.embedding.get() : nullptr);
  s.first_sample = st_.consumed_samples;
  st_.consumed_samples += plan_.global_batch;
  s.loss = dp_mean(ranks_.dp, loss_sum / double(plan_.micro_batches));
  s.grad_norm = reduce_gradients();
  st_.step = s.step;
  if (s.finite()) {
    nonfinite_run_ = 0;
    st_.optimizer_steps++;
    model_->optimizer_update(opt_, float(s.lr), int(st_.optimizer_steps), s.grad_norm, float(s.embedding_lr));
    if (plan_.zero1) {  // every rank's updated shard to every rank, then the bf16 copies from the fp32 weights
      if (model_->backend().host_memory())
        parallel::all_gather_parameters(*ranks_.dp, model_->trainable_param_data(), *shards_);
      else if (gpu_dp_)
        gpu_dp_->all_gather(model_->param_arena() + model_->num_frozen(), int64_t(shards_->shard_size()));
      else
        parallel::all_gather_parameters(*ranks_.dp,
                                        staged(model_->param_arena() + model_->num_frozen(), shards_->padded_size()),
                                        *shards_, staged_piece());
      model_->params_changed();
    }
  }
  s.seconds = now_s() - t0;
  return s;
}

// Forward and backward of this rank's micro-batches (down the pipeline with 1F1B); the sum of their losses.
double Trainer::micro_batches() {
  const int B = plan_.B, T = plan_.T;
  const int64_t num_micro = plan_.micro_batches;
  const float scale = 1.0f / float(num_micro);
  // Megatron's consumption order: block mb holds B x DP samples, this rank reads its B of them.
  auto fill = [&](int64_t mb, int slot) {
    MicroBatch& m = batches_[size_t(slot)];
    data_->fill(data::Split::train, st_.consumed_samples + (mb * plan_.layout.dp_size + plan_.layout.dp_rank) * B, m);
    seqs_since_log_ += B;
    real_since_log_ += double(m.real_tokens);
    seqs_run_ += B;
    real_run_ += double(m.real_tokens);
    pairs_since_log_ += m.attention_pairs;
  };
  // The backward of the step's last micro-batch starts the overlapped all-reduce of finished buckets.
  auto last_micro_batch = [&](bool last) {
    if (!reducer_ || !cfg_.model.overlap_grad_sync) return;
    if (last)
      model_->set_grad_ready_hook([&](int64_t b, int64_t e) { reducer_->ready(size_t(b), size_t(e)); });
    else
      model_->set_grad_ready_hook({});
  };
  double loss_sum = 0;
  if (!ranks_.pp) {
    for (int64_t mb = 0; mb < num_micro; mb++) {
      fill(mb, 0);
      last_micro_batch(mb == num_micro - 1);
      const MicroBatch& m = batches_[0];
      loss_sum += model_->forward_backward(m.tokens.data(), m.targets.data(), B, T, scale, m.documents()).loss;
    }
  } else {
    parallel::PipelineStage stage;
    stage.forward = [&](int mb, int slot, const float* input) {
      fill(mb, slot);
      const MicroBatch& m = batches_[size_t(slot)];
      model_->stage_forward(slot, m.tokens.data(), input, B, T, m.documents());
    };
    stage.output = [&](int slot) { return model_->stage_output(slot); };
    stage.backward = [&](int mb, int slot, const float* doutput) {
      last_micro_batch(mb == num_micro - 1);
      const MicroBatch& m = batches_[size_t(slot)];
      loss_sum += model_->stage_backward(slot, m.tokens.data(), m.targets.data(), doutput, scale).loss;
    };
    stage.input_grad = [&] { return model_->stage_input_grad(); };
    parallel::run_1f1b(*ranks_.pp, int(num_micro), size_t(model_->stage_tokens(B, T) * plan_.model.dim), stage);
    ranks_.pp->all_reduce(&loss_sum, 1);  // the last stage's losses, on every stage
  }
  last_micro_batch(false);
  return loss_sum;
}

// Gradients: the mean over the data-parallel ranks (ZeRO-1: of this rank's shard only). The global
// norm: each rank's part (its ZeRO-1 shard, or all its tensors), summed over the model's ranks (and
// over the data-parallel shards under ZeRO-1).
float Trainer::reduce_gradients() {
  double sq;
  const bool host = model_->backend().host_memory();
  if (plan_.zero1) {
    if (host)
      parallel::reduce_scatter_gradients(*ranks_.dp, model_->grad_data(), *shards_);
    else if (gpu_dp_)
      gpu_dp_->mean(model_->grad_arena(), int64_t(shards_->padded_size()));
    else
      parallel::all_reduce_gradients(*ranks_.dp, staged(model_->grad_arena(), shards_->padded_size()), staged_piece());
    model_->zero_frozen_grads();
    sq = model_->grad_sum_squares(model_->shard_begin(), model_->shard_end());
    ranks_.world->all_reduce(&sq, 1);
  } else {
    if (reducer_) reducer_->finish();
    if (ranks_.dp && !host && gpu_dp_)
      gpu_dp_->mean(model_->grad_arena(), model_->num_trainable());
    else if (ranks_.dp && !host)
      parallel::all_reduce_gradients(*ranks_.dp, staged(model_->grad_arena(), size_t(model_->num_trainable())),
                                     staged_piece());
    model_->zero_frozen_grads();
    sq = model_->grad_sum_squares(0, model_->num_trainable());
    if (ranks_.mp) ranks_.mp->all_reduce(&sq, 1);
  }
  return float(std::sqrt(sq));
}

parallel::StagedArena Trainer::staged(float* p, size_t n) const { return model::staged_arena(model_->backend(), p, n); }

// ---- a non-finite step: skipped; after K in a row, the last checkpoint back and its data window skipped ----

bool Trainer::skip(const StepResult& s) {
  st_.skipped_steps++;
  nonfinite_run_++;
  const int64_t limit = std::max<int64_t>(1, cfg_.trainer.max_consecutive_nonfinite);
  say(fmt::format("step {}: loss {:.4f} / grad norm {:.4f} is not finite: update skipped (samples {}-{}; {} in a row, "
                  "rollback after {})",
                  s.step, s.loss, s.grad_norm, s.first_sample, st_.consumed_samples - 1, nonfinite_run_, limit));
  event("skip", {{"step", s.step},
                 {"loss", s.loss},
                 {"grad_norm", s.grad_norm},
                 {"samples", {s.first_sample, st_.consumed_samples - 1}},
                 {"in_a_row", nonfinite_run_},
                 {"rollback_after", limit}});
  if (nonfinite_run_ < limit) return false;
  rollback(s);
  return true;
}

void Trainer::rollback(const StepResult& s) {
  finish_save(true);  // a save in flight holds a good state (it was taken before the divergence)
  std::vector<std::string> warnings;
  std::optional<CheckpointInfo> ck;
  if (rank0()) ck = latest_valid_checkpoint(plan_.checkpoint_dir, &warnings);
  for (const auto& w : warnings) say("warning: " + w);
  if (ranks_.world) {
    LongWait wait(ranks_.world, long_wait_s_, "rank 0 verifying checkpoints");
    const std::string chosen = from_rank0(ranks_.world, ck ? ck->path : "");
    if (!chosen.empty()) ck = CheckpointInfo{chosen, 0};
  }
  if (!ck)
    fail_as("nonfinite",
            "training diverged: {} steps in a row had a non-finite loss or gradient norm (up to step {}), and "
            "there is no checkpoint to roll back to\nhint: lower model.optim.lr or raise warmup, check the data, "
            "or save checkpoints earlier (exp_manager.checkpoint_callback_params.every_n_train_steps)",
            nonfinite_run_, s.step);
  const int64_t budget = cfg_.trainer.max_consecutive_rollbacks;
  if (budget == 0)
    fail_as("divergence",
            "training diverged: {} non-finite steps in a row up to step {}, and rollbacks are off "
            "(trainer.max_consecutive_rollbacks=0)\nhint: resume from {} with a lower model.optim.lr or a longer "
            "warmup, and check the data after sample {}",
            nonfinite_run_, s.step, ck->path, s.first_sample);
  if (rollbacks_since_save_ >= budget)
    fail_as("divergence",
            "training keeps diverging: {} non-finite steps in a row up to step {}, after {} rollback{} to {} with no "
            "checkpoint saved since (trainer.max_consecutive_rollbacks={}); the checkpoints are as they were\nhint: "
            "resume from {} with a lower model.optim.lr or a longer warmup, and check the data after sample {}",
            nonfinite_run_, s.step, rollbacks_since_save_, rollbacks_since_save_ == 1 ? "" : "s", ck->path, budget,
            ck->path, s.first_sample);
  rollbacks_since_save_++;
  const TrainerState keep = st_;
  st_ = load_checkpoint(ck->path, *model_);
  say(fmt::format("rollback: {} non-finite steps in a row; restored {} (step {}); steps {}-{} discarded and "
                  "samples {}-{} skipped",
                  nonfinite_run_, ck->path, st_.step, st_.step + 1, s.step, st_.consumed_samples,
                  keep.consumed_samples - 1));
  log_->rollback(s.step, st_.step, st_.consumed_samples, keep.consumed_samples);
  event("rollback", {{"from_step", s.step},
                     {"to_step", st_.step},
                     {"checkpoint", ck->path},
                     {"skipped_samples", {st_.consumed_samples, keep.consumed_samples - 1}}});
  st_.consumed_samples = keep.consumed_samples;
  st_.skipped_steps = keep.skipped_steps;
  st_.rollbacks = keep.rollbacks + 1;
  st_.layout = keep.layout;  // (a checkpoint of an earlier start may have had another)
  st_.train_seconds = keep.train_seconds;
  nonfinite_run_ = 0;
}

// ---- the record, validation, checkpoints, the export ----

void Trainer::record(const StepResult& s) {
  StepRecord r;
  r.step = st_.step;
  r.max_steps = cfg_.trainer.max_steps;
  r.loss = s.loss;
  r.lr = s.lr;
  r.embedding_lr = s.embedding_lr;
  r.grad_norm = s.grad_norm;
  r.consumed_samples = st_.consumed_samples;
  r.step_s = (now_s() - t_log_) / double(steps_since_log_);
  r.seq_per_s = double(plan_.global_batch) / r.step_s;
  // Padding and packed documents: the fractions of the full sequences' tokens and attention pairs
  // this rank's samples hold as text (1 and 1 for full sequences of one document each).
  const double T = plan_.T;
  const double real_fraction = seqs_since_log_ > 0 ? real_since_log_ / (seqs_since_log_ * T) : 1.0;
  const double pair_fraction = seqs_since_log_ > 0 ? pairs_since_log_ / (seqs_since_log_ * T * T / 2) : 1.0;
  r.tokens_per_s = r.seq_per_s * T * real_fraction;
  const double flops = real_fraction == 1.0 && pair_fraction == 1.0
                           ? flops_per_step_
                           : obs::step_flops_of(plan_.model, double(plan_.global_batch) * T * real_fraction,
                                                double(plan_.global_batch) * T * T / 2 * pair_fraction);
  seqs_since_log_ = real_since_log_ = pairs_since_log_ = 0;
  // A peak probed while the machine was busy can be below what the steps then reach: the peak is at
  // least the rate achieved, so MFU never exceeds 100%.
  if (const double achieved = flops / r.step_s / 1e9; achieved > peak_gflops_) {
    say(fmt::format("  note: the steps reach {:.1f} GFLOP/s, above the {:.1f} GFLOP/s the matmul probe measured at "
                    "the start (the machine was busy then?): MFU is taken against the higher rate from now on",
                    achieved, peak_gflops_));
    peak_gflops_ = achieved;
  }
  r.mfu = obs::mfu(flops, r.step_s, peak_gflops_ * 1e9);
  r.comm_s = (parallel::blocked_seconds() - comm_mark_) / double(steps_since_log_);
  r.peak_rss = peak_rss_bytes();
  r.device_memory = double(model::device_memory_used(plan_.device));  // (-1 on a CPU)
  r.eta_s = step_times_.eta_s(r.max_steps - st_.step);
  log_->step(r);
  t_log_ = now_s();
  steps_since_log_ = 0;
  comm_mark_ = parallel::blocked_seconds();
}

void Trainer::validate() {
  const double t0 = now_s(), blocked0 = parallel::blocked_seconds();
  const EvalLoss val =
      evaluate_loss(*model_, *data_, data::Split::valid, cfg_.trainer.limit_val_batches, plan_.global_batch, plan_.B,
                    ranks_.dp, ranks_.pp, piece_lengths_ ? &*piece_lengths_ : nullptr);
  result_.last_val_loss = val.loss;
  auto record = [&](const EvalLoss& e) {
    ValidationRecord v;
    v.step = st_.step;
    v.batches = cfg_.trainer.limit_val_batches;
    v.name = e.name;
    v.loss = e.loss;
    v.has_text = piece_lengths_.has_value();
    v.bits_per_byte = e.bits_per_byte();
    v.bits_per_char = e.bits_per_char();
    v.tokens = e.tokens, v.bytes = e.bytes, v.chars = e.chars;
    return v;
  };
  ValidationRecord v = record(val);
  for (const EvalLoss& s : val.sources) v.sources.push_back(record(s));
  v.seconds = now_s() - t0;
  log_->validation(v);
  t_log_ += now_s() - t0;  // validation time is not step time
  comm_mark_ += parallel::blocked_seconds() - blocked0;
}

// Every N steps or seconds, at the end, and on a stop signal.
void Trainer::maybe_save(bool stop) {
  if (!cfg_.exp_manager.create_checkpoint_callback) return;
  const auto& ckp = cfg_.exp_manager.checkpoint_callback_params;
  const bool by_steps =
      ckp.every_n_train_steps && *ckp.every_n_train_steps > 0 && st_.step % *ckp.every_n_train_steps == 0;
  const bool by_time = ckp.train_time_interval && now_s() - t_last_ckpt_ >= *ckp.train_time_interval;
  const bool last = st_.step == cfg_.trainer.max_steps;
  if (!(by_steps || by_time || last || stop)) return;
  // The last save and a signal's are waited for anyway: those write in place.
  save(stop       ? "stop signal"
       : last     ? "end"
       : by_steps ? "every_n_train_steps"
                  : "train_time_interval",
       async_save_ && !stop && !last);
  t_last_ckpt_ = t_log_ = now_s();
  comm_mark_ = parallel::blocked_seconds();
}

// A save: the state copied or referenced (collective), its files written, then committed. Behind the
// steps (async_save), the writing runs on a thread from host copies and finish_save commits it.
void Trainer::save(const char* why, bool behind) {
  finish_save(true);  // one save at a time
  const char* context = context_;
  context_ = "checkpoint";
  const double t0 = now_s();
  const std::string why_wait = fmt::format("rank 0 writing checkpoint step_{}", st_.step);
  std::unique_ptr<CheckpointSave> s;
  {
    LongWait wait(ranks_.world, long_wait_s_, why_wait), wait_mp(ranks_.mp, long_wait_s_, why_wait);
    s = std::make_unique<CheckpointSave>(plan_.checkpoint_dir, *model_, st_, plan_.tokenizer_path, config_yaml_,
                                         SaveGroups{ranks_.world, ranks_.mp, plan_.layout}, behind, spare_.get());
    spare_.reset();
  }
  if (behind) {
    pending_ = std::move(s);
    pending_why_ = why;
    pending_t0_ = t0;
    pending_pause_ = now_s() - t0;
    writer_ = std::async(std::launch::async, [save = pending_.get()] {
#ifdef _OPENMP
      omp_set_num_threads(1);  // the cores are the steps': the writer waits on the disk, not on them
#endif
      save->write();
    });
  } else {
    {
      IoProgress bar("saving checkpoint", rank0() ? checkpoint_tensor_bytes(*model_, true) : 0);
      s->write(bar.callback());
    }
    commit_save(*s, why, t0, -1);
  }
  context_ = context;
}

// Commits the save written behind the steps: when every rank's part is written (checked collectively;
// nothing when none is in flight), or after waiting for it (`wait`).
void Trainer::finish_save(bool wait) {
  if (!pending_) return;
  if (!wait) {
    double writing = pending_->done() ? 0 : 1;
    if (ranks_.world) ranks_.world->all_reduce(&writing, 1);
    if (writing != 0) return;
  } else if (!pending_->done()) {
    say(fmt::format("waiting for checkpoint step_{} to be written", pending_->step()));
  }
  writer_.wait();
  std::unique_ptr<CheckpointSave> s = std::move(pending_);  // not pending, whatever the commit does
  const char* context = context_;
  context_ = "checkpoint";
  commit_save(*s, pending_why_, pending_t0_, pending_pause_);
  context_ = context;
  spare_ = std::move(s);
}

// pause: how long training stopped for a save written behind it (< 0: it stopped for all of it).
void Trainer::commit_save(CheckpointSave& save, const char* why, double t0, double pause) {
  std::string path;
  {
    LongWait wait(ranks_.world, long_wait_s_, fmt::format("rank 0 committing checkpoint step_{}", save.step()));
    path = save.commit();
  }
  rollbacks_since_save_ = 0;  // a new good state: the divergence budget starts again
  result_.last_checkpoint = path;
  if (!rank0()) return;
  int64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(path)) bytes += int64_t(e.file_size());
  const auto removed =
      prune_checkpoints(plan_.checkpoint_dir, int(cfg_.exp_manager.checkpoint_callback_params.save_top_k));
  const double dt = now_s() - t0;
  const std::string behind =
      pause < 0 ? ""
                : fmt::format(", written behind training: paused {} to copy {}", obs::format_duration(pause),
                              obs::format_bytes(double(save.copy_bytes())));
  say(fmt::format("checkpoint ({}): {} ({}, {}, {}/s{}){}", why, path, obs::format_bytes(double(bytes)),
                  obs::format_duration(dt), obs::format_bytes(bytes / std::max(dt, 1e-9)), behind,
                  removed.empty() ? "" : fmt::format("; removed {} older", removed.size())));
  nlohmann::ordered_json fields{
      {"step", save.step()}, {"path", path}, {"reason", why}, {"bytes", bytes}, {"seconds", dt}};
  if (pause >= 0) fields["pause_seconds"] = pause;
  event("checkpoint_saved", std::move(fields));
}

// One replica's weights gathered onto rank 0 (the same bytes whatever the layout), exported there.
void Trainer::export_hf() {
  context_ = "export";
  std::unique_ptr<model::LlamaModel> whole;
  if (model_->is_sharded() && plan_.layout.dp_rank == 0) {
    LongWait wait(ranks_.mp, long_wait_s_, "rank 0 exporting");
    whole = gather_full_weights(*model_, *ranks_.mp);
  }
  if (!rank0()) return;
  model::LlamaModel& out = whole ? *whole : *model_;
  const bool fp32 = plan_.precision == model::Precision::fp32;
  const double t0 = now_s();
  io::ExportOptions eo;
  eo.torch_dtype = fp32 ? "float32" : "bfloat16";
  eo.tokenizer_model = plan_.tokenizer_path;
  if (cfg_.model.init_from) eo.source_dir = *cfg_.model.init_from;
  IoProgress bar("exporting", out.num_params() * (fp32 ? 4 : 2));
  eo.progress = bar.callback();
  say(fmt::format("exporting Hugging Face checkpoint to {} ...", plan_.export_dir));
  const auto rep = io::export_hf(out, plan_.export_dir, eo);
  say(fmt::format("exported {} ({}, {} shard{}) in {}; reloaded and checked: max logit difference {:.2g} "
                  "(bound {:.2g}); generation_config.json {}",
                  rep.dir, obs::format_bytes(double(rep.bytes)), rep.num_shards, rep.num_shards == 1 ? "" : "s",
                  obs::format_duration(now_s() - t0), rep.max_abs_logit_diff, rep.tolerance, rep.generation_config));
  result_.hf_export = rep.dir;
  event("export", {{"path", rep.dir}, {"bytes", rep.bytes}, {"shards", rep.num_shards}});
}

}  // namespace

EvalLoss evaluate_loss(model::LlamaModel& m, const TrainData& data, data::Split split, int64_t batches,
                       int64_t global_batch_size, int micro_batch_size, parallel::Communicator* dp,
                       parallel::Communicator* pp, const data::PieceLengths* lengths) {
  const int B = micro_batch_size, T = int(data.seq_length());
  const int ranks = dp ? dp->size() : 1, rank = dp ? dp->rank() : 0;
  MicroBatch batch = data.micro_batch(B);
  const std::vector<int32_t>& tokens = batch.tokens;
  const std::vector<int32_t>& targets = batch.targets;
  // {nats, scored targets, bytes, characters} of the whole, then of each source: exact in doubles
  const std::vector<std::string>& names = data.sources(split);
  std::vector<double> sums(4 * (1 + names.size()), 0.0);
  std::vector<double> rows(size_t(B), 0.0);
  auto add = [&](const model::StepStats& st) {                                // one micro-batch's loss over `targets`
    if (st.num_valid > 0) sums[0] += double(st.loss) * double(st.num_valid);  // its mean, back to its sum
    sums[1] += double(st.num_valid);
    if (lengths) {
      const data::TextSums text = lengths->sum(targets.data(), int64_t(B) * T);
      sums[2] += double(text.bytes);
      sums[3] += double(text.chars);
    }
    if (names.empty()) return;
    m.sequence_loss_sums(rows.data());
    for (int b = 0; b < B; b++) {  // each sequence to its source
      double* s = &sums[4 * size_t(1 + batch.source[size_t(b)])];
      const int32_t* row = targets.data() + int64_t(b) * T;
      s[0] += rows[size_t(b)];
      s[1] += double(std::count_if(row, row + T, [](int32_t t) { return t >= 0; }));
      if (lengths) {
        const data::TextSums text = lengths->sum(row, T);
        s[2] += double(text.bytes);
        s[3] += double(text.chars);
      }
    }
  };
  int64_t count = 0;
  const int64_t micro = global_batch_size / (int64_t(B) * ranks);  // this rank's micro-batches per batch
  for (int64_t b = 0; b < batches; b++) {
    // Megatron's order: block mb of B x ranks samples, this rank's B of them.
    auto fill = [&](int64_t mb) { data.fill(split, b * global_batch_size + (mb * ranks + rank) * B, batch); };
    if (!pp) {
      for (int64_t mb = 0; mb < micro; mb++) {
        fill(mb);
        add(m.forward(tokens.data(), targets.data(), B, T, batch.documents()));
      }
    } else {
      // Forward only down the pipeline; the last stage has the losses.
      parallel::PipelineStage stage;
      stage.forward = [&](int mb, int slot, const float* input) {
        fill(mb);
        m.stage_forward(slot, tokens.data(), input, B, T, batch.documents());
        if (m.plan().last_stage()) add(m.stage_loss(slot, targets.data()));
      };
      stage.output = [&](int slot) { return m.stage_output(slot); };
      parallel::run_forward_only(*pp, int(micro), size_t(m.stage_tokens(B, T) * m.config().dim), stage);
    }
    count += micro;
  }
  if (pp) pp->all_reduce(sums.data(), sums.size());  // only the last stage's are not 0
  EvalLoss r;
  if (count == 0) return r;
  if (dp) dp->all_reduce(sums.data(), sums.size());  // every rank's targets
  auto figures = [&](size_t k) {
    const double* s = &sums[4 * k];
    EvalLoss e;
    e.loss = s[1] > 0 ? s[0] / s[1] : NAN;
    e.loss_sum = s[0];
    e.tokens = int64_t(s[1]);
    e.bytes = int64_t(s[2]);
    e.chars = int64_t(s[3]);
    return e;
  };
  r = figures(0);
  for (size_t k = 0; k < names.size(); k++) {
    r.sources.push_back(figures(1 + k));
    r.sources.back().name = names[k];
  }
  return r;
}

// A failure prints its error event before it leaves: rank 0 on its console (stdout and
// train_log.txt), the other ranks on stderr with their rank. (The catches are by type so that each
// rethrow keeps it for main's messages.)
TrainResult run_training(const TrainConfig& config, const std::vector<std::string>& notes,
                         parallel::Communicator* world, const RunCommand& command, const InjectedFaults& faults) {
  std::optional<Trainer> trainer;
  auto report = [&](const std::exception& e) {
    const int rank = trainer ? trainer->rank() : world ? world->rank() : 0;
    const std::string code = error_code(e, trainer ? trainer->context() : "config");
    const std::string message =
        dynamic_cast<const std::bad_alloc*>(&e) ? "out of memory: an allocation failed" : e.what();
    if (trainer && rank == 0)
      trainer->console().event(error_event(code, message, rank));
    else  // before the start event (the plan failed): how to run it again, once fixed
      print_error_event(
          code, message, rank,
          trainer ? nlohmann::ordered_json::object() : command_fields(command, world ? world->size() : 1));
  };
  try {
    trainer.emplace(config, notes, command, world, faults);
    return trainer->run();
  } catch (const Error& e) {
    report(e);
    throw;
  } catch (const std::bad_alloc& e) {
    report(e);
    throw;
  } catch (const std::filesystem::filesystem_error& e) {
    report(e);
    throw;
  } catch (const std::exception& e) {  // a library's exception: named by the step it came from
    report(e);
    throw;
  }
}

}  // namespace llamatrain::train
