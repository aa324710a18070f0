// GenerateTask: one Generate request, from prompt prefill to its final stream Close().
//
// Owns the request's stream handle, RNG, UTF-8 decoder and stop matcher; borrows its Session
// (or owns a fresh SequenceState when one-shot, discarded with the task) and the model's
// Tokenizer (the scheduler's Model outlives its tasks).
//
// Thread-safety: one thread at a time (Task's rule): prompt chunks may run on a worker of the
// scheduler's pool, decode steps and OnDecoded on the loop thread. cancelled() reads the
// thread-safe stream.
//
// Invariant between steps: every token pushed to the stream has been fed into the sequence's
// memory (the feed follows the push within the same step), so a cancelled stream leaves the
// session holding exactly the prompt plus the tokens the client was sent.
#ifndef MNEMO_ENGINE_SCHEDULER_GENERATE_TASK_H_
#define MNEMO_ENGINE_SCHEDULER_GENERATE_TASK_H_

#include <memory>
#include <optional>
#include <vector>

#include "engine/generate_stream.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_matcher.h"
#include "engine/scheduler/task.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "engine/types.h"

namespace mnemo::scheduler {

class GenerateTask : public Task {
 public:
  // `options` are validated by ValidateGenerate, which resolves max_new_tokens and, when early
  // exit is enabled, its measure and threshold (a threshold >= 1 never exits); `knn_lm` is
  // resolved from them; `seed` is the request's seed (or one the scheduler drew). `session`
  // nullptr = one-shot. `tokenizer` (the model's) must outlive the task.
  GenerateTask(uint64_t id, engine::GenerateOptions options, std::optional<KnnLmPlan> knn_lm,
               std::shared_ptr<engine::GenerateStream> stream, absl::Time submit_time,
               uint64_t seed, session::Session* session, const tokenizer::Tokenizer& tokenizer,
               int64_t recall_capacity = int64_t{1} << 20);

  bool Step(StepContext& ctx) override;
  bool OnDecoded(DecodeOutput out, absl::Time now) override;
  void Abort(const absl::Status& status, absl::Time now) override;
  bool cancelled() const override { return stream_->cancelled(); }
  bool WantsPrefill() const override { return prompt_fed_ < prompt_.size(); }
  // A prompt chunk only feeds this request's sequence (or finishes it through the stream).
  bool PrefillsAnywhere() const override { return WantsPrefill(); }
  memory::SessionMemory TakeOneShotMemory() override {
    return session() == nullptr ? std::move(one_shot_.memory) : memory::SessionMemory();
  }

 private:
  session::SequenceState& state() { return session() ? session()->state : one_shot_; }
  // Samples, pushes and feeds one token; returns true when the request is finished.
  bool DecodeOne(StepContext& ctx);
  void Finish(engine::FinishReason reason, absl::Status status, absl::Time now);
  // Whether sampling `id` ends the request (options_.stop_token_ids).
  bool IsStopToken(int id) const;
  // Whether `id` is one of the tokenizer's end-of-sequence ids (eos_ids_).
  bool IsEos(int id) const;

  const engine::GenerateOptions options_;
  const std::optional<KnnLmPlan> knn_lm_;
  const int64_t recall_capacity_;  // a one-shot request's history, tokens
  RecallPlan recall_;              // resolved by the first step
  // Set when the request exits early and its threshold allows exits: λ before the schedule.
  std::optional<float> exit_threshold_;
  model::ExitMeasure exit_measure_ = model::ExitMeasure::kSoftmaxResponse;  // with exit_threshold_
  bool finished_ = false;  // the stream was closed (Finish ran)
  // Set while a sampled token's feed waits in the iteration's DecodeBatch: whether it was the
  // request's last token, and the reason it then finishes with.
  struct BatchedFeed {
    bool last = false;
    engine::FinishReason reason = engine::FinishReason::kLength;
  };
  std::optional<BatchedFeed> batched_feed_;
  const std::shared_ptr<engine::GenerateStream> stream_;
  const absl::Time submit_time_;
  std::optional<absl::Duration> queue_time_;  // set by the first step

  session::SequenceState one_shot_;  // used when session() is nullptr
  const tokenizer::Tokenizer& tokenizer_;
  // Every id that ends a sequence (Tokenizer::eos_ids: generation_config.json may list several).
  const std::vector<int> eos_ids_;
  std::vector<int> prompt_;  // options_.prompt_token_ids, or the ids of options_.prompt
  // Whether a fresh sequence gets BOS before the prompt (PrimesWithBos: text, and a BOS).
  bool prime_with_bos_ = true;
  size_t prompt_fed_ = 0;
  std::vector<int> generated_;  // ids pushed to the stream, in order

  sampling::SamplingParams params_;
  // Ids never sampled: BOS, PAD, and EOS unless stop_at_eos; but not the stop_token_ids.
  std::vector<int> forbidden_;
  sampling::Rng rng_;
  tokenizer::Utf8StreamDecoder decoder_;
  sampling::StopMatcher stop_;
};

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_GENERATE_TASK_H_
