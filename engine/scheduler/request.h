// Request: one call into the engine, as it travels from the calling thread to the loop thread.
#ifndef MNEMO_ENGINE_SCHEDULER_REQUEST_H_
#define MNEMO_ENGINE_SCHEDULER_REQUEST_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
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

// Exactly one payload is meaningful, chosen by `kind`. Whoever holds the Request owns
// delivering its result (stream Close or callback) exactly once.
struct Request {
  enum class Kind {
    kGenerate,
    kScore,
    kAddToDatastore,
    kCreateSession,
    kGetSession,
    kListSessions,
    kDeleteSession,
    kGetSessionDatastore,
  };

  Kind kind = Kind::kGenerate;
  absl::Time submit_time;

  engine::GenerateOptions generate;                  // kGenerate (validated)
  std::shared_ptr<engine::GenerateStream> stream;    // kGenerate
  engine::ScoreOptions score;                        // kScore (validated)
  ScoreDone score_done;                              // kScore
  std::optional<KnnLmPlan> knn_lm;                   // kGenerate, kScore (resolved)
  engine::AddToDatastoreOptions add;                 // kAddToDatastore (validated)
  AddToDatastoreDone add_done;                       // kAddToDatastore
  DatastoreDone datastore_done;                      // kGetSessionDatastore
  std::string session_id;                            // kCreate/Get/DeleteSession, kGetSessionDatastore
  int64_t knn_capacity = 0;                          // kCreateSession
  SessionDone session_done;                          // kCreateSession, kGetSession
  ListDone list_done;                                // kListSessions
  StatusDone status_done;                            // kDeleteSession

  // Model work (Generate, Score, AddToDatastore) counts against max_waiting; session
  // operations do not.
  bool is_model_work() const {
    return kind == Kind::kGenerate || kind == Kind::kScore || kind == Kind::kAddToDatastore;
  }
  // Delivers `status` as the result without doing anything.
  void Fail(const absl::Status& status, absl::Time now);
};

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_REQUEST_H_
