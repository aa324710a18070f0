#include "engine/scheduler/session_queue.h"

#include <utility>

namespace mnemo::scheduler {

std::unique_ptr<Task> SessionQueue::Acquire(std::unique_ptr<Task> task) {
  session::Session* session = task->session();
  if (session == nullptr) return task;
  if (!session->busy) {
    session->busy = true;
    return task;
  }
  waiting_[session].push_back(std::move(task));
  ++size_;
  return nullptr;
}

std::unique_ptr<Task> SessionQueue::Release(session::Session& session) {
  auto it = waiting_.find(&session);
  if (it == waiting_.end()) {
    session.busy = false;
    return nullptr;
  }
  std::unique_ptr<Task> next = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) waiting_.erase(it);
  --size_;
  return next;  // the session stays busy, now held by `next`
}

std::vector<std::unique_ptr<Task>> SessionQueue::ReapCancelled() {
  std::vector<std::unique_ptr<Task>> cancelled;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::deque<std::unique_ptr<Task>>& tasks = it->second;
    for (auto t = tasks.begin(); t != tasks.end();) {
      if ((*t)->cancelled()) {
        cancelled.push_back(std::move(*t));
        t = tasks.erase(t);
        --size_;
      } else {
        ++t;
      }
    }
    if (tasks.empty()) {
      waiting_.erase(it++);
    } else {
      ++it;
    }
  }
  return cancelled;
}

std::vector<std::unique_ptr<Task>> SessionQueue::TakeAll() {
  std::vector<std::unique_ptr<Task>> all;
  for (auto& [unused, tasks] : waiting_) {
    for (auto& task : tasks) all.push_back(std::move(task));
  }
  waiting_.clear();
  size_ = 0;
  return all;
}

}  // namespace mnemo::scheduler
