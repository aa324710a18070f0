// Making LibTorch's BLAS use the CPU it runs on.
//
// Debian's OpenBLAS picks its kernels from the CPU model at load time. On virtual machines
// that report a generic model ("Intel Xeon Processor") it falls back to its Prescott (SSE3)
// kernels: a 512^3 matmul takes 11 ms instead of 2.7 ms, a 1x256x768 product 86 us instead
// of 7 us. OPENBLAS_CORETYPE overrides the choice, but OpenBLAS reads it before main() runs,
// so a binary that finds the wrong kernels restarts itself once with the variable set.
#ifndef MNEMO_ENGINE_UTIL_CPU_BACKEND_H_
#define MNEMO_ENGINE_UTIL_CPU_BACKEND_H_

#include <string>

namespace mnemo::util {

// The OpenBLAS core type this CPU supports best ("SkylakeX", "Haswell"), or "" if unknown.
std::string BestOpenBlasCoreType();

// The core type OpenBLAS chose in this process, or "" if OpenBLAS is not loaded.
std::string LoadedOpenBlasCoreType();

// Call first thing in main(). If OpenBLAS chose kernels older than the CPU supports and
// OPENBLAS_CORETYPE is unset, re-executes the program with it set (does not return then).
// Set MNEMO_KEEP_BLAS_CORE=1 to keep OpenBLAS's own choice.
void EnsureFastBlas(char** argv);

}  // namespace mnemo::util

#endif  // MNEMO_ENGINE_UTIL_CPU_BACKEND_H_
