#include "engine/util/cpu_backend.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <dlfcn.h>
#include <malloc.h>
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

namespace {

// Kernels OpenBLAS only picks when it does not recognise a modern CPU.
bool IsFallbackCore(const std::string& core) {
  static const char* kFallbacks[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                     "Atom", "Katmai", "Coppermine", "Northwood", "Banias"};
  for (const char* name : kFallbacks) {
    if (strcasecmp(core.c_str(), name) == 0) return true;
  }
  return false;
}

// Tensors above glibc's mmap threshold (128 KiB at first) get fresh pages from the kernel,
// zero-filled on first touch, every time: a prefill's score matrices (MBs, allocated and freed
// per layer) spent 6% of a 256-token prompt in page faults. Up to 32 MiB (glibc's ceiling) they
// now come from the heap, and up to 256 MiB of freed heap is kept for reuse rather than handed
// back. Larger blocks (long sessions' rings) are still mapped and unmapped as before.
void KeepLargeBlocksOnTheHeap() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace

void FlushDenormalsToZero() {
#if defined(__SSE__)
  // FTZ (bit 15): denormal results become 0; DAZ (bit 6): denormal inputs read as 0.
  _mm_setcsr(_mm_getcsr() | 0x8040);
#endif
}

void ConfigureCpuRuntime(char** argv, CpuWorkload workload) {
  // Threads inherit the floating-point environment of the thread that creates them, so doing
  // this before LibTorch or OpenMP start any thread covers every worker.
  if (std::getenv("MNEMO_KEEP_DENORMALS") == nullptr) FlushDenormalsToZero();
  if (std::getenv("MNEMO_KEEP_MALLOC") == nullptr) KeepLargeBlocksOnTheHeap();
  if (std::getenv("MNEMO_KEEP_CPU_RUNTIME") != nullptr) return;
  bool changed = false;
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    const std::string best = BestOpenBlasCoreType();
    if (!best.empty() && IsFallbackCore(LoadedOpenBlasCoreType())) {
      ::setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
      changed = true;
    }
  }
  if (workload == CpuWorkload::kTraining && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    if (policy == nullptr || strcasecmp(policy, "PASSIVE") == 0) {
      ::setenv("GOMP_SPINCOUNT", "1000", 1);  // overrides PASSIVE's zero spin in libgomp
      changed = true;
    }
  }
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    changed = true;
  }
  if (!changed) return;
  ::execv("/proc/self/exe", argv);
  // execv failed: carry on with the runtime as it is rather than fail.
}

}  // namespace mnemo::util
