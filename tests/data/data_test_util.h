// Small helpers shared by the data tests: fixture paths, temporary folders, whole-file reads and
// writes, running the llamatrain binary. Tests only.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
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

}  // namespace llamatrain::testing
