// SessionQueue: the one owner of who runs on a session. Requests on one session run one at a
// time, in arrival order: the task that holds the session runs (Session::busy, which the
// SessionStore reads so that busy sessions are never evicted or deleted), the others wait here,
// first in, first out.
//
// Acquire gives a task its session at once when the session is idle (or the task has none),
// else keeps the task behind the session's queue; Release hands the session to the next task
// waiting for it, or marks it idle; ReapCancelled takes out the waiting tasks whose client gave
// up, so they finish without waiting for their turn.
//
// Ownership: owns the waiting tasks; borrows their sessions (a session with waiting tasks is
// busy, and the SessionStore keeps busy sessions alive). Thread-safety: the loop thread only.
#ifndef MNEMO_ENGINE_SCHEDULER_SESSION_QUEUE_H_
#define MNEMO_ENGINE_SCHEDULER_SESSION_QUEUE_H_

#include <deque>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/scheduler/task.h"
#include "engine/session/session.h"

namespace mnemo::scheduler {

class SessionQueue {
 public:
  // Returns `task` when it may run now: it has no session, or its session was idle (and is now
  // busy, held by it). Otherwise keeps it behind the session's waiting tasks and returns null.
  std::unique_ptr<Task> Acquire(std::unique_ptr<Task> task);
  // The task holding `session` is done with it: returns the next task waiting for it, which
  // now holds it (the session stays busy), or null when none waits (the session is now idle).
  std::unique_ptr<Task> Release(session::Session& session);
  // Removes the waiting tasks whose client cancelled and returns them; they hold no session.
  std::vector<std::unique_ptr<Task>> ReapCancelled();
  // Removes every waiting task and returns them (shutdown); their sessions stay busy.
  std::vector<std::unique_ptr<Task>> TakeAll();

  int size() const { return size_; }  // waiting tasks, all sessions

 private:
  // Per busy session with waiting tasks, in arrival order (never an empty deque).
  absl::flat_hash_map<session::Session*, std::deque<std::unique_ptr<Task>>> waiting_;
  int size_ = 0;
};

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_SESSION_QUEUE_H_
