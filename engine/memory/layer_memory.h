// LayerMemory: one layer's keys/values, as ring buffers indexed by SessionMemory's slot maps.
//
// Owned by a SessionMemory (move-only). Which position or compressed group each slot holds is
// the same for every layer, so that bookkeeping lives once in SessionMemory. Read-only outside
// engine/memory: model code reads the rings through the const accessors (a `const
// LayerMemory&`), and the only writer is a SegmentWrite (segment_write.h), besides
// SessionMemory's own Create, Clone and Clear.
// Thread-safety: as its SessionMemory's (session_memory.h).
#ifndef MNEMO_ENGINE_MEMORY_LAYER_MEMORY_H_
#define MNEMO_ENGINE_MEMORY_LAYER_MEMORY_H_

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <memory>

#include "engine/knn/knn_memory.h"

namespace mnemo::memory {

class LayerMemory {
 public:
  const torch::Tensor& k_raw() const { return k_raw_; }  // [batch, heads, raw_capacity, d_head]
  const torch::Tensor& v_raw() const { return v_raw_; }  // [batch, heads, raw_capacity, d_head]
  // [batch, heads, cmp_capacity, d_head]; undefined without cmem
  const torch::Tensor& k_cmp() const { return k_cmp_; }
  const torch::Tensor& v_cmp() const { return v_cmp_; }
  // [batch, heads, knn_capacity, d_head], L2-normalised; the kNN layer's dense ring only
  const torch::Tensor& k_knn() const { return k_knn_; }
  const torch::Tensor& v_knn() const { return v_knn_; }
  // [batch, heads, sink_len, d_head]: the sequence's first positions (MemoryShape::sink_len);
  // undefined without sinks
  const torch::Tensor& k_sink() const { return k_sink_; }
  const torch::Tensor& v_sink() const { return v_sink_; }
  // The kNN layer's entries when MemoryShape::knn_store (then k_knn/v_knn are undefined);
  // null otherwise.
  const knn::KnnMemory* knn_store() const { return knn_store_.get(); }

  // Every ring, defined or not, always in this order.
  std::array<const torch::Tensor*, 8> rings() const {
    return {&k_raw_, &v_raw_, &k_cmp_, &v_cmp_, &k_knn_, &v_knn_, &k_sink_, &v_sink_};
  }

  int64_t bytes() const {
    int64_t total = 0;
    for (const torch::Tensor* t : rings()) {
      if (t->defined()) total += t->numel() * t->element_size();
    }
    if (knn_store_ != nullptr) total += knn_store_->bytes();
    return total;
  }

 private:
  friend class SessionMemory;
  friend class LayerWrite;

  torch::Tensor k_raw_, v_raw_, k_cmp_, v_cmp_, k_knn_, v_knn_, k_sink_, v_sink_;  // see accessors
  std::unique_ptr<knn::KnnMemory> knn_store_;
};

}  // namespace mnemo::memory

#endif  // MNEMO_ENGINE_MEMORY_LAYER_MEMORY_H_
