#include "engine/model/host_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace mnemo::model {
namespace {

// a . b + c . d: sixteen independent partial sums (one vector register's worth), one
// horizontal sum for both products.
inline __attribute__((always_inline)) float Dot2(const float* a, const float* b, const float* c,
                                                 const float* d, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l] + c[i + l] * d[i + l];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i] + c[i] * d[i];
  float total = 0.0f;
#pragma GCC unroll 16
  for (int l = 0; l < 16; ++l) total += acc[l];
  return total + tail;
}

// y += alpha x, in blocks of eight (restrict: x and y never overlap, so the loop vectorises).
inline __attribute__((always_inline)) void Axpy(float alpha, const float* __restrict x,
                                                float* __restrict y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) y[i + l] += alpha * x[i + l];
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// One (row, head): scores into `scores` (resized), then the weighted sum into out [dh].
__attribute__((target_clones("avx512f", "avx2", "default"))) void AttendOne(
    const float* u_bias, const float* v_bias, float scale, const float* table, int64_t d_head,
    const HostAttentionRow& row, int64_t head, std::vector<float>& scores, float* out) {
  const int64_t width = static_cast<int64_t>(row.distances.size());
  scores.resize(width + 2 * d_head);
  float* qu = scores.data() + width;  // the scaled queries, after the scores
  float* qv = qu + d_head;
  const float* q = row.query + head * row.query_head_stride;
  for (int64_t i = 0; i < d_head; ++i) {
    qu[i] = (q[i] + u_bias[i]) * scale;
    qv[i] = (q[i] + v_bias[i]) * scale;
  }
  const float* k_raw = row.k_raw + head * row.raw_capacity * d_head;
  const float* k_cmp = row.k_cmp == nullptr ? nullptr : row.k_cmp + head * row.cmp_capacity * d_head;
  float max_score = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (const RingSpan& span : row.spans) {
    const float* keys = (span.compressed ? k_cmp : k_raw) + span.start * d_head;
    for (int64_t s = 0; s < span.length; ++s, ++j) {
      const float score =
          Dot2(qu, keys + s * d_head, qv, table + row.distances[j] * d_head, d_head);
      scores[j] = score;
      max_score = std::max(max_score, score);
    }
  }
  float total = 0.0f;
  for (int64_t i = 0; i < width; ++i) {
    scores[i] = std::exp(scores[i] - max_score);
    total += scores[i];
  }
  std::fill(out, out + d_head, 0.0f);
  if (width == 0) return;
  const float* v_raw = row.v_raw + head * row.raw_capacity * d_head;
  const float* v_cmp = row.v_cmp == nullptr ? nullptr : row.v_cmp + head * row.cmp_capacity * d_head;
  const float inverse = 1.0f / total;
  j = 0;
  for (const RingSpan& span : row.spans) {
    const float* values = (span.compressed ? v_cmp : v_raw) + span.start * d_head;
    for (int64_t s = 0; s < span.length; ++s, ++j) {
      Axpy(scores[j] * inverse, values + s * d_head, out, d_head);
    }
  }
}

}  // namespace

void HostAttention(const float* u_bias, const float* v_bias, const float* table,
                   const HostAttentionShape& shape, absl::Span<const HostAttentionRow> rows,
                   float* y) {
  const int64_t count = static_cast<int64_t>(rows.size());
  const int64_t heads = shape.heads, dh = shape.d_head;
  // Work of one (row, head), in multiply-adds: three dh-long products per visible slot.
  int64_t work = 0;
  for (const HostAttentionRow& row : rows) work += static_cast<int64_t>(row.distances.size());
  work *= 3 * dh * heads;
  // Below ~64K multiply-adds the whole step costs less than waking the pool's threads.
  const int64_t items = count * heads;
  const int64_t grain = work < (int64_t{1} << 16) ? std::max<int64_t>(items, 1) : 1;
  at::parallel_for(0, items, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t h = item / count, a = item % count;
      AttendOne(u_bias + h * dh, v_bias + h * dh, shape.scale, table + h * shape.table_rows * dh,
                dh, rows[a], h, scores, y + (a * heads + h) * dh);  // y [A, H * dh]
    }
  });
}

}  // namespace mnemo::model
