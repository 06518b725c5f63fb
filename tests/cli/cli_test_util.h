// Runs the llamatrain binary ($LLAMATRAIN_BIN) with an argument list (no shell) and captures how it
// ended (exit code or signal), stdout and stderr separately; and the check that a user's mistake
// ended in a plain error: a normal exit with a status from 1 to 125, an "error: " line naming what was
// wrong, and none of the marks of a crash (abort, uncaught exception, CHECK). Tests only.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace llamatrain::testing {

struct CliResult {
  bool exited = false;  // false: killed by a signal
  int code = -1;        // exit status when exited
  int signal = 0;       // the signal otherwise
  std::string out, err;
};

inline std::string cli_binary() {
  const char* b = std::getenv("LLAMATRAIN_BIN");
  return b ? b : std::string(LLAMATRAIN_BINARY_DIR) + "/llamatrain";
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Runs `llamatrain ARGS...`; stdin is /dev/null. Output goes through temporary files (no pipe to fill).
inline CliResult run_cli(const std::vector<std::string>& args) {
  std::string dir = std::string(LLAMATRAIN_BINARY_DIR) + "/tmp_cli_XXXXXX";
  if (!::mkdtemp(dir.data())) return {};
  const std::string out_path = dir + "/out", err_path = dir + "/err";
  const std::string bin = cli_binary();
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

// A fresh folder under the build dir, removed at the end of the test.
class CliTempDir {
 public:
  CliTempDir() {
    path_ = std::string(LLAMATRAIN_BINARY_DIR) + "/tmp_cli_test_XXXXXX";
    if (!::mkdtemp(path_.data())) ADD_FAILURE() << "mkdtemp";
  }
  ~CliTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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

}  // namespace llamatrain::testing
