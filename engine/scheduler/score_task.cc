#include "engine/scheduler/score_task.h"

#include <cmath>
#include <utility>


namespace mnemo::scheduler {

ScoreTask::ScoreTask(uint64_t id, engine::ScoreOptions options, std::optional<KnnLmPlan> knn_lm,
                     Done done, session::Session* session,
                     const tokenizer::Tokenizer& tokenizer, int64_t recall_capacity,
                     std::function<bool()> cancelled)
    : Task(id, session, std::move(cancelled)),
      options_(std::move(options)),
      knn_lm_(std::move(knn_lm)),
      recall_capacity_(recall_capacity),
      done_(std::move(done)),
      tokenizer_(tokenizer) {
  const bool from_ids = !options_.token_ids.empty();
  tokens_ = from_ids ? options_.token_ids : tokenizer.Encode(options_.text);
  prime_with_bos_ = PrimesWithBos(tokenizer, from_ids);
}

bool ScoreTask::Step(StepContext& ctx) {
  if (cancelled()) {
    Fail(absl::CancelledError("the client cancelled the call"));
    return true;
  }
  if (!started_) {
    started_ = true;
    if (knn_lm_) {
      if (absl::Status ready = CheckKnnLmReady(*knn_lm_, session()); !ready.ok()) {
        Fail(ready);
        return true;
      }
    }
    if (session() == nullptr) {
      own_.memory = ctx.model.NewMemory(ctx.memory);
    } else if (!options_.update_memory) {
      own_ = session()->state.Clone();
    }
    absl::StatusOr<RecallPlan> recall =
        ResolveRecall(options_.recall, session(), state(), recall_capacity_);
    if (!recall.ok()) {
      Fail(recall.status());
      return true;
    }
    recall_ = *recall;
  }
  if (prime_with_bos_) {
    if (absl::Status s = PrimeIfNeeded(ctx.model, state()); !s.ok()) {
      Fail(s);
      return true;
    }
  }
  const int64_t n = NextChunkSize(state(), ctx.model.config().seg_len,
                                  static_cast<int64_t>(tokens_.size() - fed_));
  absl::Span<const int> chunk(tokens_.data() + fed_, n);
  // A sequence never fed (ids, or a vocabulary without BOS) has no distribution for its first
  // token: that token is context only, and scoring starts at chunk[first].
  const bool has_prior = state().primed();
  const int64_t first = has_prior ? 0 : 1;
  const int64_t scored = n - first;
  // Row i of `predictions` is the distribution chunk[first + i] is scored under: the state's
  // last one for chunk[0] (when it has one), then the model's output after the token before.
  torch::Tensor predictions;  // [scored, vocab]
  torch::Tensor keys;         // [scored, d_model]
  const bool keys_from_state = has_prior && state().last_knn_lm_key.defined();
  if (has_prior) {
    predictions = state().last_logprobs.unsqueeze(0);  // [1, vocab]
    // [1, d_model]; a placeholder row when the state has no key (never searched, see below)
    keys = keys_from_state ? state().last_knn_lm_key.unsqueeze(0)
                           : torch::zeros({1, ctx.model.config().d_model});
  }
  torch::Tensor out_keys;
  absl::StatusOr<torch::Tensor> out =
      FeedText(ctx.model, state(), chunk, model::Outputs::kAll, &out_keys);
  if (!out.ok()) {
    Fail(out.status());
    return true;
  }
  // What the history predicted for each scored token, read before that token joins it.
  std::vector<datastore::RecallPrediction> recalled;
  Remember(tokenizer_, state(), chunk, recall_.enabled ? &recalled : nullptr,
           static_cast<size_t>(first));
  if (!has_prior) {  // out: [n, vocab]; row i predicts chunk[i + 1]
    predictions = out->narrow(0, 0, n - 1);  // [n - 1, vocab]
    keys = out_keys.narrow(0, 0, n - 1);     // [n - 1, d_model]
  } else if (n > 1) {
    predictions = torch::cat({predictions, out->narrow(0, 0, n - 1)}, 0);  // [n, vocab]
    keys = torch::cat({keys, out_keys.narrow(0, 0, n - 1)}, 0);            // [n, d_model]
  }
  // A session whose last token exited early (CALM) has no key for its last distribution:
  // that one row keeps the model's distribution (see SequenceState::last_knn_lm_key).
  const int64_t skip = has_prior && !keys_from_state ? 1 : 0;
  if (knn_lm_ && scored > skip) {
    absl::StatusOr<torch::Tensor> mixed =
        ApplyKnnLm(*knn_lm_, session(), keys.narrow(0, skip, scored - skip),
                   predictions.narrow(0, skip, scored - skip), ctx.knn_search_observer);
    if (!mixed.ok()) {
      Fail(mixed.status());
      return true;
    }
    predictions = skip == 0 ? *mixed : torch::cat({predictions.narrow(0, 0, 1), *mixed}, 0);
  }
  if (recall_.enabled && scored > 0) {
    predictions = predictions.contiguous().clone();  // rows may alias the state's distribution
    float* rows = predictions.data_ptr<float>();
    const int64_t vocab = predictions.size(1);
    for (int64_t i = 0; i < scored; ++i) {
      datastore::MixRecall(absl::Span<float>(rows + i * vocab, static_cast<size_t>(vocab)),
                           recalled[static_cast<size_t>(i)], recall_.options);
    }
  }
  if (scored > 0) {
    predictions = predictions.contiguous();
    const float* rows = predictions.data_ptr<float>();
    const int64_t vocab = predictions.size(1);
    for (int64_t i = 0; i < scored; ++i) {
      const int id = chunk[first + i];
      const float lp = rows[i * vocab + id];
      result_.total_logprob += lp;
      result_.byte_count += static_cast<int64_t>(tokenizer_.TokenBytes(id).size());
      if (options_.token_logprobs) result_.logprobs.push_back(lp);
    }
    result_.token_count += scored;
  }
  fed_ += n;
  if (fed_ < tokens_.size()) return false;

  // Bits per byte over the UTF-8 bytes the scored tokens stand for (docs/design.md §11).
  result_.bits_per_byte = result_.byte_count > 0
                              ? -result_.total_logprob / std::log(2.0) / result_.byte_count
                              : 0.0;
  Done done = std::move(done_);
  if (!options_.update_memory) {  // the session did not change
    done(std::move(result_));
    return true;
  }
  CommitSession(session::CallKind::kScore, static_cast<int64_t>(tokens_.size()),
                ResultOnceCommitted(std::move(done), std::move(result_)));
  return true;
}

void ScoreTask::Abort(const absl::Status& status, absl::Time) { Fail(status); }

void ScoreTask::Fail(absl::Status status) {
  Done done = std::move(done_);
  if (!done) return;
  if (!options_.update_memory || !started_) {
    done(std::move(status));
    return;
  }
  // Chunks fed before the failure changed the session: on disk too, as far as it goes.
  CommitSession(session::CallKind::kScore, static_cast<int64_t>(fed_),
                [done = std::move(done), status = std::move(status)](absl::Status) mutable {
                  done(std::move(status));
                });
}

}  // namespace mnemo::scheduler
