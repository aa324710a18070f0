#include "engine/scheduler/score_task.h"

#include <cmath>
#include <utility>

#include "engine/tokenizer/byte_tokenizer.h"

namespace mnemo::scheduler {

ScoreTask::ScoreTask(uint64_t id, engine::ScoreOptions options, Done done,
                     session::Session* session)
    : Task(id, session), options_(std::move(options)), done_(std::move(done)) {
  tokens_ = tokenizer::ByteTokenizer().Encode(options_.text);
}

bool ScoreTask::Step(StepContext& ctx) {
  if (!started_) {
    started_ = true;
    if (session() == nullptr) {
      own_.memory = ctx.model.NewMemory(ctx.memory);
    } else if (!options_.update_memory) {
      own_ = session()->state.Clone();
    }
  }
  if (absl::Status s = PrimeIfNeeded(ctx.model, state()); !s.ok()) {
    Fail(s);
    return true;
  }
  const int64_t n = NextChunkSize(state(), ctx.model.config().seg_len,
                                  static_cast<int64_t>(tokens_.size() - fed_));
  absl::Span<const int> chunk(tokens_.data() + fed_, n);
  torch::Tensor before = state().last_logprobs;  // [vocab]: predicts chunk[0]
  absl::StatusOr<torch::Tensor> out = FeedText(ctx.model, state(), chunk, model::Outputs::kAll);
  if (!out.ok()) {
    Fail(out.status());
    return true;
  }
  // out: [n, vocab]; row i predicts chunk[i + 1].
  const float* rows = out->data_ptr<float>();
  const int64_t vocab = out->size(1);
  for (int64_t i = 0; i < n; ++i) {
    const float lp = i == 0 ? before.data_ptr<float>()[chunk[0]] : rows[(i - 1) * vocab + chunk[i]];
    result_.total_logprob += lp;
    if (options_.token_logprobs) result_.logprobs.push_back(lp);
  }
  fed_ += n;
  if (fed_ < tokens_.size()) return false;

  result_.token_count = static_cast<int64_t>(tokens_.size());
  result_.byte_count = static_cast<int64_t>(options_.text.size());
  result_.bits_per_byte = -result_.total_logprob / std::log(2.0) / result_.byte_count;
  Done done = std::move(done_);
  done(std::move(result_));
  return true;
}

void ScoreTask::Abort(const absl::Status& status, absl::Time) { Fail(status); }

void ScoreTask::Fail(absl::Status status) {
  Done done = std::move(done_);
  if (done) done(std::move(status));
}

}  // namespace mnemo::scheduler
