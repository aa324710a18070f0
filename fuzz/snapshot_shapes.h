// The session memories snapshot_fuzz decodes into, and snapshot_seed_gen encodes from: tiny
// versions of what the families make for inference (memory::MemoryShape), so that every piece
// of a snapshot (compressed rings, float16 rings, sink rings, a kNN store in exact and in IVF
// mode) has a seed that reaches it.
//
// Constants only; thread-safe.
#ifndef MNEMO_FUZZ_SNAPSHOT_SHAPES_H_
#define MNEMO_FUZZ_SNAPSHOT_SHAPES_H_

#include <c10/core/InferenceMode.h>
#include <torch/types.h>

#include <array>
#include <cstdint>

#include "engine/memory/memory_shape.h"
#include "engine/memory/segment_write.h"
#include "engine/memory/session_memory.h"

namespace mnemo::fuzz {

// The model id the fuzzed "server" serves; seeds are made for it.
inline constexpr char kSnapshotModelId[] = "fuzz-model@0123456789abcdef";
// ImportSession's caps (Scheduler::Answer(ImportSessionCall)): larger snapshots are refused
// before DecodeSnapshot allocates for them.
inline constexpr int64_t kMaxKnnLen = 64;
inline constexpr int64_t kMaxRememberCapacity = 4096;
// The kNN window a session gets when its snapshot says 0 (the server's --knn_capacity).
inline constexpr int kDefaultKnnLen = 16;

inline memory::MemoryShape SnapshotShape(int variant, int64_t knn_len) {
  memory::MemoryShape shape;
  shape.heads = 2;
  shape.d_head = 4;
  shape.seg_len = 4;
  shape.mem_len = 8;
  shape.max_distance = 16;
  shape.knn_len = knn_len > 0 ? static_cast<int>(knn_len) : kDefaultKnnLen;
  switch (variant % 4) {
    case 0:  // mnemo-xl: compressive memory and a kNN store that turns IVF past 40 entries
      shape.layers = 2;
      shape.cmem_len = 2;
      shape.cmem_rate = 2;
      shape.knn_layer = 1;
      shape.knn_store = true;
      shape.knn_exact_threshold = 40;
      break;
    case 1:  // a Hugging Face family: float16 rings and attention sinks, no kNN
      shape.layers = 2;
      shape.half_rings = true;
      shape.sink_len = 2;
      break;
    case 2:  // one layer that is the kNN layer, exact search only
      shape.layers = 1;
      shape.heads = 1;
      shape.d_head = 2;
      shape.knn_layer = 0;
      shape.knn_store = true;
      break;
    default:  // as 0 with the default exact threshold: a 0 snapshot's store does not fit
      shape = SnapshotShape(0, knn_len);
      shape.knn_exact_threshold = 0;
      break;
  }
  return shape;
}

// As the families make them: inside InferenceMode (the rings are inference tensors).
inline memory::SessionMemory NewSnapshotMemory(int variant, int64_t knn_len) {
  c10::InferenceMode inference;
  return memory::SessionMemory::Create(SnapshotShape(variant, knn_len),
                                       torch::TensorOptions().dtype(torch::kFloat32));
}

// Appends `length` (1..seg_len) positions to `memory` as a model's forward pass does, through
// one SegmentWrite: raw keys and values for every layer, the compressed slots the plan forms,
// the kNN layer's entries (L2-normalised keys). make({dims}) makes each tensor: random for the
// seeds, constant in the harness (whose inputs must replay the same way).
template <typename MakeTensor>
void Feed(memory::SessionMemory& memory, int64_t length, MakeTensor make) {
  c10::InferenceMode inference;
  const memory::MemoryShape& shape = memory.shape();
  memory::SegmentWrite write = memory.BeginWrite(length);
  const int64_t groups = write.plan().new_groups;
  for (int i = 0; i < shape.layers; ++i) {
    memory::LayerWrite layer = write.layer(i);
    layer.WriteRaw(make({1, shape.heads, length, shape.d_head}),
                   make({1, shape.heads, length, shape.d_head}));
    if (shape.cmem_len > 0 && groups > 0) {
      layer.WriteCompressed(make({1, shape.heads, groups, shape.d_head}),
                            make({1, shape.heads, groups, shape.d_head}));
    }
    if (i == shape.knn_layer) {
      torch::Tensor keys = make({1, shape.heads, length, shape.d_head});
      layer.AppendKnn(keys / keys.norm(2, -1, true), make({1, shape.heads, length, shape.d_head}));
    }
  }
  write.Commit();
}

}  // namespace mnemo::fuzz

#endif  // MNEMO_FUZZ_SNAPSHOT_SHAPES_H_
