// DecodeBatch: the single-token feeds of one scheduler iteration, gathered from the running
// Generate tasks and run as one batched decode step (model::ParallelDecoder: BatchDecoder
// shards on the cores; continuous batching, DESIGN.md §5).
//
// A task adds its row (token, its sequence's memory, exit threshold) with a completion; Run
// steps every row at once and hands each completion its row's result, in the order added.
// Borrows the memories until Run returns; the tasks that added rows must stay alive until
// then. Loop thread only.
#ifndef MNEMO_ENGINE_SCHEDULER_DECODE_BATCH_H_
#define MNEMO_ENGINE_SCHEDULER_DECODE_BATCH_H_

#include <torch/types.h>

#include <functional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "engine/model/batch_decoder.h"
#include "engine/model/parallel_decoder.h"

namespace mnemo::scheduler {

class DecodeBatch {
 public:
  struct Output {
    torch::Tensor logprobs;    // [vocab] float32 CPU contiguous
    int exit_layer = 0;        // 1-based layer that produced them
    torch::Tensor knn_lm_key;  // [d_model]; undefined when the row exited early
  };
  using Done = std::function<void(absl::StatusOr<Output>)>;

  void Add(const model::DecodeRow& row, Done done);
  int size() const { return static_cast<int>(rows_.size()); }

  // Steps every row added since the last Run (nothing when empty) and calls each completion:
  // with its row's Output, or with the step's error (then every row's memory may be
  // inconsistent). Returns the number of rows stepped.
  int Run(model::ParallelDecoder& decoder);
  // Run, with `work` on every thread of the decoder while the rows decode on its workers:
  // the caller's thread runs it at once, each worker once its shard is done
  // (model::ParallelDecoder::StepAlongside; with no rows, RunOnAll). `work` must be safe to
  // call concurrently. The completions are called on this thread after all of it.
  int RunAlongside(model::ParallelDecoder& decoder, absl::FunctionRef<void()> work);

 private:
  // Hands each completion its row's result (or the step's error).
  void Complete(const std::vector<model::DecodeRow>& rows, std::vector<Done>& done,
                const absl::StatusOr<model::DecodeBatchResult>& result);

  std::vector<model::DecodeRow> rows_;
  std::vector<Done> done_;
};

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_DECODE_BATCH_H_
