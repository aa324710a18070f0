// DecodeRows: the per-step state of a batched decode step (BatchDecoder), shared by the layers:
// each row's session memory and the plan for its one new position, plus the attention index
// that folds the plan's visibility mask and relative distances into one gather.
//
// Internal to engine/model: built by BatchDecoder once per step (PrepareDecodeRows), read by
// every layer's TransformerBlock::Decode / RelativeAttention::Decode. Borrows the memories (the
// caller of BatchDecoder::Step owns them); lives for one step on the loop thread.
#ifndef MNEMO_ENGINE_MODEL_DECODE_ROWS_H_
#define MNEMO_ENGINE_MODEL_DECODE_ROWS_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/memory/segment_plan.h"
#include "engine/memory/session_memory.h"

namespace mnemo::model {

// How rows with different memories attend (measured in tools/decode_batch_bench). Both attend
// per row over just the slots its query may see (at most two runs per ring): no copies and no
// masked reads. (A padded layout, the rows' rings copied into one masked batch, lost every
// measurement, docs/results/batching.md, and was removed.)
enum class AttentionLayout {
  // With float32 or float16 rings on the CPU, one pass of host_attention.h over every row in
  // place; elsewhere (another device or dtype) as kPerRowOps.
  kPerRow,
  // A few LibTorch ops per row and layer (the path for other devices; selectable on the CPU to
  // test and time it).
  kPerRowOps,
};

// A run of consecutive ring slots a row's query may see.
struct RingSpan {
  bool compressed = false;  // in the compressed ring, else the raw ring
  int64_t start = 0;
  int64_t length = 0;
};

struct DecodeRows {
  AttentionLayout layout = AttentionLayout::kPerRow;
  std::vector<memory::SessionMemory*> memories;  // [B], borrowed, batch-1 inference memories
  std::vector<memory::SegmentPlan> plans;        // [B], memories[r]->Plan(1)
  // Attention index: the column of the layer's scores by distance to add to each slot's score
  // (the slot's clamped distance); the same for every layer. Per row, the visible slots as runs (raw first), and the distance of each: on the
  // host always, and as [H, 1, total length] int64 on the memory's device for the LibTorch path.
  std::vector<std::vector<RingSpan>> spans;
  std::vector<std::vector<int64_t>> distances;
  std::vector<torch::Tensor> row_index;  // empty when `host`
  // kPerRow with float32 or float16 rings on the CPU: attention runs in host_attention.h's
  // kernel, which reads the rings in place (no LibTorch op per row); otherwise LibTorch ops per
  // row.
  bool host = false;
};

// The rows still running through the layers (CALM exits remove rows).
struct ActiveRows {
  std::vector<int64_t> rows;  // [A] indices into DecodeRows, ascending
  torch::Tensor index;        // [A] int64 on the model's device, the same indices
  bool all = true;            // rows == 0..B-1 (no gather needed)
};

// Appends the runs of visible slots among `slots` mask entries (visible[j]: slot j may be seen;
// a window of positions or of groups is at most two runs of a ring) to `spans`, and each
// visible slot's distance to `distances`. A query's row of a plan's masks (decode rows, and
// each query of a prompt segment on the host).
void AppendVisibleRuns(const bool* visible, const int64_t* distance, int64_t slots,
                       bool compressed, std::vector<RingSpan>& spans,
                       std::vector<int64_t>& distances);

// Plans one new position for each memory (SessionMemory::Plan(1)) and builds the attention
// index for `layout`. The memories must share one shape (one model's).
DecodeRows PrepareDecodeRows(absl::Span<memory::SessionMemory* const> memories,
                             AttentionLayout layout);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_DECODE_ROWS_H_
