#include "engine/model/cpu_kernels.h"

#include <atomic>

namespace mnemo::model {
namespace {

CpuKernel BestKernel() {
  if (__builtin_cpu_supports("avx512f")) return CpuKernel::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    return CpuKernel::kAvx2;  // (F16C: HostAttention's float16 rings)
  }
  return CpuKernel::kGeneric;
}

const CpuKernel kBestKernel = BestKernel();
std::atomic<CpuKernel> kernel_in_use{kBestKernel};
const bool kHasBf16Dot =
    __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
std::atomic<bool> bf16_dot_allowed{true};

}  // namespace

std::vector<CpuKernel> AvailableCpuKernels() {
  std::vector<CpuKernel> kernels{CpuKernel::kGeneric};
  if (kBestKernel != CpuKernel::kGeneric) kernels.push_back(CpuKernel::kAvx2);
  if (kBestKernel == CpuKernel::kAvx512) kernels.push_back(CpuKernel::kAvx512);
  return kernels;
}

CpuKernel CpuKernelInUse() { return kernel_in_use.load(std::memory_order_relaxed); }

CpuKernel SetCpuKernelForTesting(CpuKernel kernel) { return kernel_in_use.exchange(kernel); }

bool CpuHasBf16Dot() { return kHasBf16Dot; }

bool Bf16DotInUse() {
  return kHasBf16Dot && CpuKernelInUse() == CpuKernel::kAvx512 &&
         bf16_dot_allowed.load(std::memory_order_relaxed);
}

bool SetBf16DotForTesting(bool allowed) { return bf16_dot_allowed.exchange(allowed); }

std::string CpuKernelName(CpuKernel kernel) {
  switch (kernel) {
    case CpuKernel::kAvx512: return "avx512";
    case CpuKernel::kAvx2: return "avx2";
    default: return "generic";
  }
}

}  // namespace mnemo::model
