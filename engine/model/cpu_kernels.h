// Which instruction set the hand-written CPU kernels use: PackedLinear (small_matmul.h) and
// HostAttention (host_attention.h) each have one kernel per CpuKernel, and all of them follow
// the one choice made here. By default the fastest this CPU has, found once; tests switch to
// each of the others so that every kernel is checked on one machine.
#ifndef MNEMO_ENGINE_MODEL_CPU_KERNELS_H_
#define MNEMO_ENGINE_MODEL_CPU_KERNELS_H_

#include <string>
#include <vector>

namespace mnemo::model {

enum class CpuKernel {
  kGeneric,  // SSE (any x86-64), 4-float vectors
  kAvx2,     // AVX2 + FMA (+ F16C), 8-float vectors
  kAvx512,   // AVX-512F, 16-float vectors
};

// The kernels this CPU can run, slowest first; the last is the default.
std::vector<CpuKernel> AvailableCpuKernels();
// The kernel in use (read by every kernel call).
CpuKernel CpuKernelInUse();
// For tests: makes every kernel call use `kernel` (one of AvailableCpuKernels()); returns the
// one in use before. Not while another thread runs a kernel.
CpuKernel SetCpuKernelForTesting(CpuKernel kernel);
// "generic", "avx2", "avx512".
std::string CpuKernelName(CpuKernel kernel);

// Whether this CPU has AVX512-BF16's dot product (vdpbf16ps: two bfloat16 products added to a
// float32 lane per instruction).
bool CpuHasBf16Dot();
// Whether PackedLinear's bfloat16 strips use that dot product: where the CPU has it, the kernel
// in use is kAvx512, and tests have not turned it off. Otherwise the strips are widened and
// multiplied with the kernel's float32 multiply-adds: the same products (a bfloat16 times a
// bfloat16 is exact in float32), summed in another order.
bool Bf16DotInUse();
// For tests: whether the dot product may be used (only where the CPU has it); returns the
// setting before. Not while another thread runs a kernel.
bool SetBf16DotForTesting(bool allowed);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_CPU_KERNELS_H_
