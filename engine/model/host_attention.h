// HostAttention: attention for one query position per row on the CPU, in float32, reading
// each row's key/value rings in place (float32 rings, or float16 ones widened as they are read:
// MemoryShape::half_rings). RelativeAttention::Decode uses it for the kPerRow layout
// when it can read the rings in place (DecodeStepState::host), and RelativeAttention::forward for a
// prompt segment at inference (PrefillAttendHost: one row per query position, all on the same
// rings); it replaces a dozen small LibTorch ops per layer (each a dispatch, an allocation and
// often a thread wake-up) with one pass.
//
// For row a and head h, over the row's visible slots j (spans, raw first), with
// qu = (q + u_h) * scale and qv = (q + v_h) * scale formed here from the row's raw query q:
//   s_j     = qu . k_j + qv . table[h, dist_j]
//   y[a, h] = sum_j softmax(s)_j v_j
// which is the LibTorch path's function (it gathers the distance term from qv . tableᵀ over
// every distance); here the distance term is computed only for the distances the row uses.
// (row, head) pairs run in parallel on LibTorch's intra-op thread pool. One kernel per
// instruction set (cpu_kernels.h): four slots scored at a time, a slot's values read once. Past
// a few dozen slots per row the time is that of reading the rings (docs/results/kernels.md).
//
// Thread-safety: reads the rings and writes y only; the caller keeps them alive and unchanged.
#ifndef MNEMO_ENGINE_MODEL_HOST_ATTENTION_H_
#define MNEMO_ENGINE_MODEL_HOST_ATTENTION_H_

#include <torch/types.h>

#include <cstdint>

#include "absl/types/span.h"
#include "engine/model/decode_step_state.h"

namespace mnemo::model {

// The element type of a row's rings.
enum class RingType { kFloat32, kFloat16 };

// Whether HostAttention can read `ring` in place: on the CPU, float32 or float16.
inline bool HostAttentionReads(const torch::Tensor& ring) {
  return ring.device().is_cpu() &&
         (ring.scalar_type() == torch::kFloat32 || ring.scalar_type() == torch::kFloat16);
}

// The RingType of a ring HostAttentionReads.
inline RingType HostRingType(const torch::Tensor& ring) {
  return ring.scalar_type() == torch::kFloat16 ? RingType::kFloat16 : RingType::kFloat32;
}

// One row's rings for the layer being decoded (a batch-1 memory's, contiguous).
struct HostAttentionRow {
  const float* query = nullptr;  // head h's query at query + h * query_head_stride, [dh] each
  int64_t query_head_stride = 0;
  RingType ring_type = RingType::kFloat32;  // of all four rings
  const void* k_raw = nullptr;  // [H, raw_capacity, dh]
  const void* v_raw = nullptr;
  const void* k_cmp = nullptr;  // [H, cmp_capacity, dh]; null without a compressed memory
  const void* v_cmp = nullptr;
  int64_t raw_capacity = 0;
  int64_t cmp_capacity = 0;
  absl::Span<const RingSpan> spans;     // the visible slots (DecodeStepState::spans)
  absl::Span<const int64_t> distances;  // one per visible slot, in span order, < table rows
};

struct HostAttentionShape {
  int64_t heads = 0;       // query heads
  int64_t d_head = 0;
  int64_t table_rows = 0;  // D = max_distance + 1
  float scale = 1.0f;      // 1 / sqrt(d_head)
  // Query heads per ring head (grouped-query attention): head h reads ring head h / kv_group;
  // the rings hold heads / kv_group heads.
  int64_t kv_group = 1;
};

// u_bias, v_bias: [H, dh]; table: [H, D, dh] contiguous; rows: [A]; y: [A, H * dh] (the
// output projection's input), written. With table (and the biases) null the score is plain
// scaled dot-product attention, s_j = scale * q . k_j (the RoPE families: their keys carry
// their positions; distances then only count the visible slots). A row with no visible slot gets y = 0 (cannot happen
// in decode or prefill: a query always sees its own position).
void HostAttention(const float* u_bias, const float* v_bias, const float* table,
                   const HostAttentionShape& shape, absl::Span<const HostAttentionRow> rows,
                   float* y);

// to[0, n) = from[0, n) as IEEE float16 bits, rounded to nearest even (as LibTorch's
// .to(kHalf)): how float16 rings are written on the host.
void FloatsToHalves(const float* from, uint16_t* to, int64_t n);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_HOST_ATTENTION_H_
