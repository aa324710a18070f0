#include "tools/decode_bench/full_attention_memory.h"

#include <c10/util/Exception.h>
#include <torch/types.h>

#include <utility>
#include <vector>

#include "engine/memory/memory_shape.h"
#include "engine/memory/segment_plan.h"

namespace mnemo::tools {

memory::SessionMemory NewFullAttentionMemory(const model::ModelConfig& config, int64_t history) {
  memory::MemoryShape shape;
  shape.batch = 1;
  shape.layers = config.n_layers;
  shape.heads = config.n_heads;
  shape.d_head = config.d_head;
  shape.seg_len = config.seg_len;
  shape.mem_len = static_cast<int>(history);
  shape.cmem_len = 0;
  shape.cmem_rate = 1;
  shape.knn_layer = -1;
  shape.max_distance = config.MaxDistance();
  return memory::SessionMemory::Create(shape, torch::TensorOptions().dtype(torch::kFloat32));
}

void FillSynthetic(memory::SessionMemory& memory, int64_t positions) {
  TORCH_CHECK(memory.next_position() == 0, "FillSynthetic needs a fresh memory");
  TORCH_CHECK(positions <= memory.shape().mem_len, "FillSynthetic: more positions than history");
  c10::InferenceMode inference;
  // What Plan would make for positions [0, positions), less the masks (positions x capacity
  // bools: too many for a long history): position p in raw slot p (the ring has history +
  // seg_len slots, so nothing wraps).
  memory::SegmentPlan plan;
  plan.start = 0;
  plan.length = positions;
  plan.raw_write_slots = torch::arange(positions, torch::kInt64);
  plan.raw_positions_after.assign(memory.shape().raw_capacity(), -1);
  for (int64_t p = 0; p < positions; ++p) plan.raw_positions_after[p] = p;
  plan.cmp_groups_after.assign(memory.shape().cmp_capacity(), -1);
  memory::SegmentWrite write = memory.BeginWrite(std::move(plan));
  const int64_t heads = memory.shape().heads, d_head = memory.shape().d_head;
  for (int i = 0; i < memory.num_layers(); ++i) {
    write.layer(i).WriteRaw(torch::randn({1, heads, positions, d_head}),   // keys
                            torch::randn({1, heads, positions, d_head}));  // values
  }
  write.Commit();
}

}  // namespace mnemo::tools
