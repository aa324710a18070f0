// DecodeStepState: the state one batched decode step shares across its layers: each row's
// SegmentWrite of its one new position (its memory, borrowed, and the plan), and, for the host
// kernel, each row's visible slots and their distances.
//
// The four decode names, from the outside in: scheduler::DecodeBatch collects the scheduler's
// tasks' single-token feeds for one iteration; BatchDecoder (and ParallelDecoder, its sharded
// form) runs one step over DecodeRow requests (a token and a memory each); DecodeStepState is
// that step's per-layer working state (this file); ActiveRows says which of its rows are still
// running through the layers (CALM exits remove rows).
//
// Internal to engine/model: made by BatchDecoder::Step once per step (BeginDecodeStep), read
// and written by every layer's TransformerBlock::Decode / RelativeAttention::Decode, its writes
// committed by Step. Lives for one step on the thread running that BatchDecoder (the loop
// thread, or a decode worker running a ParallelDecoder shard); its rows' memories are the
// step's alone meanwhile.
#ifndef MNEMO_ENGINE_MODEL_DECODE_STEP_STATE_H_
#define MNEMO_ENGINE_MODEL_DECODE_STEP_STATE_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/memory/segment_plan.h"
#include "engine/memory/segment_write.h"
#include "engine/memory/session_memory.h"

namespace mnemo::model {

// How rows with different memories attend (measured in tools/decode_batch_bench). (A padded
// layout, the rows' rings copied into one masked batch, lost every measurement,
// docs/results/batching.md, and was removed.)
enum class AttentionLayout {
  // With float32 or float16 rings on the CPU, one pass of host_attention.h over every row's
  // visible slots in place (no copies, no masked reads, no LibTorch op per row); elsewhere
  // (another device or dtype) as kPerRowOps.
  kPerRow,
  // The reference attention (RelativeAttention's Attend, LibTorch ops) row by row: the path for
  // other devices; selectable on the CPU to test and time it.
  kPerRowOps,
};

// A run of consecutive ring slots a row's query may see.
struct RingSpan {
  bool compressed = false;  // in the compressed ring, else the raw ring
  int64_t start = 0;
  int64_t length = 0;
};

struct DecodeStepState {
  AttentionLayout layout = AttentionLayout::kPerRow;
  // [B]: each row's write of its one new position into its batch-1 inference memory (borrowed
  // from the step's caller), opened by BeginDecodeStep, committed by BatchDecoder once every
  // layer has written; abandoned if the step fails.
  std::vector<memory::SegmentWrite> writes;
  // kPerRow with float32 or float16 rings on the CPU: attention runs in host_attention.h's
  // kernel, which reads the rings in place; otherwise the reference, row by row.
  bool host = false;
  // `host` only, [B]: per row, the visible slots as runs (raw first) and the clamped distance
  // of each (the column of the layer's scores by distance to add); the same for every layer.
  std::vector<std::vector<RingSpan>> spans;
  std::vector<std::vector<int64_t>> distances;

  const memory::SegmentPlan& plan(int64_t r) const { return writes[r].plan(); }
  const memory::LayerMemory& memory(int64_t r, int layer) const {
    return writes[r].memory().layer(layer);
  }
};

// The rows still running through the layers (CALM exits remove rows).
struct ActiveRows {
  std::vector<int64_t> rows;  // [A] indices into DecodeStepState's rows, ascending
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

// Opens the write of one new position in each memory (SessionMemory::BeginWrite(1)) and, for
// the host kernel, each row's visible runs. The memories must share one shape (one model's).
DecodeStepState BeginDecodeStep(absl::Span<memory::SessionMemory* const> memories,
                                AttentionLayout layout);

}  // namespace mnemo::model

#endif  // MNEMO_ENGINE_MODEL_DECODE_STEP_STATE_H_
