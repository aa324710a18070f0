#include "engine/scheduler/generate_task.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/calm/threshold_schedule.h"

namespace mnemo::scheduler {

using engine::FinishReason;

GenerateTask::GenerateTask(uint64_t id, engine::GenerateOptions options,
                           std::optional<KnnLmPlan> knn_lm,
                           std::shared_ptr<engine::GenerateStream> stream,
                           absl::Time submit_time, uint64_t seed, session::Session* session,
                           const tokenizer::Tokenizer& tokenizer, int64_t recall_capacity)
    : Task(id, session),
      options_(std::move(options)),
      knn_lm_(std::move(knn_lm)),
      recall_capacity_(recall_capacity),
      stream_(std::move(stream)),
      submit_time_(submit_time),
      tokenizer_(tokenizer),
      eos_ids_(tokenizer.eos_ids()),
      rng_(seed),
      stop_(options_.stop) {
  const bool from_ids = !options_.prompt_token_ids.empty();
  prompt_ = from_ids ? options_.prompt_token_ids : tokenizer_.Encode(options_.prompt);
  prime_with_bos_ = PrimesWithBos(tokenizer_, from_ids);
  params_.temperature = options_.sampling.temperature;
  params_.top_k = options_.sampling.top_k;
  params_.top_p = options_.sampling.top_p;
  params_.repetition_penalty = options_.sampling.repetition_penalty;
  params_.min_p = options_.sampling.min_p;
  params_.presence_penalty = options_.sampling.presence_penalty;
  params_.frequency_penalty = options_.sampling.frequency_penalty;
  params_.logit_bias.assign(options_.sampling.logit_bias.begin(),
                            options_.sampling.logit_bias.end());
  params_.top_logprobs = options_.top_logprobs;
  // BOS and PAD are never sampled (a vocabulary without them has nothing to forbid).
  std::vector<int> forbidden;
  for (int special : {tokenizer_.bos_id(), tokenizer_.pad_id()}) {
    if (special >= 0) forbidden.push_back(special);
  }
  // A request that does not stop at EOS must not see it either: an EOS in the middle of the
  // text would be a token with no bytes that the model was never trained to continue from.
  // (Every id that ends generation: generation_config.json may list several.)
  if (!options_.stop_at_eos) {
    for (int eos : eos_ids_) forbidden.push_back(eos);
  }
  // ...unless the request lists it as a stop token: then it may be sampled, and ends the text.
  for (int id : forbidden) {
    if (!IsStopToken(id)) forbidden_.push_back(id);
  }
  // Validation resolved an enabled request's threshold and measure; 1.0 never exits.
  if (options_.early_exit.enabled && options_.early_exit.threshold.has_value() &&
      calm::ExitEnabled(*options_.early_exit.threshold)) {
    exit_threshold_ = *options_.early_exit.threshold;
    exit_measure_ = options_.early_exit.measure.value_or(model::ExitMeasure::kSoftmaxResponse);
  }
}

bool GenerateTask::Step(StepContext& ctx) {
  if (stream_->cancelled()) {
    Finish(FinishReason::kCancelled, absl::OkStatus(), ctx.now);
    return true;
  }
  if (!queue_time_) {  // first step
    queue_time_ = ctx.now - submit_time_;
    if (knn_lm_) {
      if (absl::Status ready = CheckKnnLmReady(*knn_lm_, session()); !ready.ok()) {
        Finish(FinishReason::kError, ready, ctx.now);
        return true;
      }
    }
    if (session() == nullptr) one_shot_.memory = ctx.model.NewMemory(ctx.memory, ctx.memory_pool);
    absl::StatusOr<RecallPlan> recall =
        ResolveRecall(options_.recall, session(), state(), recall_capacity_);
    if (!recall.ok()) {
      Finish(FinishReason::kError, recall.status(), ctx.now);
      return true;
    }
    recall_ = *recall;
  }
  const int64_t remaining = static_cast<int64_t>(prompt_.size() - prompt_fed_);
  const int seg_len = ctx.model.config().seg_len;
  // A fresh text request's sequence takes BOS in the same Forward as its first prompt chunk
  // (the chunk one token shorter, so both fit the segment), or alone when there is no prompt
  // or no room. Ids, and a vocabulary without BOS, start with the first prompt token.
  const bool prime = prime_with_bos_ && !state().primed();
  const int64_t with_bos = prime && remaining > 0 ? NextChunkSize(state(), seg_len, remaining + 1)
                                                  : 0;
  const bool bos_with_chunk = with_bos > 1;
  if (prime && !bos_with_chunk) {
    if (absl::Status s = PrimeIfNeeded(ctx.model, state()); !s.ok()) {
      Finish(FinishReason::kError, s, ctx.now);
      return true;
    }
  }
  if (remaining > 0) {
    // (After a separate BOS the state has moved on: the chunk is measured from there.)
    const int64_t n = bos_with_chunk ? with_bos - 1 : NextChunkSize(state(), seg_len, remaining);
    absl::Span<const int> chunk(prompt_.data() + prompt_fed_, n);
    absl::StatusOr<torch::Tensor> out =
        bos_with_chunk ? PrimeAndFeedText(ctx.model, state(), chunk)
                       : FeedText(ctx.model, state(), chunk, model::Outputs::kLast);
    if (!out.ok()) {
      Finish(FinishReason::kError, out.status(), ctx.now);
      return true;
    }
    Remember(tokenizer_, state(), chunk);
    prompt_fed_ += n;
    return false;
  }
  if (!state().primed()) {  // an empty prompt on a fresh session of a model without BOS
    Finish(FinishReason::kError,
           absl::FailedPreconditionError(
               "the session is empty and the model's vocabulary has no BOS token to start "
               "from: send a prompt"),
           ctx.now);
    return true;
  }
  return DecodeOne(ctx);
}

bool GenerateTask::DecodeOne(StepContext& ctx) {
  torch::Tensor distribution = state().last_logprobs;  // [vocab]
  // Without a key (the session's last token exited early, and its request ended without a
  // full-depth feed) this one token is sampled from the model alone.
  if (knn_lm_ && state().last_knn_lm_key.defined()) {
    absl::StatusOr<torch::Tensor> mixed =
        ApplyKnnLm(*knn_lm_, session(), state().last_knn_lm_key.unsqueeze(0),
                   distribution.unsqueeze(0), ctx.knn_search_observer);
    if (!mixed.ok()) {
      Finish(FinishReason::kError, mixed.status(), ctx.now);
      return true;
    }
    distribution = (*mixed)[0].contiguous();
  }
  if (recall_.enabled && state().history != nullptr) {
    const datastore::RecallPrediction recalled = state().history->Query();
    if (datastore::RecallLambda(recalled, recall_.options) > 0.0f) {
      distribution = distribution.contiguous().clone();  // never the state's own tensor
      datastore::MixRecall(absl::Span<float>(distribution.data_ptr<float>(),
                                             static_cast<size_t>(distribution.numel())),
                           recalled, recall_.options);
    }
  }
  const sampling::SampleResult sample =
      sampling::Sample(AsSpan(distribution), params_, generated_, forbidden_, rng_);
  if (sample.id < 0) {
    Finish(FinishReason::kError,
           absl::InternalError("the model gave no token a finite log-probability"), ctx.now);
    return true;
  }
  if (IsEos(sample.id)) {
    stream_->PushText(decoder_.Flush());  // EOS is neither pushed as a token nor fed
    Finish(FinishReason::kEos, absl::OkStatus(), ctx.now);
    return true;
  }

  engine::TokenOutput token;
  token.id = sample.id;
  token.bytes = tokenizer_.TokenBytes(sample.id);
  token.logprob = sample.logprob;
  token.exit_layer =
      state().last_exit_layer > 0 ? state().last_exit_layer : ctx.model.config().n_layers;
  for (const sampling::Alternative& alt : sample.top) {
    tokenizer::Utf8StreamDecoder preview = decoder_;  // what `alt` would have completed
    token.top_logprobs.push_back({alt.id, preview.Feed(tokenizer_.TokenBytes(alt.id)),
                                  alt.logprob});
  }
  std::string delta = decoder_.Feed(token.bytes);
  const bool stop_string = stop_.Feed(token.bytes);
  const bool stopped = stop_string || IsStopToken(sample.id);
  generated_.push_back(sample.id);
  const bool last =
      stopped || static_cast<int>(generated_.size()) >= options_.max_new_tokens;
  if (last) delta += decoder_.Flush();
  token.text = delta;
  stream_->Push(std::move(token), delta);

  // Feed the token so the next step (or the session's next request) continues after it. A
  // finished one-shot request has no use for it.
  const FinishReason reason = stopped ? FinishReason::kStop : FinishReason::kLength;
  if (last && session() == nullptr) {
    Finish(reason, absl::OkStatus(), ctx.now);
    return true;
  }
  const int fed_id[] = {sample.id};
  Remember(tokenizer_, state(), fed_id);  // what the session generated is remembered too
  // Full depth unless early exit is on, and always for a session's last token, so that the
  // next request starts from a full-depth distribution and kNN-LM key.
  const bool exit_allowed = exit_threshold_.has_value() && !last;
  // λ_t for the token this feed's output will choose (0-based index in the output).
  const float threshold =
      exit_allowed ? calm::ScheduledThreshold(*exit_threshold_,
                                              static_cast<int64_t>(generated_.size()),
                                              options_.max_new_tokens)
                   : 2.0f;
  if (ctx.decode_batch != nullptr) {
    model::DecodeRow row;
    row.token = sample.id;
    row.memory = &state().memory;
    row.exit_threshold = threshold;
    row.knn_lm_key = !exit_allowed;
    row.exit_measure = exit_measure_;
    ctx.decode_batch->Add(id(), row);
    batched_feed_ = BatchedFeed{last, reason};  // OnDecoded finishes what this step began
    return false;
  }
  const int ids[] = {sample.id};
  const absl::Status fed = exit_allowed
                               ? FeedTokenWithExit(ctx.model, state(), sample.id, threshold,
                                                   exit_measure_)
                               : FeedText(ctx.model, state(), ids, model::Outputs::kLast).status();
  if (!fed.ok()) {
    Finish(FinishReason::kError, fed, ctx.now);
    return true;
  }
  if (last) Finish(reason, absl::OkStatus(), ctx.now);
  return last;
}

bool GenerateTask::OnDecoded(DecodeOutput out, absl::Time now) {
  if (!batched_feed_.has_value()) return Task::OnDecoded(std::move(out), now);
  const BatchedFeed feed = *batched_feed_;
  batched_feed_.reset();
  if (!out.status.ok()) {
    Finish(FinishReason::kError, std::move(out.status), now);
    return true;
  }
  RecordFeed(state(), std::move(out.logprobs), out.exit_layer, std::move(out.knn_lm_key));
  if (feed.last) Finish(feed.reason, absl::OkStatus(), now);
  return feed.last;
}

bool GenerateTask::IsEos(int id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

bool GenerateTask::IsStopToken(int id) const {
  return std::find(options_.stop_token_ids.begin(), options_.stop_token_ids.end(), id) !=
         options_.stop_token_ids.end();
}

void GenerateTask::Abort(const absl::Status& status, absl::Time now) {
  const bool shutdown = status.code() == absl::StatusCode::kUnavailable ||
                        status.code() == absl::StatusCode::kCancelled;
  Finish(shutdown ? FinishReason::kCancelled : FinishReason::kError, status, now);
}

void GenerateTask::Finish(FinishReason reason, absl::Status status, absl::Time now) {
  if (finished_) return;
  finished_ = true;
  engine::GenerateFinal final;
  final.reason = reason;
  final.status = std::move(status);
  final.usage.prompt_tokens = static_cast<int>(prompt_.size());
  final.usage.generated_tokens = static_cast<int>(generated_.size());
  final.usage.session_tokens = session() != nullptr ? session()->state.tokens_seen : 0;
  final.queue_time = queue_time_.value_or(now - submit_time_);
  // What the call fed is durable before its result goes out (whatever the outcome: the
  // session's next call continues from what is in memory now).
  CommitSession(session::CallKind::kGenerate,
                static_cast<int64_t>(prompt_fed_ + generated_.size()),
                [stream = stream_, final = std::move(final)](absl::Status committed) mutable {
                  if (!committed.ok() && final.status.ok()) {
                    final.reason = FinishReason::kError;
                    final.status = std::move(committed);
                  }
                  stream->Close(std::move(final));
                });
}

}  // namespace mnemo::scheduler
