// The per-shape choice between the bf16 and fp32 matmul kernels (kernels/cpu/matmul_choice.h):
// the decision rule and the probe's stopping rule on injected timings, the cache file (round trip,
// keys, corrupt and foreign files ignored and rewritten, unwritable places), the policy and its
// environment variable; then, through the process-wide chooser, a matmul whose dinp and dweight run
// on different kernels (read from a cache file written here) against the bf16-rounded reference, and
// a real probe (correct results whichever kernel wins; timings are never asserted).
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/bf16.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/cpu/matmul_choice.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "test_util.h"

namespace llamatrain {
namespace {

namespace fs = std::filesystem;
using cpu::MatmulCacheEntry;
using cpu::MatmulChoice;
using cpu::MatmulChooser;
using cpu::MatmulKernel;
using cpu::MatmulPolicy;
using testing::abs_values;
using testing::bf16_rounded;
using testing::philox_uniform;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

// The process-wide chooser must read its cache from a directory of this test's own: set before main.
const std::string kGlobalCacheDir = [] {
  const std::string dir = (fs::temp_directory_path() / ("llamatrain_choice_test_" + std::to_string(getpid()))).string();
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  unsetenv(cpu::kMatmulPolicyEnv);
  return dir;
}();

constexpr const char* kMachine = "Test CPU | oneDNN 9.9.9 test_isa";

// A time_call that returns scripted seconds per kernel in turn (repeating the last) and counts calls.
struct Script {
  std::vector<double> bf16, f32;
  int calls_bf16 = 0, calls_f32 = 0;
  std::function<double(MatmulKernel)> fn() {
    return [this](MatmulKernel k) {
      if (k == MatmulKernel::bf16) return bf16[size_t(std::min<int>(calls_bf16++, int(bf16.size()) - 1))];
      return f32[size_t(std::min<int>(calls_f32++, int(f32.size()) - 1))];
    };
  }
};

std::function<double(MatmulKernel)> never_called() {
  return [](MatmulKernel) {
    ADD_FAILURE() << "probe ran, but the choice should have been known";
    return 1.0;
  };
}

TEST(MatmulChoice, DecisionNeedsAClearMargin) {
  EXPECT_EQ(MatmulChooser::decide(2.0, 1.0), MatmulKernel::f32);
  EXPECT_EQ(MatmulChooser::decide(1.12, 1.0), MatmulKernel::f32);
  EXPECT_EQ(MatmulChooser::decide(1.08, 1.0), MatmulKernel::bf16);  // fp32 faster, but within the margin
  EXPECT_EQ(MatmulChooser::decide(1.0, 1.0), MatmulKernel::bf16);
  EXPECT_EQ(MatmulChooser::decide(0.5, 1.0), MatmulKernel::bf16);
  EXPECT_EQ(MatmulChooser::decide(NAN, 1.0), MatmulKernel::bf16);
  EXPECT_EQ(MatmulChooser::decide(2.0, 0.0), MatmulKernel::bf16);
  EXPECT_EQ(MatmulChooser::decide(INFINITY, 1.0), MatmulKernel::bf16);
}

TEST(MatmulChoice, SettledWhenNoCallCanFlipTheDecision) {
  EXPECT_TRUE(MatmulChooser::settled({2.0, 2.6, 2.1}, {1.0, 1.4, 1.2}));    // every pairing says fp32
  EXPECT_TRUE(MatmulChooser::settled({1.0, 1.9, 1.3}, {2.0, 2.1, 3.0}));    // every pairing says bf16
  EXPECT_FALSE(MatmulChooser::settled({1.0, 1.5, 1.4}, {1.0, 1.6, 1.3}));   // pairings disagree, spread > 10%
  EXPECT_TRUE(MatmulChooser::settled({1.0, 1.05, 2.0}, {0.95, 1.0, 3.0}));  // two fastest agree within 10%
  EXPECT_FALSE(MatmulChooser::settled({1.2}, {1.0, 1.2}));  // ambiguous, and one call cannot agree with itself
}

TEST(MatmulChoice, ProbesOnceThenCachesPerMachineThreadsAndShape) {
  TempDir dir;
  const std::string path = dir / "sub/dir/kernels.json";  // directories are created
  Script slow_bf16{{3.0, 2.0}, {1.5, 1.0}};
  {
    MatmulChooser c(kMachine, path, MatmulPolicy::automatic);
    EXPECT_EQ(c.choose("fwd A", 4, slow_bf16.fn()), MatmulKernel::f32);
    // one warmup + kProbeReps timed calls each: the timings were unambiguous
    EXPECT_EQ(slow_bf16.calls_bf16, 1 + MatmulChooser::kProbeReps);
    EXPECT_EQ(slow_bf16.calls_f32, 1 + MatmulChooser::kProbeReps);
    EXPECT_EQ(c.choose("fwd A", 4, never_called()), MatmulKernel::f32);  // known in-process
    ASSERT_EQ(c.choices().size(), 1u);
    EXPECT_EQ(c.choices()[0].source, MatmulChoice::Source::probe);
    EXPECT_DOUBLE_EQ(c.choices()[0].bf16_s, 2.0);  // the fastest calls after warmup
    EXPECT_DOUBLE_EQ(c.choices()[0].f32_s, 1.0);
    EXPECT_GT(c.probe_seconds(), 0.0);
  }
  const auto entries = cpu::parse_matmul_cache(read_file(path));
  ASSERT_TRUE(entries.has_value()) << read_file(path);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].machine, kMachine);
  EXPECT_EQ((*entries)[0].shape, "fwd A");
  EXPECT_EQ((*entries)[0].threads, 4);
  EXPECT_EQ((*entries)[0].kernel, MatmulKernel::f32);

  // A new process reads the choice instead of probing.
  MatmulChooser again(kMachine, path, MatmulPolicy::automatic);
  EXPECT_EQ(again.known("fwd A", 4), MatmulKernel::f32);
  EXPECT_EQ(again.choose("fwd A", 4, never_called()), MatmulKernel::f32);
  EXPECT_EQ(again.choices().at(0).source, MatmulChoice::Source::cache);
  EXPECT_FALSE(again.known("fwd B", 4).has_value());

  // Another thread count, another shape, another machine: each probes, and the file keeps them all.
  Script fast_bf16{{1.0}, {2.0}};
  EXPECT_EQ(again.choose("fwd A", 2, fast_bf16.fn()), MatmulKernel::bf16);
  EXPECT_EQ(again.choose("fwd B", 4, fast_bf16.fn()), MatmulKernel::bf16);
  MatmulChooser other("Other CPU | oneDNN 9.9.9 test_isa", path, MatmulPolicy::automatic);
  Script equal{{1.0}, {1.0}};
  EXPECT_EQ(other.choose("fwd A", 4, equal.fn()), MatmulKernel::bf16);
  EXPECT_EQ(fast_bf16.calls_bf16, 2 * (1 + MatmulChooser::kProbeReps));
  const auto all = cpu::parse_matmul_cache(read_file(path));
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->size(), 4u);
  MatmulChooser reread(kMachine, path, MatmulPolicy::automatic);
  EXPECT_EQ(reread.known("fwd A", 4), MatmulKernel::f32);
  EXPECT_EQ(reread.known("fwd A", 2), MatmulKernel::bf16);
}

TEST(MatmulChoice, NoisyProbeRunsLongerAndIsNotCached) {
  TempDir dir;
  const std::string path = dir / "kernels.json";
  // fastest calls say fp32 (1.0 vs 1.2), slowest ones say bf16, and no kernel repeats its best within 10%
  Script noisy{{5.0, 1.2, 2.0, 3.0}, {5.0, 1.0, 1.6, 2.6}};
  MatmulChooser c(kMachine, path, MatmulPolicy::automatic);
  EXPECT_EQ(c.choose("dweight A", 2, noisy.fn()), MatmulKernel::f32);
  EXPECT_EQ(noisy.calls_bf16, 1 + MatmulChooser::kMaxProbeReps);
  EXPECT_FALSE(c.choices().at(0).settled);
  EXPECT_FALSE(fs::exists(path));
  MatmulChooser next(kMachine, path, MatmulPolicy::automatic);
  EXPECT_FALSE(next.known("dweight A", 2).has_value());

  // noisy at first, then two close calls each: stops as soon as that holds, and is cached
  Script settles{{5.0, 1.2, 2.0, 1.25}, {5.0, 1.0, 1.6, 1.05}};
  EXPECT_EQ(next.choose("dweight A", 2, settles.fn()), MatmulKernel::f32);
  EXPECT_EQ(settles.calls_f32, 1 + 3);
  EXPECT_TRUE(next.choices().at(0).settled);
  EXPECT_TRUE(fs::exists(path));
}

TEST(MatmulChoice, BadCacheFilesAreIgnoredAndRewritten) {
  const std::string valid_other = cpu::format_matmul_cache({{kMachine, "fwd A", 4, MatmulKernel::f32, 2.0, 1.0}});
  std::string wrong_version = valid_other;
  wrong_version.replace(wrong_version.find("\"version\": 1"), 12, "\"version\": 2");
  std::string bad_kernel = valid_other;
  bad_kernel.replace(bad_kernel.find("\"fp32\""), 6, "\"fp16\"");
  std::string bad_threads = valid_other;
  bad_threads.replace(bad_threads.find("\"threads\": 4"), 12, "\"threads\": -4");
  const std::vector<std::pair<std::string, std::string>> files = {
      {"empty", ""},
      {"binary", std::string("\x00\xff\x13garbage\n", 12)},
      {"truncated", valid_other.substr(0, valid_other.size() / 2)},
      {"another program's JSON", "{\"entries\": [], \"name\": \"something else\"}"},
      {"a JSON array", "[1, 2, 3]"},
      {"a newer version", wrong_version},
      {"an unknown kernel", bad_kernel},
      {"negative threads", bad_threads},
  };
  for (const auto& [what, text] : files) {
    SCOPED_TRACE(what);
    TempDir dir;
    const std::string path = dir / "kernels.json";
    write_file(path, text);
    MatmulChooser c(kMachine, path, MatmulPolicy::automatic);
    EXPECT_FALSE(c.known("fwd A", 4).has_value());
    Script s{{1.0}, {2.0}};
    EXPECT_EQ(c.choose("fwd A", 4, s.fn()), MatmulKernel::bf16);
    EXPECT_GT(s.calls_bf16, 0) << "a bad file must not stand in for a probe";
    const auto entries = cpu::parse_matmul_cache(read_file(path));
    ASSERT_TRUE(entries.has_value()) << "not rewritten: " << read_file(path);
    ASSERT_EQ(entries->size(), 1u);
    EXPECT_EQ((*entries)[0].kernel, MatmulKernel::bf16);
  }
}

TEST(MatmulChoice, UnwritableCacheOnlyCostsAProbe) {
  TempDir dir;
  write_file(dir / "a_file", "x");
  for (const std::string& path : {dir / "a_file/kernels.json", std::string()}) {
    SCOPED_TRACE(path);
    MatmulChooser c(kMachine, path, MatmulPolicy::automatic);
    Script s{{2.0}, {1.0}};
    EXPECT_EQ(c.choose("fwd A", 1, s.fn()), MatmulKernel::f32);
    EXPECT_EQ(c.choose("fwd A", 1, never_called()), MatmulKernel::f32);
  }
}

TEST(MatmulChoice, CacheKeepsTheNewestEntries) {
  TempDir dir;
  const std::string path = dir / "kernels.json";
  std::vector<MatmulCacheEntry> many;
  for (size_t i = 0; i < MatmulChooser::kMaxCacheEntries; i++)
    many.push_back({kMachine, "old " + std::to_string(i), 1, MatmulKernel::bf16, 1.0, 1.0});
  write_file(path, cpu::format_matmul_cache(many));
  MatmulChooser c(kMachine, path, MatmulPolicy::automatic);
  EXPECT_EQ(c.known("old 0", 1), MatmulKernel::bf16);
  Script s{{2.0}, {1.0}};
  c.choose("new", 1, s.fn());
  const auto entries = cpu::parse_matmul_cache(read_file(path));
  ASSERT_TRUE(entries.has_value());
  EXPECT_EQ(entries->size(), MatmulChooser::kMaxCacheEntries);
  EXPECT_EQ(entries->back().shape, "new");
  EXPECT_EQ(entries->front().shape, "old 1");
}

TEST(MatmulChoice, ForcedPolicyNeverProbes) {
  TempDir dir;
  const std::string path = dir / "kernels.json";
  write_file(path, cpu::format_matmul_cache({{kMachine, "fwd A", 1, MatmulKernel::f32, 2.0, 1.0}}));
  MatmulChooser c(kMachine, path, MatmulPolicy::bf16);
  EXPECT_EQ(c.known("fwd A", 1), MatmulKernel::bf16);  // the policy wins over the cache
  EXPECT_EQ(c.choose("fwd A", 1, never_called()), MatmulKernel::bf16);
  EXPECT_EQ(c.choose("fwd B", 1, never_called()), MatmulKernel::bf16);
  c.set_policy(MatmulPolicy::f32);
  EXPECT_EQ(c.choose("fwd B", 1, never_called()), MatmulKernel::f32);
  ASSERT_EQ(c.choices().size(), 2u);
  EXPECT_EQ(c.choices()[1].source, MatmulChoice::Source::forced);
  EXPECT_EQ(c.choices()[1].kernel, MatmulKernel::f32);
  c.set_policy(MatmulPolicy::automatic);  // back to auto: the cache, then a probe
  EXPECT_EQ(c.choose("fwd A", 1, never_called()), MatmulKernel::f32);
  Script s{{1.0}, {3.0}};
  EXPECT_EQ(c.choose("fwd B", 1, s.fn()), MatmulKernel::bf16);
  EXPECT_EQ(c.choices()[1].source, MatmulChoice::Source::probe);
  const std::string text = cpu::matmul_choices_text(c, "  ");
  EXPECT_NE(text.find("fwd B"), std::string::npos) << text;
  EXPECT_NE(text.find("fp32 on bf16 values for 1 of 2 shapes"), std::string::npos) << text;
}

TEST(MatmulChoice, WithoutABf16KernelEveryShapeRunsOnFp32) {
  // A CPU where oneDNN has no bf16 matmul (AVX2 only): no probe, no cache entry, every shape on the
  // fp32 kernel, said in the report; forcing bf16 is an error that names the variable and the fix.
  TempDir dir;
  const std::string path = dir / "kernels.json";
  write_file(path, cpu::format_matmul_cache({{kMachine, "fwd A", 1, MatmulKernel::bf16, 1.0, 2.0}}));
  MatmulChooser c(kMachine, path, MatmulPolicy::automatic, false);
  EXPECT_FALSE(c.bf16_available());
  EXPECT_EQ(c.known("fwd A", 1), MatmulKernel::f32);  // not the cached bf16
  EXPECT_EQ(c.known("fwd B", 1), MatmulKernel::f32);
  EXPECT_EQ(c.choose("fwd A", 1, never_called()), MatmulKernel::f32);
  EXPECT_EQ(c.choose("fwd B", 1, never_called()), MatmulKernel::f32);
  EXPECT_EQ(c.choose("fwd B", 1, never_called()), MatmulKernel::f32);
  ASSERT_EQ(c.choices().size(), 2u);
  EXPECT_EQ(c.choices()[0].source, MatmulChoice::Source::only_f32);
  EXPECT_EQ(c.probe_seconds(), 0.0);
  const auto entries = cpu::parse_matmul_cache(read_file(path));
  ASSERT_TRUE(entries.has_value());
  EXPECT_EQ(entries->size(), 1u);  // nothing probed, nothing written
  const std::string text = cpu::matmul_choices_text(c, "");
  EXPECT_NE(text.find("fp32 on bf16 values for 2 of 2 shapes (oneDNN has no bf16 kernel on this CPU)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("only-fp32"), std::string::npos) << text;
  EXPECT_NE(cpu::matmul_choices_json(c).find("\"bf16_kernel\":false"), std::string::npos);
  c.set_policy(MatmulPolicy::f32);
  EXPECT_EQ(c.choose("fwd C", 1, never_called()), MatmulKernel::f32);
  c.set_policy(MatmulPolicy::bf16);
  try {
    c.choose("fwd A", 1, never_called());
    ADD_FAILURE() << "forced bf16 on a CPU without the kernel";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("LLAMATRAIN_BF16_MATMUL=bf16: oneDNN has no bf16 matmul kernel on this CPU (" +
                       std::string(kMachine) + ")"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("hint: unset LLAMATRAIN_BF16_MATMUL"), std::string::npos) << msg;
  }
  c.set_bf16_available(true);  // the same chooser on a CPU with both kernels: the cache again
  c.set_policy(MatmulPolicy::automatic);
  EXPECT_EQ(c.choose("fwd A", 1, never_called()), MatmulKernel::bf16);
}

TEST(MatmulChoice, PolicyNamesAndErrors) {
  EXPECT_EQ(cpu::parse_matmul_policy("auto", "x"), MatmulPolicy::automatic);
  EXPECT_EQ(cpu::parse_matmul_policy("bf16", "x"), MatmulPolicy::bf16);
  EXPECT_EQ(cpu::parse_matmul_policy("fp32", "x"), MatmulPolicy::f32);
  for (const char* bad : {"", "FP32", "f32", "fp16", "auto "}) {
    try {
      cpu::parse_matmul_policy(bad, "environment variable LLAMATRAIN_BF16_MATMUL");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("LLAMATRAIN_BF16_MATMUL"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("got '") + bad + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("expected auto, bf16 or fp32"), std::string::npos) << msg;
      EXPECT_NE(msg.find("hint:"), std::string::npos) << msg;
    }
  }
}

TEST(MatmulChoice, DefaultCachePathFollowsXdg) {
  const std::string saved_xdg = std::getenv("XDG_CACHE_HOME") ? std::getenv("XDG_CACHE_HOME") : "";
  const std::string saved_home = std::getenv("HOME") ? std::getenv("HOME") : "";
  setenv("XDG_CACHE_HOME", "/some/cache", 1);
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(cpu::default_matmul_cache_path(), "/some/cache/llamatrain/matmul_kernels.json");
  setenv("XDG_CACHE_HOME", "relative/cache", 1);  // invalid per the XDG spec: ignored
  EXPECT_EQ(cpu::default_matmul_cache_path(), "/home/someone/.cache/llamatrain/matmul_kernels.json");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  EXPECT_EQ(cpu::default_matmul_cache_path(), "");
  setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
  if (!saved_home.empty()) setenv("HOME", saved_home.c_str(), 1);
}

// ---------------------------------------------------------------------------------------------
// Through the process-wide chooser (its cache lives in kGlobalCacheDir).

// got vs want (from bf16-rounded operands): |diff| <= u32 * (8 sqrt(K) + 16) * sum_k |a||b| + 2 u32 |want|
::testing::AssertionResult f32_sum_close(const char* what, const std::vector<float>& got,
                                         const std::vector<float>& want, const std::vector<float>& abs_sum, int K) {
  return testing::all_within(what, got, want, abs_sum, 0x1p-24 * (8.0 * std::sqrt(double(K)) + 16.0), 0x1p-23);
}

// dinp N x IC x OC large enough to be probed (2*N*IC*OC >= 1e8), with a float dout.
constexpr int kN = 256, kIC = 384, kOC = 640;

struct Case {
  std::vector<float> inp, weight, dout;
  std::vector<bf16> weight_b;
  std::vector<float> want_dinp, want_dw, sum_dinp, sum_dw, want_out, sum_out;
  // U(-1, 1) operands from the Philox streams of seed 7, tensor ids 1, 2, 3
  Case()
      : inp(philox_uniform(size_t(kN) * kIC, 7, 1, -1, 1)),
        weight(philox_uniform(size_t(kOC) * kIC, 7, 2, -1, 1)),
        dout(philox_uniform(size_t(kN) * kOC, 7, 3, -1, 1)) {
    for (float w : weight) weight_b.push_back(to_bf16(w));
    const auto inp_r = bf16_rounded(inp), w_r = bf16_rounded(weight), d_r = bf16_rounded(dout);
    want_out.resize(size_t(kN) * kOC);
    want_dinp.resize(size_t(kN) * kIC);
    want_dw.assign(size_t(kOC) * kIC, 0.0f);
    ref::matmul_forward(want_out.data(), inp_r.data(), w_r.data(), kN, kIC, kOC);
    ref::matmul_backward(want_dinp.data(), want_dw.data(), d_r.data(), inp_r.data(), w_r.data(), kN, kIC, kOC);
    sum_out.resize(want_out.size());
    sum_dinp.resize(want_dinp.size());
    sum_dw.assign(want_dw.size(), 0.0f);
    ref::matmul_forward(sum_out.data(), abs_values(inp_r).data(), abs_values(w_r).data(), kN, kIC, kOC);
    ref::matmul_backward(sum_dinp.data(), sum_dw.data(), abs_values(d_r).data(), abs_values(inp_r).data(),
                         abs_values(w_r).data(), kN, kIC, kOC);
  }
};

TEST(MatmulChoiceKernels, Bf16KernelIsFoundWhereOneDnnHasIt) {
  // oneDNN 2.x (Debian 12's) has bf16 matmul kernels from avx512_core up, and none below: not on a
  // CPU without AVX-512, nor under ONEDNN_MAX_CPU_ISA=AVX2 (the *.avx2 tests). The machine text ends
  // with the ISA oneDNN uses ("AMD EPYC | oneDNN 2.6.3 avx2"). oneDNN 3 has more ISAs: printed only.
  const std::string machine = cpu::matmul_chooser().machine();
  const bool found = cpu::matmul_chooser().bf16_available();
  std::printf("this CPU: %s; bf16 kernel: %s\n", machine.c_str(), found ? "yes" : "no");
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (isa != nullptr && std::string(isa) == "AVX2") {
    EXPECT_NE(machine.find(" avx2"), std::string::npos) << machine;
  }
  if (machine.find("oneDNN 2.") != std::string::npos) {
    const bool avx512 = machine.find(" avx512_core") != std::string::npos;
    EXPECT_EQ(found, avx512) << machine;
  }
}

TEST(MatmulChoiceKernels, DinpAndDweightOnDifferentKernels) {
  cpu::MatmulChooser& chooser = cpu::matmul_chooser();
  if (!chooser.bf16_available()) GTEST_SKIP() << "oneDNN has no bf16 matmul kernel on this CPU";
  ASSERT_EQ(chooser.policy(), MatmulPolicy::automatic);
  ASSERT_EQ(chooser.cache_path().rfind(kGlobalCacheDir, 0), 0u) << chooser.cache_path();
  const int threads = omp_get_max_threads();
  const std::string dinp = "dinp N=256 IC=384 OC=640 dout=f32", dw = "dweight N=256 IC=384 OC=640 dout=f32 inp=f32";
  const Case cs;
  for (MatmulKernel k_dinp : {MatmulKernel::f32, MatmulKernel::bf16}) {
    const MatmulKernel k_dw = k_dinp == MatmulKernel::f32 ? MatmulKernel::bf16 : MatmulKernel::f32;
    SCOPED_TRACE(::testing::Message() << "dinp on " << cpu::matmul_kernel_name(k_dinp));
    // a cache with these choices, as an earlier process on this machine would have written it
    fs::create_directories(fs::path(chooser.cache_path()).parent_path());
    write_file(chooser.cache_path(), cpu::format_matmul_cache({{chooser.machine(), dinp, threads, k_dinp, 1, 1},
                                                               {chooser.machine(), dw, threads, k_dw, 1, 1}}));
    cpu::MatmulChooser fresh(chooser.machine(), chooser.cache_path(), MatmulPolicy::automatic, true);
    ASSERT_EQ(fresh.known(dinp, threads), k_dinp);
    chooser = fresh;  // the kernels read the file as a new process would

    std::vector<float> got_dinp(size_t(kN) * kIC, -7.0f), got_dw(size_t(kOC) * kIC, 0.0f);
    cpu::matmul_backward(got_dinp.data(), got_dw.data(), cs.dout.data(), cs.inp.data(), cs.weight.data(),
                         cs.weight_b.data(), kN, kIC, kOC, cpu::ComputeType::bf16);
    ASSERT_EQ(chooser.choices().size(), 2u);
    EXPECT_EQ(chooser.choices()[0].kernel, k_dinp);
    EXPECT_EQ(chooser.choices()[0].source, MatmulChoice::Source::cache);
    EXPECT_EQ(chooser.choices()[1].kernel, k_dw);
    EXPECT_TRUE(f32_sum_close("dinp", got_dinp, cs.want_dinp, cs.sum_dinp, kOC));
    EXPECT_TRUE(f32_sum_close("dweight", got_dw, cs.want_dw, cs.sum_dw, kN));
  }
}

TEST(MatmulChoiceKernels, RealProbeGivesCorrectResults) {
  cpu::MatmulChooser& chooser = cpu::matmul_chooser();
  fs::remove(chooser.cache_path());
  chooser =
      cpu::MatmulChooser(chooser.machine(), chooser.cache_path(), MatmulPolicy::automatic, chooser.bf16_available());
  const Case cs;
  std::vector<float> out(size_t(kN) * kOC, -7.0f);
  cpu::matmul_forward(out.data(), cs.inp.data(), cs.weight.data(), cs.weight_b.data(), kN, kIC, kOC,
                      cpu::ComputeType::bf16);
  EXPECT_TRUE(f32_sum_close("out", out, cs.want_out, cs.sum_out, kIC));
  ASSERT_EQ(chooser.choices().size(), 1u);
  const MatmulChoice& c = chooser.choices()[0];
  EXPECT_EQ(c.shape, "fwd N=256 IC=384 OC=640 inp=f32");
  if (!chooser.bf16_available()) {  // the fp32 kernel, the only one: nothing probed or cached
    EXPECT_EQ(c.source, MatmulChoice::Source::only_f32);
    EXPECT_EQ(c.kernel, MatmulKernel::f32);
    EXPECT_FALSE(fs::exists(chooser.cache_path()));
  } else {
    EXPECT_EQ(c.source, MatmulChoice::Source::probe);
    EXPECT_GT(c.bf16_s, 0.0);
    EXPECT_GT(c.f32_s, 0.0);
    EXPECT_EQ(c.kernel, MatmulChooser::decide(c.bf16_s, c.f32_s));
  }
  if (c.source == MatmulChoice::Source::probe && c.settled) {
    const auto entries = cpu::parse_matmul_cache(read_file(chooser.cache_path()));
    ASSERT_TRUE(entries.has_value());
    EXPECT_EQ(entries->size(), 1u);
  }
  // the second call uses the choice: same result, bitwise (same kernel, same operands)
  std::vector<float> again(out.size(), -7.0f);
  cpu::matmul_forward(again.data(), cs.inp.data(), cs.weight.data(), cs.weight_b.data(), kN, kIC, kOC,
                      cpu::ComputeType::bf16);
  EXPECT_EQ(again, out);
  EXPECT_EQ(chooser.choices().size(), 1u);
  fs::remove_all(kGlobalCacheDir);
}

}  // namespace
}  // namespace llamatrain
