#include "engine/model/host_gelu.h"

#include <c10/core/GradMode.h>

#include "engine/model/cpu_kernels.h"
#include "engine/model/simd.h"

namespace mnemo::model {
namespace {

template <typename V>
inline __attribute__((always_inline)) V GeluOf(V x) {
  return x * simd::NormalCdf(x);
}

// gelu over x[0, n) in vectors V, the n % lanes tail through a zero-padded vector. (No lambdas:
// they would not inherit the kernel's target and could not take its vectors.)
template <typename V>
inline __attribute__((always_inline)) void GeluVectors(float* x, int64_t n) {
  constexpr int kLanes = simd::kLanes<V>;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) simd::Store<V>(x + i, GeluOf(simd::Load<V>(x + i)));
  if (i < n) {
    float tail[kLanes] = {};
    for (int64_t j = i; j < n; ++j) tail[j - i] = x[j];
    const V done = GeluOf(simd::Load<V>(tail));
    for (int64_t j = i; j < n; ++j) x[j] = done[j - i];
  }
}

__attribute__((target("avx512f"))) void GeluAvx512(float* x, int64_t n) {
  GeluVectors<simd::V16>(x, n);
}

__attribute__((target("avx2,fma"))) void GeluAvx2(float* x, int64_t n) {
  GeluVectors<simd::V8>(x, n);
}

void GeluGeneric(float* x, int64_t n) { GeluVectors<simd::V4>(x, n); }

}  // namespace

void GeluInPlace(float* x, int64_t n) {
  switch (CpuKernelInUse()) {
    case CpuKernel::kAvx512: return GeluAvx512(x, n);
    case CpuKernel::kAvx2: return GeluAvx2(x, n);
    default: return GeluGeneric(x, n);
  }
}

bool GeluOnHost(const torch::Tensor& x) {
  return x.defined() && x.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
         x.is_contiguous() && x.numel() <= kHostGeluMaxElements &&
         !(c10::GradMode::is_enabled() && x.requires_grad());
}

torch::Tensor Gelu(torch::Tensor x) {
  if (!GeluOnHost(x)) return torch::gelu(x);
  GeluInPlace(x.data_ptr<float>(), x.numel());
  return x;
}

}  // namespace mnemo::model
