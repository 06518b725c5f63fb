// `llamatrain bench`: times training steps (forward + backward + AdamW) on random tokens and prints
// tokens/s, achieved GFLOP/s, MFU against a oneDNN matmul measured in the same process at the model's
// largest matmul shape, and peak RSS against the analytic memory. Figures, not tests: compare runs
// side by side (bench/compare_pytorch.sh), never a lone absolute number.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/file.h"
#include "core/memory.h"
#include "core/rng.h"
#include "io/hf_checkpoint.h"
#include "io/hf_config.h"
#include "model/machine.h"
#include "model/llama.h"
#include "model/memory.h"
#include "obs/throughput.h"

namespace llamatrain::cli {

namespace {

struct BenchOptions {
  std::string model = "stories15m";
  int seq = 256;
  int batch = 8;
  std::string precision = "bf16-mixed";
  std::string device = "cpu";
  std::string recompute = "none";
  int steps = 5;
  bool json = false;
  std::vector<std::string> freeze;  // HF name patterns of tensors that do not train (model.freeze)
};

model::TrainingShape shape_of(model::Precision p, int B, int T, model::Device d,
                              model::Recompute r = model::Recompute::none) {
  model::TrainingShape s{p, B, T, r};
  s.device = d;
  return s;
}

// Bytes a training job needs (model::MemoryPlan), the operand form the known choice, else the larger
// (no probe: this only sizes hints).
int64_t job_bytes(const model::LlamaConfig& c, model::Precision p, int B, int T, model::Device d) {
  return model::MemoryPlan::for_check(c, model::ShardPlan::single(c), shape_of(p, B, T, d), -1).total();
}

// The changes of one option that would make the job fit in `avail` bytes, each checked by
// recomputing the job's size (largest batch, largest sequence length, bf16-sr state).
std::string fitting_changes(const model::LlamaConfig& c, model::Precision p, int B, int T, int64_t avail,
                            model::Device d) {
  auto largest = [&](int hi, auto need) {  // largest v in [1, hi] with need(v) <= avail, or 0
    int lo = 0;
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (need(mid) <= avail)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  };
  std::vector<std::string> ways;
  if (const int b = largest(B - 1, [&](int v) { return job_bytes(c, p, v, T, d); }); b > 0)
    ways.push_back(fmt::format("--batch {} (or less)", b));
  if (const int t = largest(T - 1, [&](int v) { return job_bytes(c, p, B, v, d); }); t > 0)
    ways.push_back(fmt::format("--seq {} (or less)", t));
  if (p != model::Precision::bf16_sr && job_bytes(c, model::Precision::bf16_sr, B, T, d) <= avail)
    ways.push_back(fmt::format(
        "--precision bf16-sr (bf16 weights and Adam states: {:.1f} GB of state instead of "
        "{:.1f} GB)",
        model::LlamaModel::state_bytes(c, model::Precision::bf16_sr) / 1e9,
        model::MemoryPlan::for_check(c, model::ShardPlan::single(c), shape_of(p, B, T, d), -1).state / 1e9));
  if (!ways.empty()) return fmt::format("{}; or pick a smaller model", fmt::join(ways, "; or "));
  const int64_t smallest = std::min(job_bytes(c, p, 1, 1, d), job_bytes(c, model::Precision::bf16_sr, 1, 1, d));
  if (smallest > avail)
    return fmt::format("no batch, sequence length or precision fits: even batch 1 x seq 1 needs {:.1f} GB; pick a "
                       "smaller model or a machine with more memory",
                       smallest / 1e9);
  return "lower --batch and --seq together (no single change is enough), or pick a smaller model";
}

// The model's shape from --model (a preset, or a Hugging Face folder or config.json), with the
// run's sequence length and the tensors --freeze names.
model::LlamaConfig bench_config(const BenchOptions& o) {
  model::LlamaConfig cfg =
      is_directory(o.model) || o.model.ends_with(".json") ? io::read_hf_config(o.model) : model::preset_config(o.model);
  if (int64_t(o.batch) * o.seq > std::numeric_limits<int32_t>::max())
    fail("--batch {} x --seq {}: {} tokens per step, expected at most {}", o.batch, o.seq, int64_t(o.batch) * o.seq,
         std::numeric_limits<int32_t>::max());
  cfg.max_seq_len = std::max(cfg.max_seq_len, o.seq);
  const io::FreezeSet frozen = io::resolve_freeze(cfg, o.freeze, "--freeze");
  cfg.frozen = frozen.tensors;
  cfg.frozen_parts = frozen.parts;
  return cfg;
}

// What the run measured, for the printers.
struct BenchResult {
  double median = 0;  // seconds per step
  double tokens_per_s = 0;
  double gflops = 0;                           // achieved: the step's FLOPs over its time
  double peak_gflops = 0;                      // the lm head's matmul alone
  double rss = 0;                              // peak RSS, bytes
  double analytic = 0;                         // the memory plan's total, bytes
  double device_bytes = -1, device_base = -1;  // a GPU's memory in use after the steps and before the model
  int64_t params = 0, trainable = 0;
  bool float_operands = false;
};

// The median time of o.steps training steps (after one warmup step) on random tokens.
double time_steps(model::LlamaModel& model, const model::LlamaConfig& cfg, const BenchOptions& o) {
  const int B = o.batch, T = o.seq, N = B * T;
  model.ensure_activations(B, T);
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; i++) {
    tokens[i] = int32_t(random_u32(7, 0, 0, uint64_t(i)) % uint32_t(cfg.vocab_size));
    targets[i] = int32_t(random_u32(7, 0, 1, uint64_t(i)) % uint32_t(cfg.vocab_size));
  }
  model::AdamWConfig opt;
  std::vector<double> times;
  const bool tty = ::isatty(2);
  for (int step = 0; step <= o.steps; step++) {  // step 0 is warmup
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grad();
    model.forward_backward(tokens.data(), targets.data(), B, T);
    model.optimizer_step(opt, 1e-4f, step + 1);
    model.synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step > 0) times.push_back(dt);
    // Redraw one line on a terminal; a log file gets one line per step.
    if (!o.json)
      std::fprintf(stderr, tty ? "\rbench: step %d/%d  %.3f s" : "bench: step %d/%d  %.3f s\n", step, o.steps, dt);
  }
  if (!o.json && tty) std::fprintf(stderr, "\n");
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void print_bench_json(const BenchOptions& o, const model::MemoryPlan& mem, model::Device device, const BenchResult& r) {
  std::printf("{\"model\":\"%s\",\"params\":%lld,\"precision\":\"%s\",\"batch\":%d,\"seq\":%d,\"steps\":%d,"
              "\"step_s\":%.6f,\"tokens_per_s\":%.1f,\"gflops\":%.1f,\"matmul_peak_gflops\":%.1f,\"mfu\":%.4f,"
              "\"peak_rss_mb\":%.1f,\"analytic_mb\":%.1f,\"rss_over_analytic\":%.3f,\"state_mb\":%.1f,"
              "\"trainable_params\":%lld,\"float_operands\":%s,\"device\":\"%s\",\"device_mb\":%.1f,"
              "\"device_before_model_mb\":%.1f,\"runtime_analytic_mb\":%.1f,"
              "\"cpu_kernels\":\"%s\",\"matmul_kernels\":%s}\n",
              o.model.c_str(), (long long)r.params, o.precision.c_str(), o.batch, o.seq, o.steps, r.median,
              r.tokens_per_s, r.gflops, r.peak_gflops, r.gflops / r.peak_gflops, r.rss / 1e6, r.analytic / 1e6,
              r.rss / r.analytic, mem.state / 1e6, (long long)r.trainable, r.float_operands ? "true" : "false",
              model::device_name(device), r.device_bytes < 0 ? -1.0 : r.device_bytes / 1e6,
              r.device_base < 0 ? -1.0 : r.device_base / 1e6, double(mem.runtime) / 1e6, model::cpu_kernels_variant(),
              model::matmul_choices_json().c_str());
}

void print_bench_text(const BenchOptions& o, const model::LlamaConfig& cfg, const model::MemoryPlan& mem,
                      model::Device device, const BenchResult& r) {
  const double analytic = r.analytic;
  std::printf("model %s (%.1fM params), %s, batch %d x seq %d, median of %d steps\n", o.model.c_str(),
              double(r.params) / 1e6, o.precision.c_str(), o.batch, o.seq, o.steps);
  std::printf("  step time      %.3f s\n  tokens/s       %.1f\n", r.median, r.tokens_per_s);
  if (device == model::Device::cpu) std::printf("  cpu kernels    %s\n", model::cpu_kernels_variant());
  std::printf("  achieved       %.1f GFLOP/s  (matmul peak %.1f GFLOP/s at %dx%dx%d: MFU %.1f%%)\n", r.gflops,
              r.peak_gflops, o.batch * o.seq, cfg.vocab_size, cfg.dim, 100.0 * r.gflops / r.peak_gflops);
  if (r.device_bytes >= 0)
    std::printf("  device memory  %.1f MB in use  (analytic %.1f MB: %.2fx; %.1f MB before the model, runtime "
                "analytic %.1f MB)\n",
                r.device_bytes / 1e6, analytic / 1e6, r.device_bytes / analytic, r.device_base / 1e6,
                double(mem.runtime) / 1e6);
  else
    std::printf("  peak RSS       %.1f MB  (analytic %.1f MB: %.2fx)\n", r.rss / 1e6, analytic / 1e6, r.rss / analytic);
  std::printf("  state          %.1f MB  (weights %.1f, gradients %.1f, optimizer %.1f MB)%s\n", mem.state / 1e6,
              mem.weights / 1e6, mem.gradients / 1e6, mem.optimizer / 1e6,
              cfg.frozen.empty() ? ""
                                 : fmt::format("; {:.1f}M of {:.1f}M parameters frozen",
                                               double(r.params - r.trainable) / 1e6, double(r.params) / 1e6)
                                       .c_str());
  if (model::parse_precision(o.precision) != model::Precision::fp32)
    std::printf("  operands       %s\n", !r.float_operands ? "bf16 (the bf16 kernel is the faster here)"
                                         : model::bf16_matmul_available()
                                             ? "bf16 values held in floats (the fp32 kernel is the faster here)"
                                             : "bf16 values held in floats (oneDNN has no bf16 kernel on this CPU)");
  std::printf("%s", model::matmul_choices_text("  ").c_str());
}

// Checks the job fits, times its steps, and prints the figures: the model's memory plan checked
// against the memory the model holds after its first step.
void run_bench(const BenchOptions& o) {
  model::LlamaConfig cfg = bench_config(o);
  const auto precision = model::parse_precision(o.precision);
  const model::Device device = model::choose_device(o.device, "--device");
  const int B = o.batch, T = o.seq, N = B * T;
  // The operand form of bf16 compute (bf16, or bf16 values in floats where the fp32 kernel is the
  // faster): the known choice, else the larger figure, for the check; probed by the model below.
  const model::ShardPlan whole = model::ShardPlan::single(cfg);
  const model::Recompute recompute = model::parse_recompute(o.recompute);
  const model::TrainingShape shape = shape_of(precision, B, T, device, recompute);
  const int64_t avail = model::available_bytes(device);
  model::MemoryPlan mem = model::MemoryPlan::for_check(cfg, whole, shape, avail);
  model::check_device_memory_fits(
      device, mem.total(), fmt::format("{} in {} at batch {} x seq {}", o.model, o.precision, B, T),
      fmt::format("weights, gradients and optimizer state {:.1f} GB, activations {:.1f} GB", mem.state / 1e9,
                  mem.activations / 1e9),
      avail >= 0 && mem.total() > avail ? fitting_changes(cfg, precision, B, T, avail, device) : "");

  BenchResult r;
  // The largest matmul of the step is the lm head: (N, C) x (C, V).
  r.peak_gflops = model::matmul_gflops(device, precision, N, cfg.vocab_size, cfg.dim, 1.0);
  // A device's memory in use before the model (its runtime's own share), to count the run's part.
  const int64_t device_base = model::device_memory_used(device);
  model::LlamaModel model(cfg, precision, 1234, model::ShardPlan{}, nullptr, device);
  model.set_recompute(recompute);
  model.init_random();
  r.median = time_steps(model, cfg, o);
  r.tokens_per_s = N / r.median;
  r.gflops = obs::step_flops(cfg, B, T) / r.median / 1e9;
  // parameters, gradients, optimizer state, bf16 copies, activations and backward scratch, and the
  // fused lm head's scratch
  if (model.float_operands() != mem.float_operands)  // the form the model chose at its first step
    mem = model::MemoryPlan::of(cfg, whole, shape, model.float_operands());
  CHECK(model.state_bytes() == mem.state, "state_bytes: {} from the model, {} from its config", model.state_bytes(),
        mem.state);
  r.analytic = double(mem.total());
  r.rss = peak_rss_bytes();
  // After the steps every buffer and scratch has its full size (nothing is freed between steps).
  // A GPU: all its memory in use (a dedicated GPU: this run's, its runtime's context included, which
  // the analytic figure counts too); what was in use before the model is the runtime's measured share.
  r.device_bytes = device_base < 0 ? -1.0 : double(model::device_memory_used(device));
  r.device_base = device_base < 0 ? -1.0 : double(device_base);
  r.params = model.num_params();
  r.trainable = model.num_trainable();
  r.float_operands = model.float_operands();
  if (o.json)
    print_bench_json(o, mem, device, r);
  else
    print_bench_text(o, cfg, mem, device, r);
}

}  // namespace

void register_bench(CLI::App& app) {
  auto [cmd, o] = add_command<BenchOptions>(
      app, "bench", "Time training steps on random tokens (tokens/s, MFU, memory)",
      "Examples:\n"
      "  llamatrain bench --model stories110m --seq 256 --batch 8 --precision bf16-mixed\n"
      "  llamatrain bench --model /models/TinyLlama-1.1B --seq 512 --batch 1 --precision bf16-sr --json\n"
      "  llamatrain bench --model stories42m --freeze 'model.layers.*' model.norm.weight\n"
      "Named models: stories15m stories42m stories110m tinyllama-1.1b llama2-7b tiny",
      run_bench);
  cmd->add_option("--model", o->model, "Preset name or HF folder/config.json (random weights)")->capture_default_str();
  cmd->add_option("--seq", o->seq, "Sequence length")->capture_default_str()->check(integer_in(1));
  cmd->add_option("--batch", o->batch, "Micro-batch size")->capture_default_str()->check(integer_in(1));
  cmd->add_option("--precision", o->precision, "fp32 | bf16-mixed | bf16-sr")->capture_default_str();
  add_device_option(cmd, &o->device);
  cmd->add_option("--recompute", o->recompute,
                  "none | selective | full: what the backward recomputes (train's "
                  "activations_checkpoint_granularity)")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "Timed steps (after one warmup)")->capture_default_str()->check(integer_in(1));
  cmd->add_flag("--json", o->json, "One JSON object on stdout");
  cmd->add_option("--freeze", o->freeze,
                  "Hugging Face parameter-name patterns of tensors that do not train (as model.freeze)");
}

}  // namespace llamatrain::cli
