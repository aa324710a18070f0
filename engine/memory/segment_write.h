// SegmentWrite: the one way to change what a SessionMemory remembers: a transaction that
// appends one segment (SessionMemory::BeginWrite -> per layer: raw keys/values, compressed
// slots, kNN entries -> Commit, or Abandon).
//
//   memory::SegmentWrite write = memory.BeginWrite(S);     // plans the segment (SegmentPlan)
//   for each layer i: write.layer(i).WriteRaw(k, v); ...   // ring bytes, in place
//   write.Commit();                                        // the segment becomes visible
//
// Until Commit the memory's visible state (its slot maps and next_position, so every later
// Plan and every query's mask) is that of before BeginWrite. Ring writes go straight into the
// rings (no staging copy: a decode step writes one position per layer), so an abandoned write
// (Abandon, or the destructor of a write never committed: an exception midway) leaves the
// bytes it wrote in the slots its plan named, and the slot maps still say those slots hold
// what they held before. That is harmless because those bytes are never read as what the maps
// say: a raw slot the segment overwrote held position p - raw_capacity for some p of the
// segment, which every query at or after the segment's start has left behind (windows reach
// mem_len < raw_capacity back) and whose group was compressed by an earlier segment (a group
// is formed once due, before its slots can be overwritten: segment_plan.h); a compressed slot
// it overwrote held a group older than any such query sees (cmp_capacity's slack); and the next
// write re-plans the same positions and overwrites the same slots before anything reads them.
// Clear still zeroes them: BeginWrite extends the range Clear zeroes before any byte is
// written. The one write that cannot be undone is a kNN *store* append (knn::KnnMemory keeps
// no history): a write abandoned after one leaves the memory torn (SessionMemory::torn()), and
// it takes no further writes until Clear.
//
// LayerWrite is one layer's share of a SegmentWrite: a borrowed handle, valid while its
// SegmentWrite lives, with const read access to the layer's rings (memory()) and the plan.
//
// Ownership: borrows the SessionMemory, which must outlive the write and not move while it is
// open; at most one write is open per memory. Thread-safety: as its memory's: one thread at a
// time (a decode worker writes the rows of its shard, each row its own SegmentWrite).
#ifndef MNEMO_ENGINE_MEMORY_SEGMENT_WRITE_H_
#define MNEMO_ENGINE_MEMORY_SEGMENT_WRITE_H_

#include <torch/types.h>

#include <cstdint>

#include "engine/memory/layer_memory.h"
#include "engine/memory/segment_plan.h"

namespace mnemo::memory {

class SessionMemory;
class SegmentWrite;

class LayerWrite {
 public:
  // Converts n floats to IEEE float16 bits, rounding to nearest even (what .to(kHalf) does);
  // the caller's fastest kernel for this CPU.
  using HalfConverter = void (*)(const float* from, uint16_t* to, int64_t n);

  const LayerMemory& memory() const;
  const SegmentPlan& plan() const;

  // The segment's raw keys and values: k, v [batch, H, S, dh] (any floating type; rounded to
  // the ring's type as they are stored). Keeps autograd: training's queries attend through the
  // rings to the keys just written.
  void WriteRaw(const torch::Tensor& k, const torch::Tensor& v);
  // The same for a one-position segment of a batch-1 host memory (float32 or float16 rings on
  // the CPU), from plain float32 rows: head h's key at k + h * head_stride, [dh] contiguous (and
  // likewise v). No LibTorch op: a decode step writes one position per row and layer.
  void WriteRawPosition(const float* k, const float* v, int64_t head_stride,
                        HalfConverter to_half);
  // The compressed slots of the groups the plan forms (plan().new_groups of them, from the raw
  // slots plan().group_source_slots): k, v [batch, H, new_groups, dh], detached by the caller.
  void WriteCompressed(const torch::Tensor& k, const torch::Tensor& v);
  // kNN entries of the segment's positions: kn (keys, L2-normalised per head), v [batch, H, S,
  // dh]; into the dense ring (detached), or appended to the store (batch 1; as float32 CPU).
  void AppendKnn(const torch::Tensor& kn, const torch::Tensor& v);
  // A store's entries of a one-position segment from plain float32 rows: kn, v [H, dh]
  // row-major (knn::KnnMemory::AppendOne).
  void AppendKnnPosition(const float* kn, const float* v);

 private:
  friend class SegmentWrite;
  LayerWrite(SegmentWrite* write, int layer) : write_(write), layer_(layer) {}
  LayerMemory& mutable_memory() const;

  SegmentWrite* write_;
  int layer_;
};

class SegmentWrite {
 public:
  SegmentWrite(SegmentWrite&& other) noexcept;
  SegmentWrite& operator=(SegmentWrite&& other) noexcept;
  SegmentWrite(const SegmentWrite&) = delete;
  SegmentWrite& operator=(const SegmentWrite&) = delete;
  ~SegmentWrite();  // abandons an open write

  const SegmentPlan& plan() const { return plan_; }
  const SessionMemory& memory() const { return *memory_; }
  LayerWrite layer(int i) { return LayerWrite(this, i); }
  // Whether neither Commit nor Abandon has run yet.
  bool open() const { return memory_ != nullptr && !closed_; }

  // Makes the segment visible (every layer must have written it): the memory's slot maps and
  // next_position move past it. Closes the write.
  void Commit();
  // Closes the write leaving the memory's visible state as before BeginWrite (see above).
  void Abandon();

 private:
  friend class SessionMemory;
  friend class LayerWrite;
  SegmentWrite(SessionMemory& memory, SegmentPlan plan);

  SessionMemory* memory_ = nullptr;  // borrowed; null once moved from
  SegmentPlan plan_;
  bool closed_ = false;
  bool knn_store_appended_ = false;  // some layer appended to a kNN store (not undoable)
};

}  // namespace mnemo::memory

#endif  // MNEMO_ENGINE_MEMORY_SEGMENT_WRITE_H_
