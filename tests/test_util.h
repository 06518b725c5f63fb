// Everything tests share: fixture and golden paths, temporary folders, whole-file reads and writes,
// running the llamatrain binary (through a shell, or with an argument list and stdout / stderr kept
// apart) and the check that a user's mistake ended in a plain error; and what a test needs from the
// machine beyond the build (Debian's /usr/bin/python3 with given modules for the independent Python
// references in tools/reference/, or a program on PATH), each returning "" when the need is met,
// else the reason to skip, naming the Debian package that provides it:
//   if (auto why = python_missing({"numpy"}); !why.empty()) GTEST_SKIP() << why;
// scripts/setup.sh installs everything these look for, and scripts/fresh_machine_test.sh checks that
// nothing skips there. Tests only.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

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
  for (const auto& n : names) EXPECT_NE(r.err.find(n), std::string::npos) << "missing '" << n << "' in\n" << describe(r);
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
    return "needs /usr/bin/python3, which is not installed" + hint + "python3 python3-numpy python3-torch "
           "python3-sentencepiece)";
  static std::map<std::string, bool> found;  // module -> installed, cached for the process
  std::string missing, packages;
  for (std::string_view m : modules) {
    auto it = found.find(std::string(m));
    if (it == found.end()) {
      std::string cmd = py + " -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)' " +
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
  return "needs `" + std::string(program) + "`, which is not on PATH\nhint: install with `bash scripts/setup.sh` "
         "(Debian/Ubuntu package: " + std::string(debian_package) + ")";
}

}  // namespace llamatrain::testing
