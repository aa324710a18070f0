#include "engine/scheduler/datastore_add_task.h"

#include <utility>

#include "engine/scheduler/datastore_info.h"

namespace mnemo::scheduler {

DatastoreAddTask::DatastoreAddTask(uint64_t id, engine::AddToDatastoreOptions options,
                                   int64_t max_entries, std::string model_id, Done done,
                                   session::Session* session,
                                   const tokenizer::Tokenizer& tokenizer,
                                   std::function<bool()> cancelled)
    : Task(id, session, std::move(cancelled)),
      options_(std::move(options)),
      max_entries_(max_entries),
      model_id_(std::move(model_id)),
      done_(std::move(done)) {
  tokens_ = tokenizer.Encode(options_.text);
}

bool DatastoreAddTask::Step(StepContext& ctx) {
  if (cancelled()) {
    Fail(absl::CancelledError("the client cancelled the call"));
    return true;
  }
  if (!started_) {
    started_ = true;
    // The session's memory stays out of it: the entries describe the text alone, read the
    // way mnemo-index reads a corpus file.
    scratch_.memory = ctx.model.NewMemory(ctx.memory);
    if (absl::Status s = PrimeIfNeeded(ctx.model, scratch_); !s.ok()) {
      Fail(s);
      return true;
    }
    keys_.push_back(scratch_.last_knn_lm_key.unsqueeze(0));  // predicts tokens_[0]
  }
  const int64_t n = NextChunkSize(scratch_, ctx.model.config().seg_len,
                                  static_cast<int64_t>(tokens_.size() - fed_));
  absl::Span<const int> chunk(tokens_.data() + fed_, n);
  torch::Tensor keys;  // [n, d_model]; row i predicts chunk[i + 1]
  if (absl::StatusOr<torch::Tensor> out =
          FeedText(ctx.model, scratch_, chunk, model::Outputs::kAll, &keys);
      !out.ok()) {
    Fail(out.status());
    return true;
  }
  fed_ += n;
  // The last token's key predicts what follows the text, which has no value: dropped.
  keys_.push_back(fed_ < tokens_.size() ? keys : keys.narrow(0, 0, n - 1));
  if (fed_ < tokens_.size()) return false;

  session::Session& s = *session();
  // A first addition that fails leaves no (empty) datastore behind.
  std::unique_ptr<datastore::SessionDatastore> created;
  datastore::SessionDatastore* store = s.datastore.get();
  if (store == nullptr) {
    created = std::make_unique<datastore::SessionDatastore>(
        static_cast<int>(keys_.front().size(1)), max_entries_);
    store = created.get();
  }
  const std::vector<int32_t> values(tokens_.begin(), tokens_.end());
  if (absl::Status added = store->Append(torch::cat(keys_, 0), values); !added.ok()) {
    Fail(added);
    return true;
  }
  if (created != nullptr) s.datastore = std::move(created);
  engine::AddToDatastoreResult result;
  result.entries_added = static_cast<int64_t>(values.size());
  result.datastore = SessionDatastoreInfo(s, model_id_);
  CommitSession(session::CallKind::kDatastore, static_cast<int64_t>(values.size()),
                ResultOnceCommitted(std::move(done_), std::move(result)));
  return true;
}

void DatastoreAddTask::Abort(const absl::Status& status, absl::Time) { Fail(status); }

void DatastoreAddTask::Fail(absl::Status status) {
  Done done = std::move(done_);
  if (done) done(std::move(status));
}

}  // namespace mnemo::scheduler
