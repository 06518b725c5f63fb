// libcublasLt by dlopen (cublaslt_library.h).
#include "kernels/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include "core/error.h"

#ifndef LLAMATRAIN_CUBLASLT_PATH
#define LLAMATRAIN_CUBLASLT_PATH ""
#endif

namespace llamatrain::cuda::detail {

namespace {

template <typename F>
bool resolve(void* handle, F& f, const char* name, std::string& missing) {
  f = reinterpret_cast<F>(dlsym(handle, name));
  if (f == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  return f != nullptr;
}

// Every function, or the names of those the library lacks.
std::string resolve_all(CublasLt& lt) {
  std::string missing;
  resolve(lt.handle, lt.create, "cublasLtCreate", missing);
  resolve(lt.handle, lt.matmul, "cublasLtMatmul", missing);
  resolve(lt.handle, lt.algo_get_heuristic, "cublasLtMatmulAlgoGetHeuristic", missing);
  resolve(lt.handle, lt.desc_create, "cublasLtMatmulDescCreate", missing);
  resolve(lt.handle, lt.desc_set_attribute, "cublasLtMatmulDescSetAttribute", missing);
  resolve(lt.handle, lt.layout_create, "cublasLtMatrixLayoutCreate", missing);
  resolve(lt.handle, lt.preference_create, "cublasLtMatmulPreferenceCreate", missing);
  resolve(lt.handle, lt.preference_destroy, "cublasLtMatmulPreferenceDestroy", missing);
  resolve(lt.handle, lt.preference_set_attribute, "cublasLtMatmulPreferenceSetAttribute", missing);
  return missing;
}

}  // namespace

std::vector<std::string> cublaslt_candidates() {
  std::vector<std::string> names{"libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)};
  const std::string linked = LLAMATRAIN_CUBLASLT_PATH;
  if (!linked.empty() && linked != names[0]) names.push_back(linked);
  return names;
}

CublasLt open_cublaslt(const std::vector<std::string>& candidates) {
  std::string tried;
  for (const std::string& name : candidates) {
    CublasLt lt;
    lt.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lt.handle == nullptr) {
      const char* why = dlerror();
      tried += fmt::format("\n  {}: {}", name, why != nullptr ? why : "not found");
      continue;
    }
    const std::string missing = resolve_all(lt);
    if (missing.empty()) {
      lt.path = name;
      return lt;
    }
    tried +=
        fmt::format("\n  {}: lacks {} (another cuBLAS version than the build's, {})", name, missing, CUBLAS_VER_MAJOR);
    dlclose(lt.handle);
  }
  fail("the CUDA backend cannot load cuBLASLt (its matmuls), tried:{}\n"
       "hint: put the lib folder of the CUDA {} toolkit (or of the device bundle, scripts/device_bundle.sh) on "
       "LD_LIBRARY_PATH",
       tried, CUBLAS_VER_MAJOR);
}

const CublasLt& cublaslt() {
  static const CublasLt lt = open_cublaslt(cublaslt_candidates());
  return lt;
}

}  // namespace llamatrain::cuda::detail
