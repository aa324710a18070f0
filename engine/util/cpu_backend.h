// Making LibTorch's CPU runtime fit the machine it runs on.
//
// Debian's OpenBLAS picks its kernels from the CPU model at load time. On virtual machines
// that report a generic model ("Intel Xeon Processor") it falls back to its Prescott (SSE3)
// kernels: a 512^3 matmul takes 11 ms instead of 2.7 ms, a 1x256x768 product 86 us instead
// of 7 us. OPENBLAS_CORETYPE overrides the choice, but OpenBLAS reads it before main() runs,
// so a binary that finds the wrong kernels restarts itself once with the variable set.
//
// LibTorch's OpenMP threads also spin while they wait for work. When anything else runs on the
// same cores (gRPC threads, a second process, a CI build) two spinning threads on two cores
// are 9x slower than one thread (training: 67 vs 602 tokens/s on this 2-core machine under
// load); with OMP_WAIT_POLICY=PASSIVE they sleep instead (461 tokens/s). The same restart sets
// it unless the environment already says otherwise.
//
// Training is the opposite case: big operations back to back, each ending in a barrier, where
// sleeping at every barrier costs more than a short spin. With GOMP_SPINCOUNT=1000 (threads
// spin ~1,000 iterations, then sleep) the trainer runs 1,612 tokens/s against 1,387 passive
// on an idle 2-core machine, and 920 against 785 beside a busy process (fully active: 1,680
// idle, 253 busy). ConfigureCpuRuntime(argv, CpuWorkload::kTraining) sets it unless
// GOMP_SPINCOUNT is set or OMP_WAIT_POLICY asks for something other than PASSIVE
// (GOMP_SPINCOUNT=0 keeps the trainer fully passive).
//
// Denormal floats (|x| < 1.2e-38) take a microcode slow path in every x86 multiply. Training
// produces them as attention sharpens (tiny softmax probabilities and their gradients): the
// trainer fell from 1,450 to ~700 tokens/s within 200 steps, and resuming the same checkpoint
// ran 40 steps with flush-to-zero in the time 23 ran without. ConfigureCpuRuntime sets FTZ and
// DAZ (denormals read and written as 0) unless MNEMO_KEEP_DENORMALS is set.
//
// glibc maps every block above its mmap threshold (128 KiB at first) afresh, zero-filled by the
// kernel on first touch: a prompt's per-layer score matrices paid page faults on every prefill.
// ConfigureCpuRuntime keeps blocks up to 32 MiB on the heap, and up to 256 MiB of freed heap for
// reuse (256-token prompt: 45.7 -> 39.2 ms), unless MNEMO_KEEP_MALLOC is set.
#ifndef MNEMO_ENGINE_UTIL_CPU_BACKEND_H_
#define MNEMO_ENGINE_UTIL_CPU_BACKEND_H_

#include <string>

namespace mnemo::util {

// The OpenBLAS core type this CPU supports best ("SkylakeX", "Haswell"), or "" if unknown.
std::string BestOpenBlasCoreType();

// The core type OpenBLAS chose in this process, or "" if OpenBLAS is not loaded.
std::string LoadedOpenBlasCoreType();

// The variables ConfigureCpuRuntime may set before restarting the program. A process started
// with them already set does not restart (tools/cpu_env_main.cc prints them for a machine).
inline constexpr const char* kCpuRuntimeVariables[] = {"OPENBLAS_CORETYPE", "OMP_WAIT_POLICY",
                                                       "GOMP_SPINCOUNT"};

// What the process spends its threads on: kServing (many small operations among other
// threads: OpenMP threads sleep while they wait) or kTraining (large operations back to back:
// they spin briefly first). See above.
enum class CpuWorkload { kServing, kTraining };

// Call first thing in main(), before any thread starts. Flushes denormals to zero and sets the
// heap thresholds above. If OpenBLAS chose kernels older than the CPU supports (and
// OPENBLAS_CORETYPE is unset), or OMP_WAIT_POLICY is unset, or (kTraining) GOMP_SPINCOUNT is
// unset while the wait policy is unset or PASSIVE, sets them and re-executes the program (does
// not return then). MNEMO_KEEP_CPU_RUNTIME=1 keeps the environment as it is.
void ConfigureCpuRuntime(char** argv, CpuWorkload workload = CpuWorkload::kServing);

}  // namespace mnemo::util

#endif  // MNEMO_ENGINE_UTIL_CPU_BACKEND_H_
