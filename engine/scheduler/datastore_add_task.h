// DatastoreAddTask: one Datastores.AddToSessionDatastore request. Reads the text with a fresh
// memory (the text is one document, as mnemo-index reads each corpus file), one segment per
// step, and collects a kNN-LM entry per token: key = the model's last-layer post-LN FFN input
// for the context before the token, value = the token. The entries reach the session's
// private datastore only when the whole text has been read, so a failed or aborted request
// adds nothing; so does one whose caller gave up (`cancelled`: CANCELLED at the next step).
//
// Borrows its Session (like every request on a session, it runs alone on it); owns its
// completion callback and scratch memory. Loop thread only.
#ifndef MNEMO_ENGINE_SCHEDULER_DATASTORE_ADD_TASK_H_
#define MNEMO_ENGINE_SCHEDULER_DATASTORE_ADD_TASK_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/scheduler/task.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/types.h"

namespace mnemo::scheduler {

class DatastoreAddTask : public Task {
 public:
  using Done = std::function<void(absl::StatusOr<engine::AddToDatastoreResult>)>;

  // `options` are validated; `session` must not be null. `max_entries` bounds the session's
  // datastore (0 = unbounded); `model_id` ("name@fingerprint") is reported with it.
  // `tokenizer` (the model's) encodes the text here; it is not kept.
  DatastoreAddTask(uint64_t id, engine::AddToDatastoreOptions options, int64_t max_entries,
                   std::string model_id, Done done, session::Session* session,
                   const tokenizer::Tokenizer& tokenizer, std::function<bool()> cancelled = {});

  bool Step(StepContext& ctx) override;
  void Abort(const absl::Status& status, absl::Time now) override;

 private:
  void Fail(absl::Status status);

  const engine::AddToDatastoreOptions options_;
  const int64_t max_entries_;
  const std::string model_id_;
  Done done_;
  bool started_ = false;
  session::SequenceState scratch_;  // the text's own fresh memory
  std::vector<int> tokens_;
  size_t fed_ = 0;
  std::vector<torch::Tensor> keys_;  // [rows, d_model] chunks; row j is the key of tokens_[j]
};

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_DATASTORE_ADD_TASK_H_
