// MemoryShape: the sizes every buffer of a SessionMemory is preallocated with.
#ifndef MNEMO_ENGINE_MEMORY_MEMORY_SHAPE_H_
#define MNEMO_ENGINE_MEMORY_MEMORY_SHAPE_H_

#include <cstdint>

namespace mnemo::memory {

struct MemoryShape {
  int batch = 1;      // independent sequences sharing positions (training batches)
  int layers = 1;
  int heads = 1;
  int d_head = 1;
  int seg_len = 1;    // most positions one segment appends
  int mem_len = 1;    // raw positions a query sees behind itself
  int cmem_len = 0;   // compressed slots a query sees (0 = no compressive memory)
  int cmem_rate = 1;  // positions per compressed slot
  int max_distance = 1;  // relative distances are clamped to [0, max_distance]
  int knn_layer = -1;    // the layer with a kNN memory; -1 = none
  int knn_len = 0;       // positions before the raw window a query may retrieve from
  // Where the kNN layer's entries live. false: a dense ring per batch row, searched exactly
  // (training: rows, document resets, autograd). true: a knn::KnnMemory (inference, batch 1):
  // exact top-k while small, a FAISS IVF index past knn_exact_threshold entries.
  bool knn_store = false;
  int64_t knn_exact_threshold = 0;  // entries; 0 = knn::KnnMemoryConfig's default
  // The attention rings (raw and compressed keys/values) in IEEE float16 instead of the
  // memory's dtype: half the bytes a session holds and decode attention reads; keys and values
  // are rounded as they are stored, and read back widened to float32. Inference on the CPU only.
  bool half_rings = false;
  // Attention sinks (StreamingLLM): the first sink_len positions of the sequence are also kept
  // in a small ring of their own (LayerMemory k_sink/v_sink, slot p for position p) that the
  // raw ring's sliding never overwrites, so a family can keep them visible after they leave
  // the raw window. 0 = none. Which queries see them, and at which positions, is the family's
  // (engine/model/hf/decoder_network.h).
  int sink_len = 0;

  // The raw ring holds the window of the oldest query of a segment plus the segment itself.
  int raw_capacity() const { return mem_len + seg_len; }
  // The kNN ring holds the retrievable positions of a segment's oldest query, its raw window
  // and the segment itself.
  int knn_capacity() const { return knn_layer < 0 || knn_len == 0 ? 0 : knn_len + mem_len + seg_len; }
  // Visible slots + slots already formed but still inside some query's raw window + slack.
  int cmp_capacity() const {
    return cmem_len == 0 ? 0 : cmem_len + (mem_len + seg_len + cmem_rate - 1) / cmem_rate + 2;
  }

  bool operator==(const MemoryShape& o) const {
    return batch == o.batch && layers == o.layers && heads == o.heads && d_head == o.d_head &&
           seg_len == o.seg_len && mem_len == o.mem_len && cmem_len == o.cmem_len &&
           cmem_rate == o.cmem_rate && max_distance == o.max_distance &&
           knn_layer == o.knn_layer && knn_len == o.knn_len && knn_store == o.knn_store &&
           knn_exact_threshold == o.knn_exact_threshold && half_rings == o.half_rings &&
           sink_len == o.sink_len;
  }
  bool operator!=(const MemoryShape& o) const { return !(*this == o); }
};

}  // namespace mnemo::memory

#endif  // MNEMO_ENGINE_MEMORY_MEMORY_SHAPE_H_
