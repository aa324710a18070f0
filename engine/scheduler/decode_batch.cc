#include "engine/scheduler/decode_batch.h"

#include <utility>

namespace mnemo::scheduler {

void DecodeBatch::Add(const model::DecodeRow& row, Done done) {
  rows_.push_back(row);
  done_.push_back(std::move(done));
}

int DecodeBatch::Run(model::ParallelDecoder& decoder) {
  if (rows_.empty()) return 0;
  std::vector<model::DecodeRow> rows = std::exchange(rows_, {});
  std::vector<Done> done = std::exchange(done_, {});
  Complete(rows, done, decoder.Step(rows));
  return static_cast<int>(rows.size());
}

int DecodeBatch::RunAlongside(model::ParallelDecoder& decoder, absl::FunctionRef<void()> work) {
  if (rows_.empty()) {
    decoder.RunOnAll(work);
    return 0;
  }
  std::vector<model::DecodeRow> rows = std::exchange(rows_, {});
  std::vector<Done> done = std::exchange(done_, {});
  Complete(rows, done, decoder.StepAlongside(rows, work));
  return static_cast<int>(rows.size());
}

void DecodeBatch::Complete(const std::vector<model::DecodeRow>& rows, std::vector<Done>& done,
                           const absl::StatusOr<model::DecodeBatchResult>& result) {
  for (size_t r = 0; r < rows.size(); ++r) {
    if (!result.ok()) {
      done[r](result.status());
      continue;
    }
    Output out;
    const int64_t row = static_cast<int64_t>(r);
    out.logprobs = result->logprobs[row].contiguous();
    out.exit_layer = result->exit_layers[r];
    if (rows[r].knn_lm_key && result->knn_lm_keys.defined()) {
      out.knn_lm_key = result->knn_lm_keys[row].contiguous();
    }
    done[r](std::move(out));
  }
}

}  // namespace mnemo::scheduler
