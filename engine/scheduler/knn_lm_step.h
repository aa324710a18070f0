// kNN-LM for one request: which datastore it reads and with what parameters, resolved once at
// admission, and the step that turns the model's log-probs into interpolated ones (docs/design.md
// §4).
//
// Shared datastores are borrowed from the DatastoreCatalog (which outlives every task); a
// session's private datastore is looked up in the session at each step, since text may be
// added between requests.
//
// Thread-safety: ResolveKnnLm runs on the submitting thread (it reads only the immutable
// catalog). CheckKnnLmReady and ApplyKnnLm run on the thread stepping the task: the loop
// thread, or a decode worker for a Generate's first prompt chunk (CheckKnnLmReady); they read
// the session's private datastore, which only requests on the same session write, and those
// run one at a time.
#ifndef MNEMO_ENGINE_SCHEDULER_KNN_LM_STEP_H_
#define MNEMO_ENGINE_SCHEDULER_KNN_LM_STEP_H_

#include <torch/types.h>

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/datastore/datastore_catalog.h"
#include "engine/datastore/knn_lm.h"
#include "engine/session/session.h"
#include "engine/types.h"

namespace mnemo::scheduler {

// Called after every datastore search with its wall time and query count (metrics).
using KnnSearchObserver = std::function<void(absl::Duration latency, int64_t queries)>;

struct KnnLmPlan {
  std::string datastore;  // for error messages
  const datastore::NeighbourIndex* shared = nullptr;  // null = the session's private store
  datastore::SearchOptions search;
  datastore::KnnLmOptions mix;
};

// Checks the request's knn_lm fields against the catalog (caller's thread: the catalog is
// immutable). INVALID_ARGUMENT names the field (knn_lm.lambda...); an unknown datastore is
// NOT_FOUND listing the loaded ones; "session" without a session_id is INVALID_ARGUMENT.
absl::StatusOr<KnnLmPlan> ResolveKnnLm(const engine::KnnLmOptions& options,
                                       const std::string& session_id,
                                       const datastore::DatastoreCatalog& catalog);

// FAILED_PRECONDITION when the plan reads the session's private datastore and the session has
// none. Tasks call it before any model work, so a refused request leaves the session as it was.
absl::Status CheckKnnLmReady(const KnnLmPlan& plan, const session::Session* session);

// lm_logprobs: [n, vocab] float32 CPU; keys: [n, d_model] float32 CPU (row i's key produced
// row i's distribution). Returns [n, vocab] interpolated log-probs. FAILED_PRECONDITION when
// the plan reads the session's private datastore and the session has none.
absl::StatusOr<torch::Tensor> ApplyKnnLm(const KnnLmPlan& plan, const session::Session* session,
                                         const torch::Tensor& keys,
                                         const torch::Tensor& lm_logprobs,
                                         const KnnSearchObserver& observer);

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_KNN_LM_STEP_H_
