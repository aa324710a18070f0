// Task: one admitted Generate, Score or AddToSessionDatastore request, advanced by the
// scheduler one unit of model work at a time (a prefill segment of at most seg_len tokens, or
// one decode token).
//
// A task owns its output channel (stream or callback) and delivers exactly one final result:
// from Step() or OnDecoded() when it returns true, or from Abort(). A decode token's feed may
// be handed to the iteration's DecodeBatch instead of run at once (continuous batching): the
// IterationExecutor then hands the row's result back to the task as data (OnDecoded) in the
// same iteration, before the scheduler releases the task's session. It borrows the Session it
// runs on (the SessionStore keeps busy sessions alive) or owns a fresh SequenceState for
// one-shot requests.
//
// Thread-safety: one thread at a time touches a task: the scheduler's loop thread, or a worker
// of the scheduler's pool it lends a prefill unit to (PrefillsAnywhere), within an iteration.
// cancelled() may be called from any thread.
#ifndef MNEMO_ENGINE_SCHEDULER_TASK_H_
#define MNEMO_ENGINE_SCHEDULER_TASK_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/model/model.h"
#include "engine/scheduler/decode_batch.h"
#include "engine/scheduler/knn_lm_step.h"
#include "engine/session/session.h"
#include "engine/session/session_snapshot.h"
#include "engine/tokenizer/tokenizer.h"

namespace mnemo::scheduler {

// What a step may use; all borrowed from the scheduler for the duration of the call.
struct StepContext {
  model::Model& model;
  absl::Time now;
  const model::MemoryOptions& memory;  // for a one-shot request's fresh memory
  const KnnSearchObserver& knn_search_observer;  // kNN-LM datastore searches (may be empty)
  // Where a decode step's single-token feed goes to be batched with the other tasks' (run by
  // the scheduler after every task has stepped); nullptr = feed at once.
  DecodeBatch* decode_batch = nullptr;
  // Recycled memories for one-shot requests (Model::NewMemory draws from it); may be null.
  memory::MemoryPool* memory_pool = nullptr;
};

class Task {
 public:
  virtual ~Task() = default;

  // Does one unit of work. Returns true when the task has finished and delivered its result.
  // A step that added a row to ctx.decode_batch returns false: the task finishes, if it does,
  // in OnDecoded.
  virtual bool Step(StepContext& ctx) = 0;
  // The result of the decode row this task's last Step added to the batch (a failed step's
  // error included). Returns true when the task has finished and delivered its result. Only a
  // task that adds rows overrides it; the default finishes the task with INTERNAL.
  virtual bool OnDecoded(DecodeOutput out, absl::Time now);
  // Delivers `status` as the result without more model work (unknown session, shutdown,
  // an exception escaping Step). Must be called at most once, and never after Step returned
  // true.
  virtual void Abort(const absl::Status& status, absl::Time now) = 0;
  // True when the next unit is a prefill (a prompt or text chunk, at most seg_len tokens)
  // rather than one decode token; the scheduler bounds prefill work per iteration.
  virtual bool WantsPrefill() const { return true; }
  // True when the next unit, a prefill, may run on a decode worker thread instead of the loop
  // thread (at the same time as other tasks' units): it touches only the task's own sequence
  // and delivers only through a thread-safe channel. A Generate's prompt chunks do (their only
  // output is the request's stream); Score and datastore chunks call callbacks that the engine
  // runs on its loop thread.
  virtual bool PrefillsAnywhere() const { return false; }
  // True when the client gave up (a cancelled stream): the scheduler finishes the task
  // (through Step) even before it starts running.
  // The default answers the cancel check the task was made with (unary requests: Score,
  // AddToSessionDatastore); none = never.
  virtual bool cancelled() const { return cancelled_ && cancelled_(); }
  // Once the task has finished: its one-shot sequence's memory, made by Model::NewMemory with
  // the scheduler's memory options, for its memory::MemoryPool; an empty placeholder when it
  // has none (session tasks, and tasks whose memory is a copy or was never made).
  virtual memory::SessionMemory TakeOneShotMemory() { return {}; }

  uint64_t id() const { return id_; }
  // The session the task runs on, or nullptr for a one-shot request.
  session::Session* session() const { return session_; }

  // Durable sessions (docs/durability.md): how a session task makes what it changed durable
  // before it delivers its result (SessionStore::Commit). Unset: nothing to do.
  using Deliver = std::function<void(absl::Status committed)>;
  using CommitFn = std::function<void(const session::Session&, session::CallKind,
                                      int64_t tokens, Deliver deliver)>;
  void set_commit(CommitFn commit) { commit_ = std::move(commit); }

 protected:
  Task(uint64_t id, session::Session* session, std::function<bool()> cancelled = {})
      : id_(id), session_(session), cancelled_(std::move(cancelled)) {}

  // Commits the session's state, then runs `deliver` with the outcome: inline (OK) for
  // one-shot tasks and without a CommitFn, else once the commit is on disk, on the journal's
  // writer thread. Called on the thread that finishes the task, which holds the session;
  // `deliver` must not touch the task (it may be gone by then): it captures what it delivers.
  void CommitSession(session::CallKind kind, int64_t tokens, Deliver deliver) const {
    if (session_ == nullptr || !commit_) return deliver(absl::OkStatus());
    commit_(*session_, kind, tokens, std::move(deliver));
  }

 private:
  const uint64_t id_;
  session::Session* const session_;
  const std::function<bool()> cancelled_;
  CommitFn commit_;
};

// A Task::Deliver that hands `result` to `done` once the commit succeeded, and the commit's
// error otherwise (ScoreTask, DatastoreAddTask: a callback taking absl::StatusOr<Result>).
template <typename Done, typename Result>
Task::Deliver ResultOnceCommitted(Done done, Result result) {
  return [done = std::move(done), result = std::move(result)](absl::Status committed) mutable {
    if (committed.ok()) {
      done(std::move(result));
    } else {
      done(std::move(committed));
    }
  };
}

// How many tokens the next prefill unit should take: up to the end of the current seg_len
// segment in absolute positions, so units line up with the model's segments.
int64_t NextChunkSize(const session::SequenceState& state, int seg_len, int64_t remaining);

// Whether a fresh sequence is primed with BOS before a request's first token: only for text
// (a request's ids are fed exactly as given) and only when the vocabulary has a BOS (Qwen2's
// has none). A sequence that is not primed scores its first token against nothing: that token
// is context only (ScoreTask), and a Generate needs a prompt to sample after.
bool PrimesWithBos(const tokenizer::Tokenizer& tokenizer, bool from_ids);

// Recall (docs/recall.md) as a task runs it: `options` resolved from the request, active only
// when the sequence has a history (a session created with remember, or a one-shot request
// that asked for recall: ResolveRecall gives its state one).
struct RecallPlan {
  bool enabled = false;
  datastore::RecallOptions options;
};

// The request's recall against the sequence it runs on: FAILED_PRECONDITION when it asks for
// recall on a session created without remember. For a one-shot request with recall on,
// gives `state` a fresh history of `one_shot_capacity` tokens.
absl::StatusOr<RecallPlan> ResolveRecall(const engine::RecallRequest& request,
                                         const session::Session* session,
                                         session::SequenceState& state,
                                         int64_t one_shot_capacity);

// Appends `tokens` to the state's history (no-op without one). With `predictions`, first
// records before each token at index >= `first_predicted` what the history predicted for it.
void Remember(const tokenizer::Tokenizer& tokenizer, session::SequenceState& state,
              absl::Span<const int> tokens,
              std::vector<datastore::RecallPrediction>* predictions = nullptr,
              size_t first_predicted = 0);

// Feeds BOS if `state` was never fed, setting last_logprobs. No-op when already primed, and
// when the model's vocabulary has no BOS (the state stays unprimed).
absl::Status PrimeIfNeeded(model::Model& model, session::SequenceState& state);

// Feeds text tokens, updating last_logprobs, last_knn_lm_key and tokens_seen. With
// Outputs::kAll returns the model's log-probs after each token ([tokens.size(), vocab]); with
// kLast returns [1, vocab]. `knn_lm_keys`, if set, receives the matching kNN-LM keys
// ([rows, d_model] float32 CPU).
absl::StatusOr<torch::Tensor> FeedText(model::Model& model, session::SequenceState& state,
                                       absl::Span<const int> tokens, model::Outputs outputs,
                                       torch::Tensor* knn_lm_keys = nullptr);

// PrimeIfNeeded and FeedText(tokens, Outputs::kLast) in one Forward: BOS and `tokens` together
// (one pass over the weights instead of two, the same log-probs up to float rounding). For a
// state that is not primed yet, whose first segment has room for 1 + tokens.size() positions,
// of a model whose vocabulary has a BOS.
absl::StatusOr<torch::Tensor> PrimeAndFeedText(model::Model& model, session::SequenceState& state,
                                               absl::Span<const int> tokens);

// Records that one more token was fed and produced `logprobs` ([vocab] float32 CPU contiguous)
// at `exit_layer`, with kNN-LM key `key` ([d_model]; undefined when the token exited early).
void RecordFeed(session::SequenceState& state, torch::Tensor logprobs, int exit_layer,
                torch::Tensor key);

// Feeds one generated token through Model::ForwardWithExit (CALM, state propagation) with
// `measure`: sets last_logprobs from its exit layer, last_exit_layer, and clears
// last_knn_lm_key.
absl::Status FeedTokenWithExit(model::Model& model, session::SequenceState& state, int token,
                               float threshold, model::ExitMeasure measure);

// The log-probs of a [vocab] float32 CPU contiguous tensor as a span (no copy).
absl::Span<const float> AsSpan(const torch::Tensor& logprobs);

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_TASK_H_
