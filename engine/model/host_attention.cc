#include "engine/model/host_attention.h"

#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/model/cpu_kernels.h"
#include "engine/model/simd.h"

namespace mnemo::model {
namespace {

// A ring element as a float (the kernels' scalar tails and the generic half load).
inline __attribute__((always_inline)) float RingValue(float x) { return x; }
inline __attribute__((always_inline)) float RingValue(uint16_t half) {
  return c10::detail::fp16_ieee_to_fp32_value(half);
}

// The kernel (host_attention_kernel.inc) once per instruction set (cpu_kernels.h), each with
// its registers' width.
// GCC 12 warns that the AVX-512 half conversions' intrinsics (avx512fintrin.h) read an
// uninitialised operand: their "undefined" pass-through vector, which the full mask never reads.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f")
namespace avx512 {
using V = simd::V16;
#include "engine/model/host_attention_kernel.inc"
}  // namespace avx512
#pragma GCC pop_options
#pragma GCC diagnostic pop

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
using V = simd::V8;
#include "engine/model/host_attention_kernel.inc"
}  // namespace avx2
#pragma GCC pop_options

namespace generic {
using V = simd::V4;
#include "engine/model/host_attention_kernel.inc"
}  // namespace generic

}  // namespace

void HostAttention(const float* u_bias, const float* v_bias, const float* table,
                   const HostAttentionShape& shape, absl::Span<const HostAttentionRow> rows,
                   float* y) {
  const int64_t count = static_cast<int64_t>(rows.size());
  // Work of one (row, head), in multiply-adds: three dh-long products per visible slot.
  int64_t work = 0;
  for (const HostAttentionRow& row : rows) work += static_cast<int64_t>(row.distances.size());
  work *= 3 * shape.d_head * shape.heads;
  // Below ~64K multiply-adds the whole step costs less than waking the pool's threads.
  const int64_t items = count * shape.heads;
  const int64_t grain = work < (int64_t{1} << 16) ? std::max<int64_t>(items, 1) : 1;
  const CpuKernel kernel = CpuKernelInUse();
  at::parallel_for(0, items, grain, [&](int64_t begin, int64_t end) {
    switch (kernel) {
      case CpuKernel::kAvx512:
        avx512::AttendItems(u_bias, v_bias, table, shape, rows, y, begin, end);
        break;
      case CpuKernel::kAvx2:
        avx2::AttendItems(u_bias, v_bias, table, shape, rows, y, begin, end);
        break;
      default:
        generic::AttendItems(u_bias, v_bias, table, shape, rows, y, begin, end);
        break;
    }
  });
}

namespace {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // as for the avx512 kernel above
__attribute__((target("avx512f"))) void FloatsToHalvesAvx512(const float* from, uint16_t* to,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i half = _mm512_cvtps_ph(_mm512_loadu_ps(from + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i), half);
  }
  for (; i < n; ++i) to[i] = c10::detail::fp16_ieee_from_fp32_value(from[i]);
}
#pragma GCC diagnostic pop

__attribute__((target("avx2,f16c"))) void FloatsToHalvesF16c(const float* from, uint16_t* to,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(from + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i), half);
  }
  for (; i < n; ++i) to[i] = c10::detail::fp16_ieee_from_fp32_value(from[i]);
}

}  // namespace

void FloatsToHalves(const float* from, uint16_t* to, int64_t n) {
  switch (CpuKernelInUse()) {
    case CpuKernel::kAvx512: FloatsToHalvesAvx512(from, to, n); break;
    case CpuKernel::kAvx2: FloatsToHalvesF16c(from, to, n); break;
    default:
      for (int64_t i = 0; i < n; ++i) to[i] = c10::detail::fp16_ieee_from_fp32_value(from[i]);
      break;
  }
}

}  // namespace mnemo::model
