// The CPU kernels' variant (kernels/cpu/variant.h, dispatch.cpp): the widest this CPU has unless
// LLAMATRAIN_CPU_KERNELS picks one, named by bench; a variant this CPU or build lacks, or a value that
// names none, is a plain error naming the variable and the fix. Whether each variant computes what
// the reference does: every cpu_vs_ref test runs again with LLAMATRAIN_CPU_KERNELS=avx2 (*.avx2).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "kernels/cpu/ops.h"
#include "test_util.h"

using namespace llamatrain;

namespace {

bool cpu_has_avx512() {  // what the portable build requires of the avx512 variant, from /proc/cpuinfo
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream in(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; in >> w;) flags.insert(w);
    for (const char* need : {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})
      if (!flags.count(need)) return false;
    return true;
  }
  return false;
}

// The variant a tiny bench run names, or the run's error.
llamatrain::testing::CliResult bench_with(const char* variant) {
  if (variant != nullptr)
    ::setenv("LLAMATRAIN_CPU_KERNELS", variant, 1);
  else
    ::unsetenv("LLAMATRAIN_CPU_KERNELS");
  return llamatrain::testing::run_cli(
      {"bench", "--model", "tiny", "--seq", "16", "--batch", "2", "--steps", "1", "--json"});
}

bool dual_build() {
  ::unsetenv("LLAMATRAIN_CPU_KERNELS");
  const std::string v = cpu::cpu_kernels_variant();
  return v == "avx2" || v == "avx512";
}

}  // namespace

TEST(CpuVariant, TheWidestThisCpuHasUnlessOneIsPicked) {
  if (!dual_build()) GTEST_SKIP() << "a build with one CPU variant (" << cpu::cpu_kernels_variant() << ")";
  const std::string widest = cpu_has_avx512() ? "avx512" : "avx2";
  for (const char* pick : {static_cast<const char*>(nullptr), "auto", "avx2", "avx512"}) {
    if (pick != nullptr && std::string(pick) == "avx512" && widest != "avx512") continue;  // the next test
    const auto r = bench_with(pick);
    ASSERT_TRUE(r.exited && r.code == 0) << (pick ? pick : "unset") << "\n" << llamatrain::testing::describe(r);
    const std::string expect = pick == nullptr || std::string(pick) == "auto" ? widest : pick;
    EXPECT_NE(r.out.find("\"cpu_kernels\":\"" + expect + "\""), std::string::npos)
        << (pick ? pick : "unset") << ": " << r.out;
  }
  ::unsetenv("LLAMATRAIN_CPU_KERNELS");
}

TEST(CpuVariant, AVariantThisCpuLacksOrNoVariantIsAPlainError) {
  if (!dual_build()) GTEST_SKIP() << "a build with one CPU variant (" << cpu::cpu_kernels_variant() << ")";
  {
    const auto r = bench_with("avx9000");
    EXPECT_TRUE(r.exited && r.code == 1) << llamatrain::testing::describe(r);
    EXPECT_NE(r.err.find("LLAMATRAIN_CPU_KERNELS=avx9000: expected auto, avx2 or avx512"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("hint: unset it"), std::string::npos) << r.err;
  }
  if (!cpu_has_avx512()) {
    const auto r = bench_with("avx512");
    EXPECT_TRUE(r.exited && r.code == 1) << llamatrain::testing::describe(r);
    EXPECT_NE(r.err.find("LLAMATRAIN_CPU_KERNELS=avx512, but this CPU lacks AVX-512"), std::string::npos) << r.err;
  }
  ::unsetenv("LLAMATRAIN_CPU_KERNELS");
}
