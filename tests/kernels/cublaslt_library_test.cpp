// kernels/cuda/cublaslt_library.h: cuBLASLt is opened on the first matmul, not at program start (the
// commands that never touch the GPU should not carry its ~200 MB), and a missing or wrong library is
// an error that names what was tried and the fix. Needs the CUDA toolkit's library, not a GPU.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "kernels/cuda/cublaslt_library.h"

namespace llamatrain {
namespace {

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

std::string error_of(const std::vector<std::string>& candidates) {
  try {
    cuda::detail::open_cublaslt(candidates);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CublasLtLibrary, OpensOnFirstUseNotAtStart) {
  EXPECT_FALSE(mapped("libcublasLt")) << "the program loaded cuBLASLt before anything asked for it";
  const cuda::detail::CublasLt& lt = cuda::detail::cublaslt();
  EXPECT_TRUE(mapped("libcublasLt"));
  EXPECT_NE(lt.handle, nullptr);
  for (const void* f :
       {reinterpret_cast<const void*>(lt.create), reinterpret_cast<const void*>(lt.matmul),
        reinterpret_cast<const void*>(lt.algo_get_heuristic), reinterpret_cast<const void*>(lt.desc_create),
        reinterpret_cast<const void*>(lt.desc_set_attribute), reinterpret_cast<const void*>(lt.layout_create),
        reinterpret_cast<const void*>(lt.preference_create), reinterpret_cast<const void*>(lt.preference_destroy),
        reinterpret_cast<const void*>(lt.preference_set_attribute)})
    EXPECT_NE(f, nullptr);
  EXPECT_EQ(&lt, &cuda::detail::cublaslt()) << "opened once";
}

TEST(CublasLtLibrary, TheSonameOfTheBuildsVersionComesFirst) {
  const auto names = cuda::detail::cublaslt_candidates();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
}

TEST(CublasLtLibrary, AMissingLibraryNamesEveryTryAndTheFix) {
  const std::string e = error_of({"/nonexistent/libcublasLt.so.99", "libcublasLt_not_here.so.1"});
  EXPECT_NE(e.find("cannot load cuBLASLt"), std::string::npos) << e;
  EXPECT_NE(e.find("/nonexistent/libcublasLt.so.99"), std::string::npos) << e;
  EXPECT_NE(e.find("libcublasLt_not_here.so.1"), std::string::npos) << e;
  EXPECT_NE(e.find("LD_LIBRARY_PATH"), std::string::npos) << e;
}

TEST(CublasLtLibrary, ALibraryWithoutItsFunctionsIsRefusedAndTheNextTried) {
  const std::string e = error_of({"libz.so.1"});
  EXPECT_NE(e.find("libz.so.1: lacks cublasLtCreate"), std::string::npos) << e;
  // the first that works is taken, after one that does not
  const auto lt = cuda::detail::open_cublaslt({"libz.so.1", cuda::detail::cublaslt_candidates()[0]});
  EXPECT_EQ(lt.path, cuda::detail::cublaslt_candidates()[0]);
  EXPECT_NE(lt.matmul, nullptr);
}

}  // namespace
}  // namespace llamatrain
