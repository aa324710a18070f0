// OnEachCpuKernel: a parameterised fixture whose tests run once on each kernel this CPU can run
// (engine/model/cpu_kernels.h), the one in use switched for the test and restored after, so
// the kernels of CPUs without AVX-512 (or without AVX2) are checked on this machine too.
//
//   class MyKernelTest : public OnEachCpuKernel {};
//   TEST_P(MyKernelTest, ...) { ... }
//   INSTANTIATE_TEST_SUITE_P(Kernels, MyKernelTest, ::testing::ValuesIn(AvailableCpuKernels()),
//                            CpuKernelTestName);
#ifndef MNEMO_TESTS_ENGINE_MODEL_CPU_KERNEL_TEST_H_
#define MNEMO_TESTS_ENGINE_MODEL_CPU_KERNEL_TEST_H_

#include <gtest/gtest.h>

#include <string>

#include "engine/model/cpu_kernels.h"

namespace mnemo::model {

class OnEachCpuKernel : public ::testing::TestWithParam<CpuKernel> {
 protected:
  void SetUp() override { saved_ = SetCpuKernelForTesting(GetParam()); }
  void TearDown() override { SetCpuKernelForTesting(saved_); }

 private:
  CpuKernel saved_ = CpuKernel::kGeneric;
};

// "generic", "avx2", "avx512" as the test's suffix.
inline std::string CpuKernelTestName(const ::testing::TestParamInfo<CpuKernel>& info) {
  return CpuKernelName(info.param);
}

}  // namespace mnemo::model

#endif  // MNEMO_TESTS_ENGINE_MODEL_CPU_KERNEL_TEST_H_
