// ScoreTask: one Score request: the log-probability of each token of a text (or of the
// request's ids) given everything before it. The first token uses the sequence's
// last_logprobs; a sequence never fed has none (token_ids, which are never primed with BOS,
// or a vocabulary without BOS): its first token is fed as context only and not scored.
//
// Runs on the session's own state when update_memory is set; otherwise on a deep copy taken
// at its first step (or a fresh state for one-shot requests), so the session is left exactly
// as it was. A request whose caller gave up (`cancelled`) ends CANCELLED at its next step:
// before it starts, or between chunks, keeping (and committing) what an updating Score read.
// Owns its completion callback. Loop thread only (cancelled(): any thread).
#ifndef MNEMO_ENGINE_SCHEDULER_SCORE_TASK_H_
#define MNEMO_ENGINE_SCHEDULER_SCORE_TASK_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/scheduler/task.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/types.h"

namespace mnemo::scheduler {

class ScoreTask : public Task {
 public:
  using Done = std::function<void(absl::StatusOr<engine::ScoreResult>)>;

  // `options` are validated and `knn_lm` resolved from them; `session` nullptr = one-shot.
  // `tokenizer` (the model's) encodes the text and gives the scored tokens' bytes; it must
  // outlive the task (the scheduler's Model does).
  // `recall_capacity`: the history a one-shot request with recall on gets (tokens).
  ScoreTask(uint64_t id, engine::ScoreOptions options, std::optional<KnnLmPlan> knn_lm, Done done,
            session::Session* session, const tokenizer::Tokenizer& tokenizer,
            int64_t recall_capacity = int64_t{1} << 20, std::function<bool()> cancelled = {});

  bool Step(StepContext& ctx) override;
  void Abort(const absl::Status& status, absl::Time now) override;

 private:
  bool uses_session_state() const { return session() != nullptr && options_.update_memory; }
  session::SequenceState& state() { return uses_session_state() ? session()->state : own_; }
  void Fail(absl::Status status);

  const engine::ScoreOptions options_;
  const std::optional<KnnLmPlan> knn_lm_;
  const int64_t recall_capacity_;
  RecallPlan recall_;  // resolved by the first step
  Done done_;
  bool started_ = false;
  session::SequenceState own_;  // one-shot state, or the copy scored without updating memory
  const tokenizer::Tokenizer& tokenizer_;
  std::vector<int> tokens_;  // options_.token_ids, or the ids of options_.text
  bool prime_with_bos_ = true;  // PrimesWithBos: text, and a vocabulary with BOS
  size_t fed_ = 0;
  engine::ScoreResult result_;
};

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_SCORE_TASK_H_
