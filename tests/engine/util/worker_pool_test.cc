// WorkerPool: a round runs each job on its own worker while the caller does its part, returns
// only when all are done, rethrows a job's exception after the round, and stays usable.
#include "engine/util/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace mnemo::util {
namespace {

TEST(WorkerPoolTest, EachJobRunsOnceOnItsOwnWorkerBesideTheCaller) {
  WorkerPool pool(3);
  ASSERT_EQ(pool.size(), 3);
  for (int round = 0; round < 50; ++round) {
    for (int count = 0; count <= 3; ++count) {
      std::vector<std::thread::id> ran_on(count);
      std::vector<int> runs(count, 0);
      std::atomic<int> started{0};
      std::thread::id caller_ran_on;
      pool.Run(
          count,
          [&](int worker) {
            ++runs[worker];
            ran_on[worker] = std::this_thread::get_id();
            ++started;
          },
          [&] {
            caller_ran_on = std::this_thread::get_id();
            while (started.load() < count) std::this_thread::yield();  // all at once
          });
      EXPECT_EQ(caller_ran_on, std::this_thread::get_id());
      std::set<std::thread::id> threads(ran_on.begin(), ran_on.end());
      EXPECT_EQ(threads.size(), static_cast<size_t>(count));
      EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
      EXPECT_EQ(runs, std::vector<int>(count, 1));
    }
  }
}

TEST(WorkerPoolTest, RunReturnsOnlyWhenEveryJobHasReturned) {
  WorkerPool pool(2);
  std::atomic<int> finished{0};
  pool.Run(
      2,
      [&](int) {
        for (int i = 0; i < 1000; ++i) std::this_thread::yield();
        ++finished;
      },
      [] {});
  EXPECT_EQ(finished.load(), 2);
}

TEST(WorkerPoolTest, ExceptionsAreRethrownAfterTheRoundAndThePoolStaysUsable) {
  WorkerPool pool(2);
  std::atomic<int> finished{0};
  EXPECT_THROW(pool.Run(
                   2,
                   [&](int worker) {
                     if (worker == 1) throw std::runtime_error("worker failed");
                     ++finished;
                   },
                   [] {}),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 1);
  EXPECT_THROW(pool.Run(
                   2, [&](int) { ++finished; }, [] { throw std::logic_error("caller failed"); }),
               std::logic_error);
  EXPECT_EQ(finished.load(), 3);  // the workers still ran, and were waited for
  int calls = 0;
  pool.Run(0, [&](int) { ++calls; }, [&] { ++calls; });
  EXPECT_EQ(calls, 1);
}

TEST(WorkerPoolTest, WithoutWorkersOnlyTheCallerRuns) {
  WorkerPool pool(0);
  int caller = 0, jobs = 0;
  pool.Run(3, [&](int) { ++jobs; }, [&] { ++caller; });
  EXPECT_EQ(caller, 1);
  EXPECT_EQ(jobs, 0);
}

}  // namespace
}  // namespace mnemo::util
