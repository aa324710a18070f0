#include "engine/scheduler/request_queue.h"

#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mnemo::scheduler {
namespace {

std::unique_ptr<Request> Work() {
  auto r = std::make_unique<Request>();
  r->call = ScoreCall{};
  return r;
}

std::unique_ptr<Request> SessionOp() {
  auto r = std::make_unique<Request>();
  r->call = ListSessionsCall{};
  return r;
}

TEST(RequestQueueTest, BoundsWaitingModelWork) {
  RequestQueue queue(2);
  std::unique_ptr<Request> a = Work(), b = Work(), c = Work(), op = SessionOp();
  EXPECT_TRUE(queue.Push(a).ok());
  EXPECT_TRUE(queue.Push(b).ok());
  EXPECT_EQ(a, nullptr);
  absl::Status s = queue.Push(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "max_waiting 2")) << s;
  EXPECT_NE(c, nullptr);  // the caller keeps it
  EXPECT_TRUE(queue.Push(op).ok());  // session operations are never refused for load
  EXPECT_EQ(queue.waiting(), 2);
}

TEST(RequestQueueTest, PoppedWorkStaysParkedUntilReported) {
  RequestQueue queue(1);
  std::unique_ptr<Request> a = Work(), b = Work();
  ASSERT_TRUE(queue.Push(a).ok());
  EXPECT_EQ(queue.PopAll(absl::ZeroDuration()).size(), 1u);
  EXPECT_EQ(queue.waiting(), 1);  // admitted but not yet running
  EXPECT_EQ(queue.Push(b).code(), absl::StatusCode::kResourceExhausted);
  queue.SetParked(0);  // the loop started it
  EXPECT_TRUE(queue.Push(b).ok());
}

TEST(RequestQueueTest, PopAllWaitsForAPushOrTimesOut) {
  RequestQueue queue(10);
  EXPECT_TRUE(queue.PopAll(absl::Milliseconds(5)).empty());
  std::thread pusher([&] {
    absl::SleepFor(absl::Milliseconds(20));
    std::unique_ptr<Request> r = Work();
    ASSERT_TRUE(queue.Push(r).ok());
  });
  EXPECT_EQ(queue.PopAll(absl::Seconds(30)).size(), 1u);
  pusher.join();
}

TEST(RequestQueueTest, CloseRefusesAndWakes) {
  RequestQueue queue(10);
  std::unique_ptr<Request> a = Work(), b = Work();
  ASSERT_TRUE(queue.Push(a).ok());
  queue.Close();
  EXPECT_TRUE(queue.closed());
  EXPECT_EQ(queue.Push(b).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(queue.PopAll(absl::Seconds(30)).size(), 1u);  // still drained
  EXPECT_TRUE(queue.PopAll(absl::Seconds(30)).empty());   // returns at once when closed
}

}  // namespace
}  // namespace mnemo::scheduler
