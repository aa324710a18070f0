// SessionQueue: requests on one session run one at a time, in arrival order; cancelled waiting
// requests leave early; the busy flag follows the session's holder. No threads, no model.
#include "engine/scheduler/session_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

namespace mnemo::scheduler {
namespace {

class FakeTask : public Task {
 public:
  FakeTask(uint64_t id, session::Session* session) : Task(id, session) {}
  bool Step(StepContext&) override { return true; }
  void Abort(const absl::Status&, absl::Time) override {}
  bool cancelled() const override { return cancelled_; }
  bool cancelled_ = false;
};

std::unique_ptr<Task> Make(uint64_t id, session::Session* session) {
  return std::make_unique<FakeTask>(id, session);
}

void Cancel(Task& task) { static_cast<FakeTask&>(task).cancelled_ = true; }

TEST(SessionQueueTest, OneShotTasksRunAtOnce) {
  SessionQueue queue;
  std::unique_ptr<Task> task = queue.Acquire(Make(1, nullptr));
  ASSERT_NE(task, nullptr);
  EXPECT_EQ(task->id(), 1u);
  EXPECT_EQ(queue.size(), 0);
}

TEST(SessionQueueTest, TasksOnOneSessionRunOneAtATimeInArrivalOrder) {
  SessionQueue queue;
  session::Session a, b;
  std::unique_ptr<Task> first = queue.Acquire(Make(1, &a));
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(a.busy);
  EXPECT_EQ(queue.Acquire(Make(2, &a)), nullptr);  // behind 1
  EXPECT_EQ(queue.Acquire(Make(3, &a)), nullptr);  // behind 2
  ASSERT_NE(queue.Acquire(Make(4, &b)), nullptr);  // another session is not held up
  EXPECT_EQ(queue.size(), 2);

  std::unique_ptr<Task> next = queue.Release(a);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->id(), 2u);
  EXPECT_TRUE(a.busy);  // now held by 2
  next = queue.Release(a);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->id(), 3u);
  EXPECT_EQ(queue.Release(a), nullptr);
  EXPECT_FALSE(a.busy);
  EXPECT_EQ(queue.size(), 0);
  EXPECT_TRUE(b.busy);
  EXPECT_EQ(queue.Release(b), nullptr);
  EXPECT_FALSE(b.busy);
  // Idle again: the next task takes it at once.
  EXPECT_NE(queue.Acquire(Make(5, &a)), nullptr);
  EXPECT_TRUE(a.busy);
}

TEST(SessionQueueTest, CancelledWaitingTasksLeaveWithoutTheirTurn) {
  SessionQueue queue;
  session::Session a, b;
  ASSERT_NE(queue.Acquire(Make(1, &a)), nullptr);
  ASSERT_NE(queue.Acquire(Make(2, &b)), nullptr);
  std::vector<Task*> waiting;
  for (uint64_t id : {3, 4, 5}) {
    std::unique_ptr<Task> task = Make(id, &a);
    waiting.push_back(task.get());
    ASSERT_EQ(queue.Acquire(std::move(task)), nullptr);
  }
  std::unique_ptr<Task> on_b = Make(6, &b);
  Task* six = on_b.get();
  ASSERT_EQ(queue.Acquire(std::move(on_b)), nullptr);
  EXPECT_TRUE(queue.ReapCancelled().empty());

  Cancel(*waiting[1]);  // 4
  Cancel(*six);
  std::vector<std::unique_ptr<Task>> reaped = queue.ReapCancelled();
  ASSERT_EQ(reaped.size(), 2u);
  EXPECT_EQ(reaped[0]->id() + reaped[1]->id(), 4u + 6u);
  EXPECT_EQ(queue.size(), 2);
  EXPECT_TRUE(a.busy);  // still held by 1
  EXPECT_TRUE(b.busy);  // still held by 2

  EXPECT_EQ(queue.Release(a)->id(), 3u);
  EXPECT_EQ(queue.Release(a)->id(), 5u);  // 4 is gone
  EXPECT_EQ(queue.Release(a), nullptr);
  EXPECT_EQ(queue.Release(b), nullptr);  // 6 is gone
  EXPECT_FALSE(b.busy);
}

TEST(SessionQueueTest, TakeAllEmptiesTheQueue) {
  SessionQueue queue;
  session::Session a;
  ASSERT_NE(queue.Acquire(Make(1, &a)), nullptr);
  ASSERT_EQ(queue.Acquire(Make(2, &a)), nullptr);
  ASSERT_EQ(queue.Acquire(Make(3, &a)), nullptr);
  EXPECT_EQ(queue.TakeAll().size(), 2u);
  EXPECT_EQ(queue.size(), 0);
  EXPECT_EQ(queue.Release(a), nullptr);
  EXPECT_FALSE(a.busy);
}

}  // namespace
}  // namespace mnemo::scheduler
