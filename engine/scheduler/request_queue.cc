#include "engine/scheduler/request_queue.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace mnemo::scheduler {

void Request::Fail(const absl::Status& status, absl::Time now) {
  std::visit(Overloaded{[&](GenerateCall& c) {
                          engine::GenerateFinal final;
                          final.reason = status.code() == absl::StatusCode::kUnavailable
                                             ? engine::FinishReason::kCancelled
                                             : engine::FinishReason::kError;
                          final.status = status;
                          final.queue_time = now - submit_time;
                          c.stream->Close(std::move(final));
                        },
                        [&](auto& c) { c.done(status); }},
             call);
}

absl::Status RequestQueue::Push(std::unique_ptr<Request>& request) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("the engine is shutting down");
    if (request->is_model_work()) {
      if (queued_work_ + parked_ >= max_waiting_) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "too many requests waiting: ", queued_work_ + parked_,
            " already queued (max_waiting ", max_waiting_, ")",
            max_running_ > 0 ? absl::StrCat(" behind the running ones (max_running ",
                                            max_running_, ")")
                             : "",
            "; retry later or raise --max_waiting"));
      }
      ++queued_work_;
    }
    queue_.push_back(std::move(request));
  }
  return absl::OkStatus();
}

std::vector<std::unique_ptr<Request>> RequestQueue::PopAll(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closed_; };
  if (timeout > absl::ZeroDuration()) mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  std::vector<std::unique_ptr<Request>> out;
  out.reserve(queue_.size());
  for (auto& request : queue_) out.push_back(std::move(request));
  queue_.clear();
  parked_ += queued_work_;
  queued_work_ = 0;
  return out;
}

void RequestQueue::SetParked(int parked) {
  absl::MutexLock lock(&mu_);
  parked_ = parked;
}

void RequestQueue::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool RequestQueue::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

int RequestQueue::waiting() const {
  absl::MutexLock lock(&mu_);
  return queued_work_ + parked_;
}

}  // namespace mnemo::scheduler
