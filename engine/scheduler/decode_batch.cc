#include "engine/scheduler/decode_batch.h"

#include <utility>

namespace mnemo::scheduler {

void DecodeBatch::Add(uint64_t task_id, const model::DecodeRow& row) {
  rows_.push_back(row);
  task_ids_.push_back(task_id);
}

std::vector<DecodeOutput> DecodeBatch::Run(model::ParallelDecoder& decoder) {
  if (rows_.empty()) return {};
  return Split(decoder.Step(rows_));
}

std::vector<DecodeOutput> DecodeBatch::RunAlongside(model::ParallelDecoder& decoder,
                                                    absl::FunctionRef<void()> caller_work,
                                                    absl::FunctionRef<void()> worker_work) {
  if (rows_.empty()) {
    decoder.RunOnAll(caller_work, worker_work);
    return {};
  }
  return Split(decoder.StepAlongside(rows_, caller_work, worker_work));
}

std::vector<DecodeOutput> DecodeBatch::Split(
    const absl::StatusOr<model::DecodeBatchResult>& result) {
  std::vector<DecodeOutput> outputs(rows_.size());
  for (size_t r = 0; r < rows_.size(); ++r) {
    DecodeOutput& out = outputs[r];
    out.task_id = task_ids_[r];
    if (!result.ok()) {
      out.status = result.status();
      continue;
    }
    const int64_t row = static_cast<int64_t>(r);
    out.logprobs = result->logprobs[row].contiguous();
    out.exit_layer = result->exit_layers[r];
    if (rows_[r].knn_lm_key && result->knn_lm_keys.defined()) {
      out.knn_lm_key = result->knn_lm_keys[row].contiguous();
    }
  }
  rows_.clear();
  task_ids_.clear();
  return outputs;
}

}  // namespace mnemo::scheduler
