#include "engine/util/cpu_backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace mnemo::util {

std::string BestOpenBlasCoreType() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

std::string LoadedOpenBlasCoreType() {
  using CoreName = char* (*)();
  auto fn = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (fn == nullptr) return "";
  const char* name = fn();
  return name == nullptr ? "" : name;
}

void EnsureFastBlas(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv("MNEMO_KEEP_BLAS_CORE") != nullptr) {
    return;
  }
  const std::string best = BestOpenBlasCoreType();
  const std::string loaded = LoadedOpenBlasCoreType();
  if (best.empty() || loaded.empty()) return;
  // Kernels OpenBLAS only picks when it does not recognise a modern CPU.
  static const char* kFallbacks[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                     "Atom", "Katmai", "Coppermine", "Northwood", "Banias"};
  bool fallback = false;
  for (const char* name : kFallbacks) {
    if (strcasecmp(loaded.c_str(), name) == 0) fallback = true;
  }
  if (!fallback) return;
  ::setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  // execv failed: carry on with the slow kernels rather than fail.
}

}  // namespace mnemo::util
