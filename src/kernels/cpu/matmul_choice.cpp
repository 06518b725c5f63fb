// MatmulChooser: the per-shape choice between oneDNN's bf16 and fp32 matmul kernels (see
// matmul_choice.h), its decision rule and its cache file. The cache is an optimization only: a
// missing, unreadable, corrupt or foreign file is treated as empty and replaced on the next write
// (through core/file.h's atomic commit), and a failed write is ignored (the next process probes again).
#include "kernels/cpu/matmul_choice.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"

namespace llamatrain::cpu {

namespace {

constexpr const char* kCacheMagic = "llamatrain-matmul-kernels";
constexpr int kCacheVersion = 1;

// The cache file's text, or nullopt when it is missing, unreadable or implausibly large.
std::optional<std::string> read_text(const std::string& path) {
  if (path.empty() || !is_regular_file(path)) return std::nullopt;
  try {
    return read_small_file(path, size_t(4) << 20, "matmul kernel cache");
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::optional<MatmulKernel> kernel_from_name(const std::string& s) {
  if (s == "bf16") return MatmulKernel::bf16;
  if (s == "fp32") return MatmulKernel::f32;
  return std::nullopt;
}

// A choice made by timing (probed now or earlier, or cached), not imposed by the policy or the CPU.
bool timed(MatmulChoice::Source s) { return s == MatmulChoice::Source::probe || s == MatmulChoice::Source::cache; }

}  // namespace

const char* matmul_kernel_name(MatmulKernel k) { return k == MatmulKernel::bf16 ? "bf16" : "fp32"; }

const char* matmul_policy_name(MatmulPolicy p) {
  switch (p) {
    case MatmulPolicy::automatic: return "auto";
    case MatmulPolicy::bf16: return "bf16";
    case MatmulPolicy::f32: return "fp32";
  }
  return "?";
}

const char* matmul_choice_source_name(MatmulChoice::Source s) {
  switch (s) {
    case MatmulChoice::Source::probe: return "probe";
    case MatmulChoice::Source::cache: return "cache";
    case MatmulChoice::Source::forced: return "forced";
    case MatmulChoice::Source::only_f32: return "only-fp32";
  }
  return "?";
}

MatmulPolicy parse_matmul_policy(const std::string& value, const std::string& what) {
  if (value == "auto") return MatmulPolicy::automatic;
  if (value == "bf16") return MatmulPolicy::bf16;
  if (value == "fp32") return MatmulPolicy::f32;
  fail("{}: got '{}', expected auto, bf16 or fp32\nhint: auto times both matmul kernels per shape on this CPU and "
       "keeps the faster; bf16 or fp32 forces one (bf16 compute only, results equal up to summation order)",
       what, value);
}

std::optional<std::vector<MatmulCacheEntry>> parse_matmul_cache(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto format = j.find("format"), version = j.find("version"), entries = j.find("entries");
  if (format == j.end() || version == j.end() || entries == j.end()) return std::nullopt;
  if (!format->is_string() || *format != kCacheMagic) return std::nullopt;
  if (!version->is_number_integer() || *version != kCacheVersion || !entries->is_array()) return std::nullopt;
  std::vector<MatmulCacheEntry> out;
  for (const auto& e : *entries) {
    if (!e.is_object()) return std::nullopt;
    const auto machine = e.find("machine"), shape = e.find("shape"), threads = e.find("threads"),
               kernel = e.find("kernel"), bf16_ms = e.find("bf16_ms"), fp32_ms = e.find("fp32_ms");
    if (machine == e.end() || shape == e.end() || threads == e.end() || kernel == e.end() || bf16_ms == e.end() ||
        fp32_ms == e.end())
      return std::nullopt;
    if (!machine->is_string() || !shape->is_string() || !threads->is_number_integer() || !kernel->is_string() ||
        !bf16_ms->is_number() || !fp32_ms->is_number())
      return std::nullopt;
    const auto k = kernel_from_name(kernel->get<std::string>());
    const int64_t t = threads->get<int64_t>();
    const double b = bf16_ms->get<double>(), f = fp32_ms->get<double>();
    if (!k || t <= 0 || t > (1 << 20) || !std::isfinite(b) || !std::isfinite(f) || b < 0 || f < 0) return std::nullopt;
    out.push_back({machine->get<std::string>(), shape->get<std::string>(), int(t), *k, b * 1e-3, f * 1e-3});
  }
  return out;
}

std::string format_matmul_cache(const std::vector<MatmulCacheEntry>& entries) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : entries)
    list.push_back({{"machine", e.machine},
                    {"threads", e.threads},
                    {"shape", e.shape},
                    {"kernel", matmul_kernel_name(e.kernel)},
                    {"bf16_ms", e.bf16_s * 1e3},
                    {"fp32_ms", e.f32_s * 1e3}});
  nlohmann::json j = {{"format", kCacheMagic}, {"version", kCacheVersion}, {"entries", list}};
  return j.dump(1) + "\n";
}

std::string matmul_choices_text(const MatmulChooser& chooser, const std::string& indent) {
  const auto& cs = chooser.choices();
  if (cs.empty()) return "";
  size_t width = 5, n_f32 = 0;
  for (const auto& c : cs) {
    width = std::max(width, c.shape.size());
    n_f32 += c.kernel == MatmulKernel::f32;
  }
  std::string out = fmt::format("{}bf16 matmul kernels ({}={}): fp32 on bf16 values for {} of {} shapes", indent,
                                kMatmulPolicyEnv, matmul_policy_name(chooser.policy()), n_f32, cs.size());
  if (!chooser.bf16_available()) out += " (oneDNN has no bf16 kernel on this CPU)";
  if (chooser.probe_seconds() > 0) out += fmt::format(", probes {:.2f} s", chooser.probe_seconds());
  out += fmt::format(", cache {}\n", chooser.cache_path().empty() ? "none" : chooser.cache_path());
  out += fmt::format("{}  {:<{}}  kernel  bf16 ms  fp32 ms  from\n", indent, "shape", width);
  for (const auto& c : cs) {
    const bool by_time = timed(c.source);
    out += fmt::format("{}  {:<{}}  {:<6}  {:>7}  {:>7}  {}{}\n", indent, c.shape, width, matmul_kernel_name(c.kernel),
                       by_time ? fmt::format("{:.2f}", c.bf16_s * 1e3) : "-",
                       by_time ? fmt::format("{:.2f}", c.f32_s * 1e3) : "-", matmul_choice_source_name(c.source),
                       c.settled ? "" : " (noisy: not cached)");
  }
  return out;
}

std::string matmul_choices_json(const MatmulChooser& chooser) {
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& c : chooser.choices())
    shapes.push_back({{"shape", c.shape},
                      {"kernel", matmul_kernel_name(c.kernel)},
                      {"source", matmul_choice_source_name(c.source)},
                      {"settled", c.settled},
                      {"bf16_ms", c.bf16_s * 1e3},
                      {"fp32_ms", c.f32_s * 1e3}});
  nlohmann::json j = {{"policy", matmul_policy_name(chooser.policy())},
                      {"bf16_kernel", chooser.bf16_available()},
                      {"cache", chooser.cache_path()},
                      {"probe_s", chooser.probe_seconds()},
                      {"shapes", shapes}};
  return j.dump();
}

std::string default_matmul_cache_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::filesystem::path dir;
  if (xdg != nullptr && xdg[0] == '/')  // the XDG spec: relative values are invalid and ignored
    dir = xdg;
  else if (home != nullptr && home[0] != '\0')
    dir = std::filesystem::path(home) / ".cache";
  else
    return "";
  return (dir / "llamatrain" / "matmul_kernels.json").string();
}

MatmulChooser::MatmulChooser(std::string machine, std::string cache_path, MatmulPolicy policy, bool bf16_available)
    : machine_(std::move(machine)),
      cache_path_(std::move(cache_path)),
      policy_(policy),
      bf16_available_(bf16_available) {}

MatmulKernel MatmulChooser::decide(double bf16_s, double f32_s) {
  const bool valid = std::isfinite(bf16_s) && std::isfinite(f32_s) && bf16_s > 0 && f32_s > 0;
  return valid && bf16_s > kSwitchMargin * f32_s ? MatmulKernel::f32 : MatmulKernel::bf16;
}

const MatmulCacheEntry* MatmulChooser::find_cached(const std::string& shape, int threads) {
  if (!cache_loaded_) {
    cache_loaded_ = true;
    if (!cache_path_.empty())
      if (const auto text = read_text(cache_path_))
        if (auto entries = parse_matmul_cache(*text)) cached_ = std::move(*entries);
  }
  for (const auto& e : cached_)
    if (e.machine == machine_ && e.threads == threads && e.shape == shape) return &e;
  return nullptr;
}

MatmulChoice* MatmulChooser::find_choice(const std::string& shape, int threads) {
  for (size_t i = 0; i < choices_.size(); i++)
    if (choices_[i].shape == shape && choice_threads_[i] == threads) return &choices_[i];
  return nullptr;
}

void MatmulChooser::record(const MatmulChoice& c, int threads) {
  if (MatmulChoice* old = find_choice(c.shape, threads)) {
    *old = c;
    return;
  }
  choices_.push_back(c);
  choice_threads_.push_back(threads);
}

std::optional<MatmulKernel> MatmulChooser::known(const std::string& shape, int threads) {
  std::lock_guard<std::recursive_mutex> lock(lock_.m);
  if (!bf16_available_) return MatmulKernel::f32;
  if (policy_ == MatmulPolicy::bf16) return MatmulKernel::bf16;
  if (policy_ == MatmulPolicy::f32) return MatmulKernel::f32;
  if (const MatmulChoice* c = find_choice(shape, threads); c != nullptr && timed(c->source)) return c->kernel;
  if (const MatmulCacheEntry* e = find_cached(shape, threads)) return e->kernel;
  return std::nullopt;
}

MatmulKernel MatmulChooser::choose(const std::string& shape, int threads,
                                   const std::function<double(MatmulKernel)>& time_call) {
  std::lock_guard<std::recursive_mutex> lock(lock_.m);
  if (!bf16_available_) {
    if (policy_ == MatmulPolicy::bf16)
      fail("{}=bf16: oneDNN has no bf16 matmul kernel on this CPU ({})\nhint: unset {} (or set it to auto or "
           "fp32): bf16 compute then runs on the fp32 kernel with the same bf16 values",
           kMatmulPolicyEnv, machine_, kMatmulPolicyEnv);
    if (const MatmulChoice* c = find_choice(shape, threads);
        c == nullptr || c->source != MatmulChoice::Source::only_f32)
      record({shape, MatmulKernel::f32, MatmulChoice::Source::only_f32}, threads);
    return MatmulKernel::f32;
  }
  if (policy_ != MatmulPolicy::automatic) {
    const MatmulKernel k = policy_ == MatmulPolicy::bf16 ? MatmulKernel::bf16 : MatmulKernel::f32;
    const MatmulChoice* c = find_choice(shape, threads);
    if (c == nullptr || c->source != MatmulChoice::Source::forced || c->kernel != k)
      record({shape, k, MatmulChoice::Source::forced}, threads);
    return k;
  }
  if (const MatmulChoice* c = find_choice(shape, threads); c != nullptr && timed(c->source)) return c->kernel;
  if (const MatmulCacheEntry* e = find_cached(shape, threads)) {
    record({shape, e->kernel, MatmulChoice::Source::cache, e->bf16_s, e->f32_s}, threads);
    return e->kernel;
  }

  const auto start = std::chrono::steady_clock::now();
  time_call(MatmulKernel::bf16);  // warmup: primitive creation, scratch growth, caches
  time_call(MatmulKernel::f32);
  std::vector<double> bf16_s, f32_s;
  for (int r = 0; r < kMaxProbeReps; r++) {
    // alternate which goes first, so a slow stretch of the machine is shared fairly
    const MatmulKernel order[2] = {r % 2 == 0 ? MatmulKernel::bf16 : MatmulKernel::f32,
                                   r % 2 == 0 ? MatmulKernel::f32 : MatmulKernel::bf16};
    for (MatmulKernel k : order) (k == MatmulKernel::bf16 ? bf16_s : f32_s).push_back(time_call(k));
    if (r + 1 >= kProbeReps && settled(bf16_s, f32_s)) break;
  }
  probe_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double b = *std::min_element(bf16_s.begin(), bf16_s.end());
  const double f = *std::min_element(f32_s.begin(), f32_s.end());
  const MatmulKernel k = decide(b, f);
  const bool ok = settled(bf16_s, f32_s);
  MatmulChoice c{shape, k, MatmulChoice::Source::probe, b, f};
  c.settled = ok;
  record(c, threads);
  if (ok) store_in_cache({machine_, shape, threads, k, b, f});
  return k;
}

bool MatmulChooser::settled(std::vector<double> bf16_s, std::vector<double> f32_s) {
  CHECK(!bf16_s.empty() && !f32_s.empty());
  std::sort(bf16_s.begin(), bf16_s.end());
  std::sort(f32_s.begin(), f32_s.end());
  // the same decision from the slowest call of one kernel and the fastest of the other, both ways
  if (decide(bf16_s.front(), f32_s.back()) == decide(bf16_s.back(), f32_s.front())) return true;
  const auto tight = [](const std::vector<double>& t) { return t.size() >= 2 && t[1] <= kSwitchMargin * t[0]; };
  return tight(bf16_s) && tight(f32_s);
}

void MatmulChooser::store_in_cache(const MatmulCacheEntry& entry) {
  // Re-read the file first: another process may have added entries since this one loaded it.
  std::vector<MatmulCacheEntry> entries;
  if (!cache_path_.empty())
    if (const auto text = read_text(cache_path_))
      if (auto parsed = parse_matmul_cache(*text)) entries = std::move(*parsed);
  std::erase_if(entries, [&](const MatmulCacheEntry& e) {
    return e.machine == entry.machine && e.threads == entry.threads && e.shape == entry.shape;
  });
  entries.push_back(entry);
  if (entries.size() > kMaxCacheEntries) entries.erase(entries.begin(), entries.end() - kMaxCacheEntries);
  cached_ = entries;
  cache_loaded_ = true;
  if (cache_path_.empty()) return;

  // An atomic commit (core/file.h): readers, other processes included, never see half a file.
  try {
    const std::filesystem::path path(cache_path_);
    if (path.has_parent_path()) create_directories(path.parent_path().string());
    write_file_atomic(cache_path_, format_matmul_cache(entries));
  } catch (const Error&) {
    // an unwritable cache only costs a probe in the next process
  }
}

}  // namespace llamatrain::cpu
