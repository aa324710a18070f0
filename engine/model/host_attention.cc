#include "engine/model/host_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/model/cpu_kernels.h"
#include "engine/model/simd.h"

namespace mnemo::model {
namespace {

using simd::Load;
using simd::Store;

// Slots scored together: that many independent pairs of accumulators keep the multiply-adds
// from waiting on each other (one slot's d_head-long products form a chain).
constexpr int kSlotBlock = 4;

// scores[p] = qu . keys[p] + qv . table[distances[p]] for the P slots whose keys follow each
// other from `keys` (row stride dh), in vectors V; the dh % lanes tail in scalars.
template <typename V, int P>
inline __attribute__((always_inline)) void ScoreSlots(const float* qu, const float* qv,
                                                      const float* keys, const float* table,
                                                      const int64_t* distances, int64_t dh,
                                                      float* scores) {
  constexpr int kLanes = simd::kLanes<V>;
  const float* positions[P];
  V content[P], position[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    positions[p] = table + distances[p] * dh;
    content[p] = V{};
    position[p] = V{};
  }
  int64_t i = 0;
  for (; i + kLanes <= dh; i += kLanes) {
    const V u = Load<V>(qu + i), v = Load<V>(qv + i);
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      content[p] += u * Load<V>(keys + p * dh + i);
      position[p] += v * Load<V>(positions[p] + i);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    float tail = 0.0f;
    for (int64_t t = i; t < dh; ++t) tail += qu[t] * keys[p * dh + t] + qv[t] * positions[p][t];
    scores[p] = simd::Sum(content[p] + position[p]) + tail;
  }
}

// out[i, i + G * lanes) = scale * sum_j weights[j] values_j[i, i + G * lanes) over the row's
// visible slots in span order (the value rings v_raw, v_cmp). Each slot's G vectors in one
// pass, so a slot's values are read once (for long windows they come from L2 or further); two
// slots at a time into two sets of accumulators, so the multiply-adds do not wait on each other.
template <typename V, int G>
inline __attribute__((always_inline)) void WeightedValues(const float* weights,
                                                          const HostAttentionRow& row,
                                                          const float* v_raw, const float* v_cmp,
                                                          int64_t dh, int64_t i, float scale,
                                                          float* out) {
  constexpr int kLanes = simd::kLanes<V>;
  V even[G] = {}, odd[G] = {};
  int64_t j = 0;
  for (const RingSpan& span : row.spans) {
    const float* values = (span.compressed ? v_cmp : v_raw) + span.start * dh + i;
    int64_t s = 0;
    for (; s + 2 <= span.length; s += 2, j += 2) {
      const float* first = values + s * dh;
      const float* second = first + dh;
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        even[g] += weights[j] * Load<V>(first + g * kLanes);
        odd[g] += weights[j + 1] * Load<V>(second + g * kLanes);
      }
    }
    if (s < span.length) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) even[g] += weights[j] * Load<V>(values + s * dh + g * kLanes);
      ++j;
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) Store<V>(out + i + g * kLanes, (even[g] + odd[g]) * scale);
}

// One (row, head): scores into `scratch` (resized), then the weighted sum into out [dh].
template <typename V>
inline __attribute__((always_inline)) void AttendOne(const float* u_bias, const float* v_bias,
                                                     float scale, const float* table, int64_t dh,
                                                     const HostAttentionRow& row, int64_t head,
                                                     std::vector<float>& scratch, float* out) {
  constexpr int kLanes = simd::kLanes<V>;
  const int64_t width = static_cast<int64_t>(row.distances.size());
  scratch.resize(width + 2 * dh);
  float* scores = scratch.data();
  float* qu = scores + width;  // the scaled queries, after the scores
  float* qv = qu + dh;
  const float* q = row.query + head * row.query_head_stride;
  for (int64_t i = 0; i < dh; ++i) {
    qu[i] = (q[i] + u_bias[i]) * scale;
    qv[i] = (q[i] + v_bias[i]) * scale;
  }
  std::fill(out, out + dh, 0.0f);
  if (width == 0) return;
  const float* k_raw = row.k_raw + head * row.raw_capacity * dh;
  const float* k_cmp = row.k_cmp == nullptr ? nullptr : row.k_cmp + head * row.cmp_capacity * dh;
  const int64_t* distances = row.distances.data();
  int64_t j = 0;
  for (const RingSpan& span : row.spans) {
    const float* keys = (span.compressed ? k_cmp : k_raw) + span.start * dh;
    int64_t s = 0;
    for (; s + kSlotBlock <= span.length; s += kSlotBlock, j += kSlotBlock) {
      ScoreSlots<V, kSlotBlock>(qu, qv, keys + s * dh, table, distances + j, dh, scores + j);
    }
    for (; s < span.length; ++s, ++j) {
      ScoreSlots<V, 1>(qu, qv, keys + s * dh, table, distances + j, dh, scores + j);
    }
  }
  const float max_score = *std::max_element(scores, scores + width);
  V totals{};
  int64_t e = 0;
  for (; e + kLanes <= width; e += kLanes) {
    const V weights = simd::Exp(Load<V>(scores + e) - max_score);
    Store<V>(scores + e, weights);
    totals += weights;
  }
  float total = simd::Sum(totals);
  for (; e < width; ++e) {
    scores[e] = std::exp(scores[e] - max_score);
    total += scores[e];
  }
  const float inverse = 1.0f / total;
  const float* v_raw = row.v_raw + head * row.raw_capacity * dh;
  const float* v_cmp = row.v_cmp == nullptr ? nullptr : row.v_cmp + head * row.cmp_capacity * dh;
  // Up to four vectors of each slot's values per pass (all of d_head 64 with AVX-512).
  int64_t i = 0;
  for (; i + 4 * kLanes <= dh; i += 4 * kLanes) {
    WeightedValues<V, 4>(scores, row, v_raw, v_cmp, dh, i, inverse, out);
  }
  for (; i + kLanes <= dh; i += kLanes) {
    WeightedValues<V, 1>(scores, row, v_raw, v_cmp, dh, i, inverse, out);
  }
  for (; i < dh; ++i) {  // the dh % lanes tail
    float sum = 0.0f;
    int64_t slot = 0;
    for (const RingSpan& span : row.spans) {
      const float* values = (span.compressed ? v_cmp : v_raw) + span.start * dh + i;
      for (int64_t s = 0; s < span.length; ++s, ++slot) sum += scores[slot] * values[s * dh];
    }
    out[i] = sum * inverse;
  }
}

// Items [begin, end) of HostAttention's (head, row) pairs, item = head * rows + row, in vectors V.
template <typename V>
inline __attribute__((always_inline)) void AttendItems(const float* u_bias, const float* v_bias,
                                                       const float* table,
                                                       const HostAttentionShape& shape,
                                                       absl::Span<const HostAttentionRow> rows,
                                                       float* y, int64_t begin, int64_t end) {
  std::vector<float> scratch;
  const int64_t count = static_cast<int64_t>(rows.size()), dh = shape.d_head;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t h = item / count, a = item % count;
    AttendOne<V>(u_bias + h * dh, v_bias + h * dh, shape.scale, table + h * shape.table_rows * dh,
                 dh, rows[a], h, scratch, y + (a * shape.heads + h) * dh);  // y [A, H * dh]
  }
}

// One kernel per instruction set (cpu_kernels.h), each with its registers' width.
__attribute__((target("avx512f"))) void AttendAvx512(
    const float* u_bias, const float* v_bias, const float* table, const HostAttentionShape& shape,
    absl::Span<const HostAttentionRow> rows, float* y, int64_t begin, int64_t end) {
  AttendItems<simd::V16>(u_bias, v_bias, table, shape, rows, y, begin, end);
}

__attribute__((target("avx2,fma"))) void AttendAvx2(
    const float* u_bias, const float* v_bias, const float* table, const HostAttentionShape& shape,
    absl::Span<const HostAttentionRow> rows, float* y, int64_t begin, int64_t end) {
  AttendItems<simd::V8>(u_bias, v_bias, table, shape, rows, y, begin, end);
}

void AttendGeneric(const float* u_bias, const float* v_bias, const float* table,
                   const HostAttentionShape& shape, absl::Span<const HostAttentionRow> rows,
                   float* y, int64_t begin, int64_t end) {
  AttendItems<simd::V4>(u_bias, v_bias, table, shape, rows, y, begin, end);
}

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
      case CpuKernel::kAvx512: AttendAvx512(u_bias, v_bias, table, shape, rows, y, begin, end); break;
      case CpuKernel::kAvx2: AttendAvx2(u_bias, v_bias, table, shape, rows, y, begin, end); break;
      default: AttendGeneric(u_bias, v_bias, table, shape, rows, y, begin, end); break;
    }
  });
}

}  // namespace mnemo::model
