// SegmentPlan: everything a layer needs to append one segment to its memory and attend over
// it, computed once per segment (it is the same for every layer).
//
// Visibility follows docs/design.md §2 "memory is defined per position": query t sees raw positions
// [t - mem_len, t] and compressed groups g with (g + 1) * rate <= t - mem_len, the newest
// cmem_len of them. Group g holds positions [g * rate, (g + 1) * rate); its compressed slot is a
// function of those positions' keys/values alone, so results never depend on where segment
// boundaries fall, nor on when the group is formed.
// Formation is late and batched: a group must be formed once it is *due*, i.e. its first
// position g * rate has left the newest query's raw window (g * rate <= end - 1 - mem_len):
// that is before any query can see it ((g + 1) * rate <= t - mem_len) and before the next
// segment can overwrite its raw slots (raw capacity mem_len + seg_len). A segment that makes
// any group due forms every due group plus up to 16 complete groups after them, in one pass
// over the compression weights. A sequence shorter than mem_len + 1 positions never compresses
// (nothing could see the groups), and a long one reads the compression weights once per 16
// groups instead of once per group.
// The kNN layer's query t retrieves among positions [t - mem_len - knn_len, t - mem_len).
// Rows (training batches) may start a new document at any segment: their queries see nothing
// before it, exactly as if their memory had been reset.
//
// Masks have a leading row dimension of 1 (all rows alike) or batch, and broadcast over heads.
#ifndef MNEMO_ENGINE_MEMORY_SEGMENT_PLAN_H_
#define MNEMO_ENGINE_MEMORY_SEGMENT_PLAN_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace mnemo::memory {

struct SegmentPlan {
  int64_t start = 0;   // absolute position of the segment's first token
  int64_t length = 0;  // S

  torch::Tensor raw_write_slots;  // [S] int64: ring slot of each new position
  torch::Tensor raw_mask;         // [R, 1, S, raw_capacity] bool: query s may see raw slot j
  torch::Tensor raw_distance;     // [S, raw_capacity] int64: clamped relative distance

  int64_t new_groups = 0;           // n: compressed groups formed by this segment
  torch::Tensor group_source_slots; // [n * rate] int64: raw slots of those groups, in order
  torch::Tensor cmp_write_slots;    // [n] int64: compressed slot of each new group
  // Compressed slots that hold a group once this segment is committed: [0, cmp_filled_after)
  // (groups form in order from 0 and group g goes to slot g % cmp_capacity).
  int64_t cmp_filled_after = 0;
  torch::Tensor cmp_mask;           // [R, 1, S, cmp_capacity] bool (undefined without cmem)
  torch::Tensor cmp_distance;       // [S, cmp_capacity] int64

  torch::Tensor knn_write_slots;  // [S] int64: kNN ring slot of each new position
  torch::Tensor knn_mask;         // [R, 1, S, knn_capacity] bool (dense ring only)
  torch::Tensor knn_lo, knn_hi;   // [S] int64 CPU: each query's window [lo, hi) (kNN store only)

  // Slot maps once the segment is committed (host side).
  std::vector<int64_t> raw_positions_after;  // [raw_capacity], -1 = empty
  std::vector<int64_t> cmp_groups_after;     // [cmp_capacity], -1 = empty
};

}  // namespace mnemo::memory

#endif  // MNEMO_ENGINE_MEMORY_SEGMENT_PLAN_H_
