// GELU on the host: x * Phi(x) = x/2 * erfc(-x / sqrt 2), the exact (erf) form torch::gelu
// computes by default, in vectors (simd::NormalCdf: under 5e-7 relative error).
//
// Why not torch::gelu always: on a float32 CPU tensor LibTorch 1.13 hands it to oneDNN, which
// builds a primitive descriptor on every call, ~6.5 us however small the tensor: for one
// 1,024-wide decode row that is 5-6% of the step (once per layer). This pass takes ~1 us per
// 1,024 floats, so it wins up to ~12 rows (measured, one thread: 1 row 1.0 vs 8.5 us, 4 rows 4.2
// vs 10.6, 8 rows 8.3 vs 12.7, 16 rows 19 vs 14, 64 rows 82 vs 47); prompts keep oneDNN.
//
// Stateless and thread-safe; follows the instruction set cpu_kernels.h picks.
#ifndef MNEMO_ENGINE_MODEL_HOST_GELU_H_
#define MNEMO_ENGINE_MODEL_HOST_GELU_H_

#include <torch/types.h>

#include <cstdint>

namespace mnemo::model {

// x[i] = gelu(x[i]) for i < n.
void GeluInPlace(float* x, int64_t n);

// Most elements Gelu computes on the host (8 rows of 1,024): above, oneDNN is faster.
inline constexpr int64_t kHostGeluMaxElements = 8192;

// Whether Gelu computes on the host: float32, contiguous, on the CPU, outside autograd, at most
// kHostGeluMaxElements.
bool GeluOnHost(const torch::Tensor& x);

// gelu(x): in place on the host when GeluOnHost(x) (x's values replaced; returns x), else
// torch::gelu(x) (a new tensor).
torch::Tensor Gelu(torch::Tensor x);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_HOST_GELU_H_
