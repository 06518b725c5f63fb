// Everything tests share: fixture and golden paths, temporary folders, whole-file reads and writes,
// running the llamatrain binary (through a shell, or with an argument list and stdout / stderr kept
// apart) and the check that a user's mistake ended in a plain error; and what a test needs from the
// machine beyond the build (Debian's /usr/bin/python3 with given modules for the independent Python
// references in tools/reference/, or a program on PATH), each returning "" when the need is met,
// else the reason to skip, naming the Debian package that provides it:
//   if (auto why = python_missing({"numpy"}); !why.empty()) GTEST_SKIP() << why;
// scripts/setup.sh installs everything these look for, and scripts/fresh_machine_test.sh checks that
// nothing skips there.
// Then the numerics of the kernel, model and parallel tests: random inputs (std::mt19937 streams and
// counter-based Philox ones, each helper reproducing exactly the draws of the loop it replaced, so a
// test's inputs are a function of its seed and tensor id alone), bf16 and |x| copies of a vector,
// central differences, and the element-by-element comparisons, which on failure say how many of how
// many elements are off and print the first few as [index] got, want:
//   EXPECT_TRUE(all_close("rmsnorm dx", dx_cpu, dx_ref, 2e-6, 1e-5));
// A file-size limit for the disk-full tests. Tests only.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/bf16.h"
#include "core/rng.h"

namespace llamatrain::testing {

inline std::string source_path(const std::string& rel) { return std::string(LLAMATRAIN_SOURCE_DIR) + "/" + rel; }
inline std::string fixture(const std::string& name) { return source_path("tests/data/fixtures/" + name); }
inline std::string golden(const std::string& name) { return source_path("tests/golden/data/" + name); }

// A fresh folder under the build dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = std::string(LLAMATRAIN_BINARY_DIR) + "/tmp_data_test_XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

inline bool exists(const std::string& path) { return std::filesystem::exists(path); }

// Temporary files in `dir` (names with ".tmp-", as core/file.h writes them, or the spill files' ".tmp").
inline std::vector<std::string> temporaries(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos) found.push_back(name);
  }
  return found;
}

// Runs a shell command, returns its exit status and captures stdout+stderr into *out.
inline int run_capture(const std::string& cmd, std::string* out) {
  std::FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  out->clear();
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

inline std::string llamatrain_bin() {
  const char* b = std::getenv("LLAMATRAIN_BIN");
  return b ? b : std::string(LLAMATRAIN_BINARY_DIR) + "/llamatrain";
}

// ---- the llamatrain binary with an argument list (no shell) ----

struct CliResult {
  bool exited = false;  // false: killed by a signal
  int code = -1;        // exit status when exited
  int signal = 0;       // the signal otherwise
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Runs `llamatrain ARGS...`; stdin is /dev/null. Output goes through temporary files (no pipe to fill).
inline CliResult run_cli(const std::vector<std::string>& args) {
  std::string dir = std::string(LLAMATRAIN_BINARY_DIR) + "/tmp_cli_XXXXXX";
  if (!::mkdtemp(dir.data())) return {};
  const std::string out_path = dir + "/out", err_path = dir + "/err";
  const std::string bin = llamatrain_bin();
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!std::freopen("/dev/null", "r", stdin) || !std::freopen(out_path.c_str(), "w", stdout) ||
        !std::freopen(err_path.c_str(), "w", stderr))
      ::_exit(127);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  CliResult r;
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exited = WIFEXITED(status);
  r.code = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return r;
}

inline std::string describe(const CliResult& r) {
  return (r.exited ? "exit " + std::to_string(r.code) : "signal " + std::to_string(r.signal)) + "\n--- stdout:\n" +
         r.out + "\n--- stderr:\n" + r.err;
}

// A user's mistake: plain error, status 1..125, every string of `names` in the message.
inline void expect_plain_error(const CliResult& r, const std::vector<std::string>& names) {
  EXPECT_TRUE(r.exited) << "killed by a signal\n" << describe(r);
  EXPECT_GE(r.code, 1) << describe(r);
  EXPECT_LE(r.code, 125) << describe(r);
  EXPECT_NE(r.err.find("error: "), std::string::npos) << describe(r);
  for (const char* crash : {"terminate called", "what():", "CHECK failed", "Aborted", "e+308"})
    EXPECT_EQ(r.err.find(crash), std::string::npos) << "'" << crash << "' in\n" << describe(r);
  for (const auto& n : names)
    EXPECT_NE(r.err.find(n), std::string::npos) << "missing '" << n << "' in\n" << describe(r);
}

// Names in `dir` that look like temporaries of the file module (".tmp-" in the name) or old ".tmp" ones.
inline std::vector<std::string> temporaries_in(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find(".tmp") != std::string::npos) found.push_back(name);
  }
  return found;
}

// ---- what the machine provides ----

// Debian's python3 as CMake found it at configure time (SYSTEM_PYTHON), or "" when there is none.
inline std::string system_python() {
  std::string py = SYSTEM_PYTHON;
  if (py.empty() || py.ends_with("-NOTFOUND") || ::access(py.c_str(), X_OK) != 0) return "";
  return py;
}

// "" when system_python() has every module installed; otherwise which are missing and how to get them.
// A module that is installed but fails to import is not a reason to skip: the test runs and fails.
inline std::string python_missing(std::initializer_list<std::string_view> modules) {
  const std::string hint = "\nhint: install with `bash scripts/setup.sh` (Debian/Ubuntu packages: ";
  std::string py = system_python();
  if (py.empty())
    return "needs /usr/bin/python3, which is not installed" + hint +
           "python3 python3-numpy python3-torch "
           "python3-sentencepiece)";
  static std::map<std::string, bool> found;  // module -> installed, cached for the process
  std::string missing, packages;
  for (std::string_view m : modules) {
    auto it = found.find(std::string(m));
    if (it == found.end()) {
      std::string cmd = py +
                        " -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)' " +
                        std::string(m) + " >/dev/null 2>&1";
      it = found.emplace(std::string(m), std::system(cmd.c_str()) == 0).first;
    }
    if (it->second) continue;
    missing += (missing.empty() ? "" : ", ") + std::string(m);
    packages += (packages.empty() ? "python3-" : " python3-") + std::string(m);
  }
  if (missing.empty()) return "";
  return "needs Python modules that " + py + " does not have: " + missing + hint + packages + ")";
}

// "" when `program` is an executable on PATH; otherwise the reason, with the package that provides it.
inline std::string program_missing(std::string_view program, std::string_view debian_package) {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "";
  while (!dirs.empty()) {
    size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    std::string file = (dir.empty() ? std::string(".") : dir) + "/" + std::string(program);
    std::error_code ec;
    if (std::filesystem::is_regular_file(file, ec) && ::access(file.c_str(), X_OK) == 0) return "";
  }
  return "needs `" + std::string(program) +
         "`, which is not on PATH\nhint: install with `bash scripts/setup.sh` "
         "(Debian/Ubuntu package: " +
         std::string(debian_package) + ")";
}

// ---- random inputs ----
// Each returns n values; the same arguments give the same values in every build and on every machine
// (std::mt19937 and the Philox of core/rng.h are specified bit for bit; the distributions are those
// of libstdc++, the only standard library the build supports).

// n draws of `dist` over std::mt19937(seed), in order.
template <typename T, typename Dist>
std::vector<T> mt19937_draws(size_t n, uint32_t seed, Dist dist) {
  std::mt19937 rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// U(lo, hi) from std::uniform_real_distribution<float>.
inline std::vector<float> mt19937_uniform(size_t n, uint32_t seed, float lo, float hi) {
  return mt19937_draws<float>(n, seed, std::uniform_real_distribution<float>(lo, hi));
}

// N(0, stddev^2) from std::normal_distribution<float>.
inline std::vector<float> mt19937_normal(size_t n, uint32_t seed, float stddev = 1.0f) {
  return mt19937_draws<float>(n, seed, std::normal_distribution<float>(0.0f, stddev));
}

// Integers uniform in [lo, hi] from std::uniform_int_distribution<int>.
inline std::vector<int32_t> mt19937_ints(size_t n, uint32_t seed, int lo, int hi) {
  return mt19937_draws<int32_t>(n, seed, std::uniform_int_distribution<int>(lo, hi));
}

// U(lo, hi): element i is lo + (hi - lo) * random_uniform(seed, 0, tensor_id, i), the counter-based
// stream of core/rng.h (24 random bits per value).
inline std::vector<float> philox_uniform(size_t n, uint64_t seed, uint32_t tensor_id, float lo, float hi) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * random_uniform(seed, 0, tensor_id, i);
  return v;
}

// Token ids in [0, V): element i is random_u32(seed, 0, stream, i) % V.
inline std::vector<int32_t> philox_tokens(size_t n, int V, uint64_t seed, uint32_t stream) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; i++) t[i] = int32_t(random_u32(seed, 0, stream, uint64_t(i)) % uint32_t(V));
  return t;
}

// ---- copies of a vector ----

inline std::vector<float> abs_values(const std::vector<float>& v) {
  std::vector<float> a(v.size());
  for (size_t i = 0; i < v.size(); i++) a[i] = std::abs(v[i]);
  return a;
}

// Each value rounded to nearest-even bf16 and held as bf16 ...
inline std::vector<bf16> to_bf16_vector(const std::vector<float>& v) {
  std::vector<bf16> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = to_bf16(v[i]);
  return r;
}

// ... or back in a float (what a kernel computing on the bf16 values sees).
inline std::vector<float> bf16_rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = to_float(to_bf16(v[i]));
  return r;
}

// ---- central differences ----

// d f / d x[i] for every i by central differences: x[i] is set to x0 + h and x0 - h (rounded to float,
// then restored), and the difference of f's values is divided by the step actually taken. f: () ->
// double, reading x. h may be float (the step is added in float) or double (added in double).
template <typename Step, typename F>
std::vector<double> central_differences(std::vector<float>& x, Step h, F f) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const float x0 = x[i];
    const float xp = float(x0 + h), xm = float(x0 - h);
    x[i] = xp;
    const double fp = f();
    x[i] = xm;
    const double fm = f();
    x[i] = x0;
    grad[i] = (fp - fm) / (double(xp) - double(xm));
  }
  return grad;
}

// ---- comparing tensors ----
// got and want: std::vector (or anything with size() and []) of float or double, compared in double.
// A failure names `what`, counts the elements off and prints the first kShownMismatches of them.

inline constexpr size_t kShownMismatches = 5;

// |got[i] - want[i]| <= bound(i) for every i (a NaN on either side never is). *worst, when given,
// receives the largest |got - want| / bound (for printing how close a passing test came).
template <typename G, typename W, typename Bound>
::testing::AssertionResult all_within_bound(const std::string& what, const G& got, const W& want, Bound bound,
                                            double* worst = nullptr) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values, want " << want.size();
  size_t bad = 0;
  double largest = 0.0;
  std::string shown;
  for (size_t i = 0; i < got.size(); i++) {
    const double g = double(got[i]), w = double(want[i]);
    const double err = std::abs(g - w), lim = double(bound(i));
    if (lim > 0) largest = std::max(largest, err / lim);
    if (err <= lim) continue;
    if (bad < kShownMismatches)
      shown += fmt::format("  [{}] got {:.9g}, want {:.9g}, |err| {:.3g} > {:.3g}\n", i, g, w, err, lim);
    bad++;
  }
  if (worst) *worst = largest;
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " outside the tolerance; the first:\n"
                                       << shown;
}

// |got - want| <= atol + rtol * |want| everywhere.
template <typename G, typename W>
::testing::AssertionResult all_close(const std::string& what, const G& got, const W& want, double atol, double rtol) {
  return all_within_bound(what, got, want, [&](size_t i) { return atol + rtol * std::abs(double(want[i])); });
}

// |got - want| <= tol * scale[i] + slack * |want| + 1e-30: an error bound per element, e.g. tol = the
// relative error of a dot product and scale = sum_k |a_k||b_k| of each output.
template <typename G, typename W, typename S>
::testing::AssertionResult all_within(const std::string& what, const G& got, const W& want, const S& scale, double tol,
                                      double slack) {
  if (scale.size() != got.size())
    return ::testing::AssertionFailure() << what << ": " << scale.size() << " scales for " << got.size() << " values";
  return all_within_bound(what, got, want,
                          [&](size_t i) { return tol * double(scale[i]) + slack * std::abs(double(want[i])) + 1e-30; });
}

// The same bits in every element (so +0 and -0 differ, and a NaN equals the same NaN). T: float or double.
template <typename T>
::testing::AssertionResult bitwise_equal(const std::string& what, const std::vector<T>& got,
                                         const std::vector<T>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values, want " << want.size();
  size_t bad = 0;
  std::string shown;
  for (size_t i = 0; i < got.size(); i++) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if (bad < kShownMismatches)
      shown += fmt::format("  [{}] got {:.9g}, want {:.9g}\n", i, double(got[i]), double(want[i]));
    bad++;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size()
                                       << " differ in their bits; the first:\n"
                                       << shown;
}

// The largest |got - want| (at element `worst`) and the largest |want|: a tensor's error measured
// against its scale (relative(); elementwise relative error means nothing for entries near 0).
// A NaN difference or vectors of different sizes give max_abs = infinity, which no bound admits.
struct Difference {
  double max_abs = 0;  // max_i |got[i] - want[i]|, in double
  double scale = 0;    // max_i |want[i]|
  size_t worst = 0;    // an i where max_abs is reached
  double relative() const { return scale > 0 ? max_abs / scale : max_abs; }
};

template <typename G, typename W>
Difference max_difference(const G& got, const W& want) {
  Difference d;
  if (got.size() != want.size()) {
    d.max_abs = std::numeric_limits<double>::infinity();
    return d;
  }
  for (size_t i = 0; i < want.size(); i++) {
    double e = std::abs(double(got[i]) - double(want[i]));
    if (std::isnan(e)) e = std::numeric_limits<double>::infinity();
    if (e > d.max_abs) {
      d.max_abs = e;
      d.worst = i;
    }
    d.scale = std::max(d.scale, std::abs(double(want[i])));
  }
  return d;
}

// ---- a file-size limit ----

// While alive, writes past `bytes` fail with EFBIG (as on a full disk) instead of raising SIGXFSZ.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &old_), 0);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old_;
    lim.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  struct rlimit old_;
  void (*old_handler_)(int);
};

// ---- a memory cgroup ----

// A memory cgroup of the test's own (cgroup v1's memory controller, or v2), removed when it goes out
// of scope. ok() is false where none can be made (not root, no writable hierarchy): the test skips.
class MemoryCgroup {
 public:
  explicit MemoryCgroup(const std::string& name) {
    for (const auto& [root, file] :
         {std::pair<std::string, std::string>{"/sys/fs/cgroup/memory", "memory.limit_in_bytes"},
          {"/sys/fs/cgroup", "memory.max"},
          {"/sys/fs/cgroup/unified", "memory.max"}}) {
      const std::string c = root + "/" + name + "_" + std::to_string(::getpid());
      std::error_code ec;
      if (std::filesystem::create_directory(c, ec) && std::filesystem::exists(c + "/" + file)) {
        path_ = c, limit_file_ = file;
        return;
      }
      std::filesystem::remove(c, ec);
    }
  }
  ~MemoryCgroup() {
    if (path_.empty()) return;
    for (int i = 0; i < 50 && ::rmdir(path_.c_str()) != 0; i++) ::usleep(100000);  // its processes ending
  }
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // The limit, swap included where v1 can limit that too (v1 keeps memory <= memory+swap: lowered
  // first, raised last).
  void limit(int64_t bytes) const {
    const std::string memsw = path_ + "/memory.memsw.limit_in_bytes";
    const bool has_memsw = std::filesystem::exists(memsw);
    if (has_memsw && bytes > current(memsw)) write_file(memsw, std::to_string(bytes));
    write_file(path_ + "/" + limit_file_, std::to_string(bytes));
    if (has_memsw) write_file(memsw, std::to_string(bytes));
  }
  // `/bin/sh -c` text that runs argv inside the cgroup (the shell moves itself in, then execs).
  std::string command(const std::vector<std::string>& argv) const {
    std::string cmd = "echo $$ > " + path_ + "/cgroup.procs && exec";
    for (const auto& a : argv) cmd += " '" + a + "'";
    return cmd;
  }

 private:
  static int64_t current(const std::string& file) {
    std::ifstream f(file);
    int64_t v = 0;
    f >> v;
    return v;
  }
  std::string path_, limit_file_;
};

}  // namespace llamatrain::testing
