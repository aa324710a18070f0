// Request: one call into the engine, as it travels from the calling thread to the loop thread:
// a payload per kind of call (std::variant), each holding the call's options and its output
// channel (a stream for Generate, a completion callback for everything else).
//
// Ownership: whoever holds the Request owns delivering its result exactly once (stream Close
// or callback): the caller until RequestQueue::Push succeeds, then the scheduler's loop thread.
// Thread-safety: none of its own; one thread holds it at a time (the queue hands it over).
#ifndef MNEMO_ENGINE_SCHEDULER_REQUEST_H_
#define MNEMO_ENGINE_SCHEDULER_REQUEST_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/generate_stream.h"
#include "engine/scheduler/knn_lm_step.h"
#include "engine/types.h"

namespace mnemo::scheduler {

using ScoreDone = std::function<void(absl::StatusOr<engine::ScoreResult>)>;
using SessionDone = std::function<void(absl::StatusOr<engine::SessionInfo>)>;
using ListDone = std::function<void(absl::StatusOr<std::vector<engine::SessionInfo>>)>;
using StatusDone = std::function<void(absl::Status)>;
using AddToDatastoreDone = std::function<void(absl::StatusOr<engine::AddToDatastoreResult>)>;
using DatastoreDone = std::function<void(absl::StatusOr<engine::DatastoreInfo>)>;
using BytesDone = std::function<void(absl::StatusOr<std::string>)>;
// True once the caller has given up on a unary request (its client cancelled or its deadline
// passed); may be called from any thread, until the request's `done` runs. Empty = never.
using CancelCheck = std::function<bool()>;

// Model work: admitted as a task (GenerateTask, ScoreTask, DatastoreAddTask), counted against
// max_waiting. The options are validated and kNN-LM resolved (Scheduler::Prepare) before the
// request is queued.
struct GenerateCall {
  engine::GenerateOptions options;
  std::shared_ptr<engine::GenerateStream> stream;
  std::optional<KnnLmPlan> knn_lm;
};
struct ScoreCall {
  engine::ScoreOptions options;
  ScoreDone done;
  std::optional<KnnLmPlan> knn_lm;
  CancelCheck cancelled;
};
struct AddToDatastoreCall {
  engine::AddToDatastoreOptions options;
  AddToDatastoreDone done;
  CancelCheck cancelled;
};
// Session operations: answered by the loop thread as soon as it pops them.
struct CreateSessionCall {
  engine::CreateSessionOptions options;
  SessionDone done;
};
struct GetSessionCall {
  std::string session_id;
  SessionDone done;
};
struct ListSessionsCall {
  ListDone done;
};
struct DeleteSessionCall {
  std::string session_id;
  StatusDone done;
};
struct GetSessionDatastoreCall {
  std::string session_id;
  DatastoreDone done;
};

// Moving sessions (docs/durability.md): a session as snapshot bytes, a session made from them,
// and a copy of a session under a new id.
struct ExportSessionCall {
  std::string session_id;
  BytesDone done;
};
struct ImportSessionCall {
  std::string session_id;  // empty = the id in the snapshot
  std::string snapshot;
  SessionDone done;
};
struct ForkSessionCall {
  std::string session_id;
  std::string new_session_id;  // empty = generated
  SessionDone done;
};

using Call = std::variant<GenerateCall, ScoreCall, AddToDatastoreCall, CreateSessionCall,
                          GetSessionCall, ListSessionsCall, DeleteSessionCall,
                          GetSessionDatastoreCall, ExportSessionCall, ImportSessionCall,
                          ForkSessionCall>;

struct Request {
  Call call;
  absl::Time submit_time;

  // Model work (Generate, Score, AddToDatastore) counts against max_waiting; session
  // operations do not.
  bool is_model_work() const {
    return std::holds_alternative<GenerateCall>(call) || std::holds_alternative<ScoreCall>(call) ||
           std::holds_alternative<AddToDatastoreCall>(call);
  }
  // Delivers `status` as the result without doing anything.
  void Fail(const absl::Status& status, absl::Time now);
};

// A visitor made of lambdas, one per payload (std::visit(Overloaded{...}, call)).
template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_REQUEST_H_
