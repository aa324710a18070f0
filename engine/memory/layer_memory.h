// LayerMemory: one layer's keys/values, as ring buffers indexed by SessionMemory's slot maps.
//
// Plain data (move-only), owned by a SessionMemory. Which position or compressed group each slot holds is
// the same for every layer, so that bookkeeping lives once in SessionMemory.
#ifndef MNEMO_ENGINE_MEMORY_LAYER_MEMORY_H_
#define MNEMO_ENGINE_MEMORY_LAYER_MEMORY_H_

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <memory>

#include "engine/knn/knn_memory.h"

namespace mnemo::memory {

struct LayerMemory {
  torch::Tensor k_raw;  // [batch, heads, raw_capacity, d_head]
  torch::Tensor v_raw;  // [batch, heads, raw_capacity, d_head]
  torch::Tensor k_cmp;  // [batch, heads, cmp_capacity, d_head]; undefined without cmem
  torch::Tensor v_cmp;  // [batch, heads, cmp_capacity, d_head]; undefined without cmem
  torch::Tensor k_knn;  // [batch, heads, knn_capacity, d_head], L2-normalised; kNN layer only
  torch::Tensor v_knn;  // [batch, heads, knn_capacity, d_head]; kNN layer only
  // The kNN layer's entries when MemoryShape::knn_store (then k_knn/v_knn are undefined).
  std::unique_ptr<knn::KnnMemory> knn_store;

  // Every ring, defined or not, always in this order.
  std::array<torch::Tensor*, 6> rings() { return {&k_raw, &v_raw, &k_cmp, &v_cmp, &k_knn, &v_knn}; }
  std::array<const torch::Tensor*, 6> rings() const {
    return {&k_raw, &v_raw, &k_cmp, &v_cmp, &k_knn, &v_knn};
  }

  int64_t bytes() const {
    int64_t total = 0;
    for (const torch::Tensor* t : rings()) {
      if (t->defined()) total += t->numel() * t->element_size();
    }
    if (knn_store != nullptr) total += knn_store->bytes();
    return total;
  }
};

}  // namespace mnemo::memory

#endif  // MNEMO_ENGINE_MEMORY_LAYER_MEMORY_H_
