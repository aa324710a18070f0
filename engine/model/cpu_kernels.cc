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

}  // namespace

std::vector<CpuKernel> AvailableCpuKernels() {
  std::vector<CpuKernel> kernels{CpuKernel::kGeneric};
  if (kBestKernel != CpuKernel::kGeneric) kernels.push_back(CpuKernel::kAvx2);
  if (kBestKernel == CpuKernel::kAvx512) kernels.push_back(CpuKernel::kAvx512);
  return kernels;
}

CpuKernel CpuKernelInUse() { return kernel_in_use.load(std::memory_order_relaxed); }

CpuKernel SetCpuKernelForTesting(CpuKernel kernel) { return kernel_in_use.exchange(kernel); }

std::string CpuKernelName(CpuKernel kernel) {
  switch (kernel) {
    case CpuKernel::kAvx512: return "avx512";
    case CpuKernel::kAvx2: return "avx2";
    default: return "generic";
  }
}

}  // namespace mnemo::model
