// SessionMemory: everything one sequence (or a batch of aligned sequences) remembers: per
// layer, the raw recurrence (XL) memory and the compressed memory as preallocated ring
// buffers of keys/values, plus the slot maps they share (DESIGN.md §2-3).
//
// Owned by one session; only the engine's loop thread touches it. Appending a position costs
// O(d) per layer: no buffer is ever copied as a whole (Clone is the one explicit exception).
// Usage per segment: plan = Plan(S); every layer appends/attends with `plan`; Commit(plan).
#ifndef MNEMO_ENGINE_MEMORY_SESSION_MEMORY_H_
#define MNEMO_ENGINE_MEMORY_SESSION_MEMORY_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "engine/memory/layer_memory.h"
#include "engine/memory/memory_shape.h"
#include "engine/memory/segment_plan.h"

namespace mnemo::memory {

class SessionMemory {
 public:
  SessionMemory() = default;  // an empty placeholder; use Create
  static SessionMemory Create(const MemoryShape& shape, const torch::TensorOptions& options);

  SessionMemory(SessionMemory&&) = default;
  SessionMemory& operator=(SessionMemory&&) = default;

  // A deep copy (e.g. to score text without changing the session).
  SessionMemory Clone() const;
  // Cuts the autograd history of every buffer (training: memory is detached between segments).
  void Detach();
  // Empties this memory in place: afterwards it equals a fresh Create of its shape, bit for bit
  // (every buffer zero, no positions, an empty kNN store), keeping its buffers. Zeroes only the
  // slots a Plan may have written (positions below the furthest planned end, committed or not),
  // so a memory that saw a short request is cleared for a fraction of what Create's zero-fill
  // costs. Detaches first (no autograd history survives).
  void Clear();

  const MemoryShape& shape() const { return shape_; }
  // Positions consumed so far; the next token fed gets this absolute position.
  int64_t next_position() const { return next_position_; }

  int num_layers() const { return static_cast<int>(layers_.size()); }
  LayerMemory& layer(int i) { return layers_[i]; }
  const LayerMemory& layer(int i) const { return layers_[i]; }

  // Plans appending `length` (1..seg_len) positions; see SegmentPlan. Does not change state.
  SegmentPlan Plan(int64_t length) const;
  // Records that every layer appended the planned segment.
  void Commit(SegmentPlan& plan);

  // Training: row `row` starts a new document at next_position(); from then on its queries
  // see nothing before it. Equivalent to a fresh memory when next_position() is a multiple of
  // cmem_rate (compressed groups stay aligned to the document start).
  void ResetRow(int row);

  // Raw positions the next query sees behind itself.
  int64_t xl_tokens() const;
  // Compressed slots the next query sees.
  int64_t compressed_slots() const;
  // kNN entries (per head) the next query can retrieve from.
  int64_t knn_entries() const;
  // Bytes held by every buffer (allocated capacity).
  int64_t bytes() const;

 private:
  int64_t row0_start() const { return row_starts_.empty() ? 0 : row_starts_[0]; }

  MemoryShape shape_;
  torch::Device device_ = torch::kCPU;
  std::vector<LayerMemory> layers_;
  std::vector<int64_t> raw_positions_;  // [raw_capacity]: position in each raw slot, -1 = empty
  std::vector<int64_t> cmp_groups_;     // [cmp_capacity]: group in each compressed slot, -1 = empty
  std::vector<int64_t> row_starts_;     // [batch]: where each row's current document began
  torch::Tensor knn_slots_;             // [knn_capacity] int64 0..capacity-1 (device)
  int64_t next_position_ = 0;
  // The furthest start + length of any Plan since creation (or Clear): every ring write goes
  // through a plan, so positions at or past it were never written. Plan is const (it changes
  // no state callers see); Clear reads this.
  mutable int64_t planned_end_ = 0;
};

}  // namespace mnemo::memory

#endif  // MNEMO_ENGINE_MEMORY_SESSION_MEMORY_H_
