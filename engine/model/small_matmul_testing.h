// Test hooks for PackedLinear (small_matmul.h): which kernel Apply runs. By default the fastest
// this CPU has (8-row tiles with AVX-512, 2-row with AVX2 + FMA, else 1-row); tests switch to
// each of the others so that every kernel is checked on one machine. Not for use while another
// thread calls Apply.
#ifndef MNEMO_ENGINE_MODEL_SMALL_MATMUL_TESTING_H_
#define MNEMO_ENGINE_MODEL_SMALL_MATMUL_TESTING_H_

#include <vector>

namespace mnemo::model {

enum class PackedKernel { kGeneric, kAvx2, kAvx512 };

// The kernels this CPU can run, slowest first; the last is the default.
std::vector<PackedKernel> AvailablePackedKernels();
// Makes Apply use `kernel` (one of AvailablePackedKernels()); returns the one in use before.
PackedKernel SetPackedKernelForTesting(PackedKernel kernel);
PackedKernel PackedKernelInUse();

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_SMALL_MATMUL_TESTING_H_
