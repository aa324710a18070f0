// SessionMemory: everything one sequence (or a batch of aligned sequences) remembers: per
// layer, the raw recurrence (XL) memory and the compressed memory as preallocated ring
// buffers of keys/values, the kNN layer's entries, plus the slot maps they share (docs/design.md
// §2-3). ForEachPiece below is the one list of that state.
//
// Owned by one session (session::SequenceState) or one one-shot request. Thread-safety: none
// inside; one thread at a time, handed over by its owner: the engine's loop thread, a worker
// thread prefilling the sequence (a task's prefill lent to a worker), or the decode worker
// whose BatchDecoder shard holds the sequence's row for one step; a memory::MemoryPool holds
// it under the pool's mutex between owners (memory_pool.h). Appending a position costs O(d)
// per layer: no buffer is ever copied as a whole (Clone is the one explicit exception).
// Changes go through a SegmentWrite (segment_write.h), the only writer: per segment,
// write = BeginWrite(S); every layer appends through write.layer(i) and attends over the
// const rings with write.plan(); write.Commit().
#ifndef MNEMO_ENGINE_MEMORY_SESSION_MEMORY_H_
#define MNEMO_ENGINE_MEMORY_SESSION_MEMORY_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/memory/layer_memory.h"
#include "engine/memory/memory_shape.h"
#include "engine/memory/segment_plan.h"
#include "engine/memory/segment_write.h"
#include "engine/util/binary_io.h"

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
  // Where and in which element type Create made it (half_rings aside: shape().half_rings).
  torch::Device device() const { return device_; }
  torch::ScalarType dtype() const { return dtype_; }
  // Positions consumed so far; the next token fed gets this absolute position.
  int64_t next_position() const { return next_position_; }

  int num_layers() const { return static_cast<int>(layers_.size()); }
  // Read-only: SegmentWrite is the only writer.
  const LayerMemory& layer(int i) const { return layers_[i]; }

  // Plans appending `length` (1..seg_len) positions; see SegmentPlan. Changes nothing.
  SegmentPlan Plan(int64_t length) const;
  // Opens the write of the next `length` positions (its plan is Plan(length)); see
  // segment_write.h. At most one write is open at a time; not on a torn memory.
  SegmentWrite BeginWrite(int64_t length);
  // Opens a write of a plan the caller built, for positions next_position() onwards with the
  // raw slots and slot maps filled in (tools filling a synthetic history larger than a
  // segment, whose masks would not fit); nothing checks it.
  SegmentWrite BeginWrite(SegmentPlan plan);
  // True after a write that had appended to a kNN store was abandoned: the store holds
  // entries the memory never committed (knn::KnnMemory cannot drop them). Clear mends it.
  bool torn() const { return torn_; }
  // Whether a SegmentWrite is open on this memory.
  bool write_open() const { return write_open_; }

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

  // Durable sessions (docs/durability.md; session_memory_io.cc). WriteTo writes every piece;
  // ReadFrom reads them into this memory, which must have been made with the same shape and
  // options (a fresh memory from the same model and options: FAILED_PRECONDITION naming the
  // piece otherwise, DATA_LOSS for damaged bytes). Afterwards the memory computes exactly what
  // the written one would, bit for bit.
  void WriteTo(util::BinaryWriter& out) const;
  absl::Status ReadFrom(util::BinaryReader& in);

  // A delta: what changed since a Mark. WriteDeltaSince(mark) writes the counters and slot
  // maps, the ring slots written since (whatever segments and calls wrote them) and the kNN
  // entries appended since, with the IVF list each went to in IVF mode; ApplyDelta, on a
  // memory equal to the marked one, makes it equal to this one. CanDelta is false when a delta
  // cannot express the change: a kNN store that switched to IVF search since the mark (its
  // index is trained on what was present at that moment) or that evicted entries appended
  // since the mark; write the whole memory then.
  struct Mark {
    int64_t next_position = 0;
    std::vector<int64_t> raw_positions, cmp_groups;
    std::vector<int64_t> knn_next;  // per layer; -1 = no kNN store
    std::vector<uint8_t> knn_ivf;   // per layer: the store was in IVF mode
  };
  Mark MarkNow() const;
  bool CanDelta(const Mark& mark) const;
  void WriteDeltaSince(const Mark& mark, util::BinaryWriter& out) const;
  absl::Status ApplyDelta(util::BinaryReader& in);

  // The pieces of a memory's state. Everything a SessionMemory remembers is one of these, and
  // ForEachPiece visits every one, in a fixed order: Clone, Clear and bytes() walk it, and
  // durable sessions will serialise exactly it (the rest of a session's state is listed in
  // session/session.h). Not pieces: shape_, device_ and dtype_ (how it was made), knn_slots_ (a
  // constant derived from the shape), and the transient write_open_ and torn_ flags (a memory
  // worth keeping has neither set).
  enum class PieceKind {
    kRawRing,         // LayerMemory k_raw / v_raw: [batch, H, raw_capacity, dh]
    kCompressedRing,  // LayerMemory k_cmp / v_cmp: [batch, H, cmp_capacity, dh] (cmem only)
    kKnnRing,         // LayerMemory k_knn / v_knn: the dense kNN ring (training)
    kKnnStore,        // LayerMemory's knn::KnnMemory (inference's kNN layer)
    kSinkRing,        // LayerMemory k_sink / v_sink: [batch, H, sink_len, dh] (sinks only)
    kSlotMap,         // raw_positions_ / cmp_groups_: what each slot holds, -1 = empty
    kRowStarts,       // row_starts_: where each batch row's current document began
    kCounter,         // next_position_, planned_end_
  };
  // Calls visit(kind, name, layer, piece) for every piece; piece is a torch::Tensor& (a ring,
  // possibly undefined), std::unique_ptr<knn::KnnMemory>& (possibly null),
  // std::vector<int64_t>& or int64_t&; layer is -1 for the pieces the layers share.
  template <typename Visitor>
  void ForEachPiece(Visitor&& visit);
  template <typename Visitor>
  void ForEachPiece(Visitor&& visit) const;

 private:
  friend class SegmentWrite;
  friend class LayerWrite;

  int64_t row0_start() const { return row_starts_.empty() ? 0 : row_starts_[0]; }
  // SegmentWrite::Commit: the planned segment becomes visible.
  void Commit(SegmentPlan& plan);
  template <typename Self, typename Visitor>
  static void VisitPieces(Self& self, Visitor& visit);

  MemoryShape shape_;
  torch::Device device_ = torch::kCPU;
  torch::ScalarType dtype_ = torch::kFloat32;
  std::vector<LayerMemory> layers_;
  std::vector<int64_t> raw_positions_;  // [raw_capacity]: position in each raw slot, -1 = empty
  std::vector<int64_t> cmp_groups_;     // [cmp_capacity]: group in each compressed slot, -1 = empty
  std::vector<int64_t> row_starts_;     // [batch]: where each row's current document began
  torch::Tensor knn_slots_;             // [knn_capacity] int64 0..capacity-1 (device)
  int64_t next_position_ = 0;
  // The furthest start + length of any write begun since creation (or Clear), committed or
  // not: every ring write goes through a SegmentWrite, so positions at or past it were never
  // written. Clear reads this.
  int64_t planned_end_ = 0;
  bool write_open_ = false;  // a SegmentWrite is open
  bool torn_ = false;        // see torn()
};

template <typename Self, typename Visitor>
void SessionMemory::VisitPieces(Self& self, Visitor& visit) {
  for (int i = 0; i < static_cast<int>(self.layers_.size()); ++i) {
    auto& layer = self.layers_[i];
    visit(PieceKind::kRawRing, "k_raw", i, layer.k_raw_);
    visit(PieceKind::kRawRing, "v_raw", i, layer.v_raw_);
    visit(PieceKind::kCompressedRing, "k_cmp", i, layer.k_cmp_);
    visit(PieceKind::kCompressedRing, "v_cmp", i, layer.v_cmp_);
    visit(PieceKind::kKnnRing, "k_knn", i, layer.k_knn_);
    visit(PieceKind::kKnnRing, "v_knn", i, layer.v_knn_);
    visit(PieceKind::kKnnStore, "knn_store", i, layer.knn_store_);
    visit(PieceKind::kSinkRing, "k_sink", i, layer.k_sink_);
    visit(PieceKind::kSinkRing, "v_sink", i, layer.v_sink_);
  }
  visit(PieceKind::kSlotMap, "raw_positions", -1, self.raw_positions_);
  visit(PieceKind::kSlotMap, "cmp_groups", -1, self.cmp_groups_);
  visit(PieceKind::kRowStarts, "row_starts", -1, self.row_starts_);
  visit(PieceKind::kCounter, "next_position", -1, self.next_position_);
  visit(PieceKind::kCounter, "planned_end", -1, self.planned_end_);
}

template <typename Visitor>
void SessionMemory::ForEachPiece(Visitor&& visit) {
  VisitPieces(*this, visit);
}

template <typename Visitor>
void SessionMemory::ForEachPiece(Visitor&& visit) const {
  VisitPieces(*this, visit);
}

}  // namespace mnemo::memory

#endif  // MNEMO_ENGINE_MEMORY_SESSION_MEMORY_H_
