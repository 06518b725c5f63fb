// What a test needs from the machine beyond the build: Debian's /usr/bin/python3 with given modules
// (the independent Python references in tools/reference/), or a program on PATH. Each helper returns
// "" when the need is met, else the reason to skip, naming the Debian package that provides it:
//   if (auto why = python_missing({"numpy"}); !why.empty()) GTEST_SKIP() << why;
// scripts/setup.sh installs everything these look for, and scripts/fresh_machine_test.sh checks that
// nothing skips there. Tests only.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <system_error>

namespace llamatrain::testing {

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
