// RequestQueue: the thread-safe inbox of the scheduler's loop thread, with admission control.
//
// Any thread pushes; only the loop thread pops. The bound is on requests waiting for model
// work: those still in the queue plus those the loop admitted but has not started ("parked":
// behind a busy session or a full running set), which the loop reports with SetParked().
// Beyond max_waiting, Push fails with RESOURCE_EXHAUSTED and the caller keeps the request.
#ifndef MNEMO_ENGINE_SCHEDULER_REQUEST_QUEUE_H_
#define MNEMO_ENGINE_SCHEDULER_REQUEST_QUEUE_H_

#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/scheduler/request.h"

namespace mnemo::scheduler {

class RequestQueue {
 public:
  // `max_running` only appears in the RESOURCE_EXHAUSTED message (0 = not mentioned).
  explicit RequestQueue(int max_waiting, int max_running = 0)
      : max_waiting_(max_waiting), max_running_(max_running) {}

  // Takes ownership of `*request` on OK; leaves it with the caller on error (UNAVAILABLE after
  // Close, RESOURCE_EXHAUSTED when full).
  absl::Status Push(std::unique_ptr<Request>& request);
  // Waits up to `timeout` for a request (or Close) and returns everything queued. Popped
  // model-work requests count as parked until the next SetParked().
  std::vector<std::unique_ptr<Request>> PopAll(absl::Duration timeout);
  // Sets how many admitted requests wait for model work outside the queue.
  void SetParked(int parked);
  // Refuses further pushes and wakes the loop. Queued requests stay for PopAll to drain.
  void Close();

  bool closed() const;
  int waiting() const;  // queued model work + parked

 private:
  const int max_waiting_;
  const int max_running_;
  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Request>> queue_ ABSL_GUARDED_BY(mu_);
  int queued_work_ ABSL_GUARDED_BY(mu_) = 0;
  int parked_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_REQUEST_QUEUE_H_
