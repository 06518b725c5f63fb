// Which kernel runs each bf16-compute matmul shape: oneDNN's bf16 kernel, or its fp32 kernel on
// operands holding bf16 values (bf16 x bf16 products are exact in fp32, so both give the same
// result up to summation order). Some CPUs run bf16 slower than fp32 (oneDNN 2.6 on a Sapphire
// Rapids without AMX); a short probe per shape, timed on this machine, picks the faster one.
// This file holds the policy (auto / forced), the decision rule and the on-disk cache; it knows
// nothing about oneDNN: callers pass a function that times one call of either kernel.
//
// A CPU on which oneDNN has no bf16 matmul (AVX2 without AVX-512, where oneDNN 2.6 offers none) has
// one kernel only: every bf16-compute shape runs on the fp32 kernel, unprobed.
//
// Cache: one JSON file (magic "llamatrain-matmul-kernels", version 1) of entries keyed by CPU model,
// oneDNN version and ISA, thread count and shape. A file that cannot be read as such (corrupt,
// truncated, another program's) is ignored and rewritten; entries of other machines are kept.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace llamatrain::cpu {

// bf16: oneDNN's bf16 kernel. f32: oneDNN's fp32 kernel on the same (bf16-valued) operands.
enum class MatmulKernel { bf16, f32 };
// automatic: probe each shape (or read the cache); bf16 / f32: always that kernel, no probe.
enum class MatmulPolicy { automatic, bf16, f32 };

const char* matmul_kernel_name(MatmulKernel k);  // "bf16" | "fp32"
const char* matmul_policy_name(MatmulPolicy p);  // "auto" | "bf16" | "fp32"
// "auto" | "bf16" | "fp32"; anything else fails with an Error naming `what` (where the value came from).
MatmulPolicy parse_matmul_policy(const std::string& value, const std::string& what);

// The environment variable that sets the policy of the process-wide chooser.
inline constexpr const char* kMatmulPolicyEnv = "LLAMATRAIN_BF16_MATMUL";

struct MatmulChoice {
  // only_f32: the CPU has no bf16 kernel (MatmulChooser::bf16_available())
  enum class Source { probe, cache, forced, only_f32 };
  std::string shape;  // e.g. "fwd N=2048 IC=768 OC=2304 inp=bf16"
  MatmulKernel kernel;
  Source source;
  double bf16_s = 0.0;  // fastest probed (or cached) seconds per call of each kernel; 0 when forced
  double f32_s = 0.0;
  bool settled = true;  // false: the probe's timings stayed too noisy to trust beyond this process
};
const char* matmul_choice_source_name(MatmulChoice::Source s);  // "probe" | "cache" | "forced" | "only-fp32"

// One line of the cache file.
struct MatmulCacheEntry {
  std::string machine, shape;
  int threads = 0;
  MatmulKernel kernel = MatmulKernel::bf16;
  double bf16_s = 0.0, f32_s = 0.0;
};
// The entries of a cache file's text, or nullopt when the text is not a cache file of this version
// (or any entry is malformed); and the text of a file holding `entries`.
std::optional<std::vector<MatmulCacheEntry>> parse_matmul_cache(const std::string& text);
std::string format_matmul_cache(const std::vector<MatmulCacheEntry>& entries);

class MatmulChooser {
 public:
  // Timed calls per kernel in a probe (after one untimed warmup call each), alternating; the fastest
  // counts. After kProbeReps, the probe stops once it is settled: the decision is the same whichever
  // of the calls are taken, or the two fastest calls of each kernel agree within kSwitchMargin. It
  // gives up after kMaxProbeReps and decides on the fastest calls, but does not cache the choice.
  static constexpr int kProbeReps = 3;
  static constexpr int kMaxProbeReps = 8;
  // fp32 replaces bf16 only when the fastest bf16 call is slower than the fastest fp32 one by more
  // than this factor: timing noise never flips a shape back and forth.
  static constexpr double kSwitchMargin = 1.10;
  // The cache file keeps the most recent entries only.
  static constexpr size_t kMaxCacheEntries = 512;

  // machine: the CPU model and the oneDNN version and ISA, as one text; cache_path: "" for no cache;
  // bf16_available: whether this CPU has a bf16 kernel at all.
  MatmulChooser(std::string machine, std::string cache_path, MatmulPolicy policy, bool bf16_available = true);

  // The kernel for `shape` at `threads` OpenMP threads: fp32 when there is no bf16 kernel (an Error
  // when the policy forces bf16), else forced by the policy, or chosen earlier in
  // this process, or read from the cache, or probed now by calling time_call(kernel) (which runs one
  // call and returns its seconds) as described above; a settled probe is written to the cache file
  // (best effort: an unwritable cache only costs a probe next time).
  MatmulKernel choose(const std::string& shape, int threads, const std::function<double(MatmulKernel)>& time_call);
  // The kernel choose() would return without probing, if it is known (the only one, forced, chosen,
  // or cached).
  std::optional<MatmulKernel> known(const std::string& shape, int threads);

  // f32 when bf16_s > kSwitchMargin * f32_s (both finite and positive), else bf16.
  static MatmulKernel decide(double bf16_s, double f32_s);
  // Whether probe timings (seconds per call of each kernel, >= 1 each) are settled, as above.
  static bool settled(std::vector<double> bf16_s, std::vector<double> f32_s);

  MatmulPolicy policy() const { return policy_; }
  void set_policy(MatmulPolicy p) { policy_ = p; }
  bool bf16_available() const { return bf16_available_; }
  void set_bf16_available(bool available) { bf16_available_ = available; }
  const std::string& cache_path() const { return cache_path_; }
  const std::string& machine() const { return machine_; }
  // The shapes chosen in this process, in order of first use, and the probes' total wall time.
  const std::vector<MatmulChoice>& choices() const { return choices_; }
  double probe_seconds() const { return probe_seconds_; }

 private:
  const MatmulCacheEntry* find_cached(const std::string& shape, int threads);
  MatmulChoice* find_choice(const std::string& shape, int threads);
  void record(const MatmulChoice& c, int threads);
  void store_in_cache(const MatmulCacheEntry& e);

  std::string machine_, cache_path_;
  MatmulPolicy policy_;
  bool bf16_available_;
  bool cache_loaded_ = false;
  std::vector<MatmulCacheEntry> cached_;  // the cache file's entries (all machines)
  std::vector<MatmulChoice> choices_;     // this process's choices ...
  std::vector<int> choice_threads_;       // ... and the thread count of each
  double probe_seconds_ = 0.0;
  // choose() and known() may be called from several threads (ranks in tests); a copy gets its own lock.
  struct Lock {
    std::recursive_mutex m;
    Lock() = default;
    Lock(const Lock&) {}
    Lock& operator=(const Lock&) { return *this; }
  } lock_;
};

// The process-wide chooser of cpu::matmul_forward / matmul_backward and lmhead_ce_* (defined in
// matmul.cpp): machine = CPU model + oneDNN version and ISA; bf16 available when oneDNN creates a
// bf16 matmul on this CPU; policy from $LLAMATRAIN_BF16_MATMUL (auto
// when unset or empty; any value other than auto, bf16, fp32 throws Error on first use); cache at
// default_matmul_cache_path(). Used from one thread (the one that calls the kernels).
MatmulChooser& matmul_chooser();

// Reports of a chooser's choices (for `llamatrain bench`): a table, one line per shape under a
// summary line, each line starting with `indent` ("" when nothing was chosen); and a JSON object
// {"policy", "bf16_kernel", "cache", "probe_s", "shapes": [{"shape", "kernel", "source", "settled", "bf16_ms",
// "fp32_ms"}]}.
std::string matmul_choices_text(const MatmulChooser& chooser, const std::string& indent);
std::string matmul_choices_json(const MatmulChooser& chooser);

// The default cache file: $XDG_CACHE_HOME/llamatrain/matmul_kernels.json, else
// $HOME/.cache/llamatrain/matmul_kernels.json, else "" (no cache).
std::string default_matmul_cache_path();

}  // namespace llamatrain::cpu
