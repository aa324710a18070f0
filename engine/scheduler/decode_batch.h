// DecodeBatch: the single-token feeds of one scheduler iteration, gathered from the running
// Generate tasks and run as one batched decode step (model::ParallelDecoder: BatchDecoder
// shards on the cores; continuous batching, docs/design.md §5).
//
// A task adds its row (token, its sequence's memory, exit threshold) under its id; Run steps
// every row at once and returns one DecodeOutput per row, in the order added, which the
// IterationExecutor hands back to the task that added the row (Task::OnDecoded). Results are
// data, not callbacks: the batch never calls into a task.
//
// Borrows the rows' memories until Run returns. Thread-safety: the loop thread adds rows and
// calls Run; during Run the decoder's workers read the rows (ParallelDecoder's contract).
#ifndef MNEMO_ENGINE_SCHEDULER_DECODE_BATCH_H_
#define MNEMO_ENGINE_SCHEDULER_DECODE_BATCH_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "engine/model/batch_decoder.h"
#include "engine/model/parallel_decoder.h"

namespace mnemo::scheduler {

// One row's result of a batched decode step.
struct DecodeOutput {
  uint64_t task_id = 0;  // the task that added the row
  // The step's error, shared by every row: then the tensors are undefined and every row's
  // memory may be inconsistent.
  absl::Status status;
  torch::Tensor logprobs;    // [vocab] float32 CPU contiguous
  int exit_layer = 0;        // 1-based layer that produced them
  torch::Tensor knn_lm_key;  // [d_model]; undefined when the row exited early or asked for none
};

class DecodeBatch {
 public:
  void Add(uint64_t task_id, const model::DecodeRow& row);
  int size() const { return static_cast<int>(rows_.size()); }

  // Steps every row added since the last Run (nothing when empty) and returns one output per
  // row, in the order added.
  std::vector<DecodeOutput> Run(model::ParallelDecoder& decoder);
  // Run, with work on every thread of the decoder while the rows decode on its workers: the
  // caller's thread runs `caller_work` at once, each worker `worker_work` once its shard is
  // done (model::ParallelDecoder::StepAlongside; with no rows, RunOnAll). The work must be
  // safe to run concurrently. Returns after all of it.
  std::vector<DecodeOutput> RunAlongside(model::ParallelDecoder& decoder,
                                         absl::FunctionRef<void()> caller_work,
                                         absl::FunctionRef<void()> worker_work);

 private:
  // The step's result as one output per row (or the step's error on each).
  std::vector<DecodeOutput> Split(const absl::StatusOr<model::DecodeBatchResult>& result);

  std::vector<model::DecodeRow> rows_;
  std::vector<uint64_t> task_ids_;  // [rows_.size()]
};

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_DECODE_BATCH_H_
