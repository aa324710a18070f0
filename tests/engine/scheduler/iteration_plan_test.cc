// PlanIteration and TasksToStart: the scheduler's policy, driven by a simulated step loop with
// fake tasks (no model, no threads, no sleeps), as the real loop drives it: admit, snapshot,
// plan, "execute" (a prefill unit or a decode token per planned task), move the deferred to
// the front. Hundreds of iterations per configuration check the invariants: every index
// planned once, decode never waits, the prefill budget holds and is used, deferred prefills go
// first next time, max_running holds, every task progresses and finishes (no starvation).
#include "engine/scheduler/iteration_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mnemo::scheduler {
namespace {

TaskView Prefill(uint64_t id, bool anywhere = false) { return {id, true, anywhere, false}; }
TaskView Decode(uint64_t id) { return {id, false, false, false}; }

std::vector<size_t> PrefillTasks(const IterationPlan& plan) {
  std::vector<size_t> tasks;
  for (const IterationPlan::Prefill& p : plan.prefills) tasks.push_back(p.task);
  return tasks;
}

TEST(IterationPlanTest, DecodesAlwaysStepAndPrefillsFitTheBudgetInSegments) {
  // seg_len 64, budget 128: two prefill units; the third and fourth wait.
  const std::vector<TaskView> running = {Prefill(1), Decode(2), Prefill(3, true), Prefill(4),
                                         Decode(5), Prefill(6)};
  const IterationPlan plan = PlanIteration(running, {128, 64, 8});
  EXPECT_EQ(plan.steps, (std::vector<size_t>{1, 4}));
  EXPECT_EQ(PrefillTasks(plan), (std::vector<size_t>{0, 2}));
  EXPECT_FALSE(plan.prefills[0].anywhere);
  EXPECT_TRUE(plan.prefills[1].anywhere);
  EXPECT_EQ(plan.deferred, (std::vector<size_t>{3, 5}));
}

TEST(IterationPlanTest, TheFirstPrefillRunsEvenWithAZeroBudget) {
  const std::vector<TaskView> running = {Decode(1), Prefill(2), Prefill(3)};
  const IterationPlan plan = PlanIteration(running, {0, 64, 8});
  EXPECT_EQ(plan.steps, (std::vector<size_t>{0}));
  EXPECT_EQ(PrefillTasks(plan), (std::vector<size_t>{1}));
  EXPECT_EQ(plan.deferred, (std::vector<size_t>{2}));
}

TEST(IterationPlanTest, AnyBudgetLeftAdmitsAWholeUnit) {
  // 65 - 64 = 1 token left after the first unit: a second unit runs; 64 - 64 = 0: it waits.
  const std::vector<TaskView> running = {Prefill(1), Prefill(2), Prefill(3)};
  EXPECT_EQ(PlanIteration(running, {65, 64, 8}).prefills.size(), 2u);
  EXPECT_EQ(PlanIteration(running, {64, 64, 8}).prefills.size(), 1u);
}

TEST(IterationPlanTest, CancelledTasksStepAtOnceWhateverTheBudget) {
  TaskView cancelled = Prefill(3);
  cancelled.cancelled = true;
  const std::vector<TaskView> running = {Prefill(1), Prefill(2), cancelled};
  const IterationPlan plan = PlanIteration(running, {0, 64, 8});
  EXPECT_EQ(plan.steps, (std::vector<size_t>{2}));
  EXPECT_EQ(PrefillTasks(plan), (std::vector<size_t>{0}));
  EXPECT_EQ(plan.deferred, (std::vector<size_t>{1}));
}

TEST(IterationPlanTest, TasksToStartFillsTheRunningSetUpToMaxRunning) {
  EXPECT_EQ(TasksToStart(0, 5, 3), 3);
  EXPECT_EQ(TasksToStart(2, 5, 3), 1);
  EXPECT_EQ(TasksToStart(3, 5, 3), 0);
  EXPECT_EQ(TasksToStart(1, 0, 3), 0);
  EXPECT_EQ(TasksToStart(4, 2, 3), 0);  // never negative
}

// A fake request: some prefill units, then some decode tokens.
struct FakeTask {
  uint64_t id = 0;
  int prefill_left = 0;
  int decode_left = 0;
  bool anywhere = false;
  bool cancelled = false;
  int64_t arrived = 0;       // iteration it arrived
  int64_t last_work = 0;     // last iteration it got a unit (or started)
  bool finished = false;
};

struct SimConfig {
  IterationBudget budget;
  int iterations = 400;
  double arrival_rate = 0.5;  // mean new tasks per iteration (while arriving)
  double cancel_rate = 0.01;  // per running or waiting task per iteration
  uint32_t seed = 1;
};

std::string Describe(const SimConfig& c) {
  return absl::StrCat("max_prefill_tokens ", c.budget.max_prefill_tokens, " seg_len ",
                      c.budget.seg_len, " max_running ", c.budget.max_running, " seed ", c.seed);
}

// Prefill units the budget admits in one iteration when `wanting` tasks want one.
size_t ExpectedPrefills(const IterationBudget& budget, size_t wanting) {
  if (wanting == 0) return 0;
  const int64_t segments =
      std::max<int64_t>(1, (budget.max_prefill_tokens + budget.seg_len - 1) / budget.seg_len);
  return std::min<size_t>(wanting, static_cast<size_t>(segments));
}

// Runs the simulated loop: arrivals for `iterations`, then until everything has finished.
void Simulate(const SimConfig& config) {
  SCOPED_TRACE(Describe(config));
  std::mt19937 rng(config.seed);
  std::poisson_distribution<int> arrivals(config.arrival_rate);
  std::uniform_int_distribution<int> prompt_units(0, 6), decode_tokens(0, 12);
  std::bernoulli_distribution cancel(config.cancel_rate), anywhere(0.5);
  std::deque<FakeTask> ready;
  std::vector<FakeTask> running;
  std::vector<FakeTask> finished;
  std::vector<uint64_t> last_deferred;  // ids, in order
  uint64_t next_id = 1, started = 0, submitted = 0;
  // A task waits behind at most max_running - 1 deferred prefills, ExpectedPrefills per
  // iteration, so it gets a unit within this many iterations.
  const int64_t max_gap =
      1 + (config.budget.max_running + ExpectedPrefills(config.budget, 1 << 20) - 1) /
              ExpectedPrefills(config.budget, 1 << 20);

  for (int64_t iteration = 0;; ++iteration) {
    const bool arriving = iteration < config.iterations;
    if (!arriving && ready.empty() && running.empty()) break;
    ASSERT_LT(iteration, config.iterations + 100000) << "the loop never drained";
    if (arriving) {
      for (int n = arrivals(rng); n > 0; --n, ++submitted) {
        FakeTask task;
        task.id = next_id++;
        task.prefill_left = prompt_units(rng);
        task.decode_left = decode_tokens(rng);
        task.anywhere = anywhere(rng);
        task.arrived = iteration;
        ready.push_back(task);
      }
    }
    for (FakeTask& task : ready) task.cancelled = task.cancelled || cancel(rng);
    for (FakeTask& task : running) task.cancelled = task.cancelled || cancel(rng);

    // Admission, front first, as Scheduler::StartReady.
    const int start = TasksToStart(static_cast<int>(running.size()),
                                   static_cast<int>(ready.size()), config.budget.max_running);
    for (int i = 0; i < start; ++i) {
      ready.front().last_work = iteration;
      running.push_back(ready.front());
      ready.pop_front();
      ++started;
    }
    ASSERT_LE(static_cast<int>(running.size()), config.budget.max_running);
    if (!ready.empty()) {
      ASSERT_EQ(static_cast<int>(running.size()), config.budget.max_running)
          << "a task waits while the running set has room";
    }

    std::vector<TaskView> views;
    for (const FakeTask& task : running) {
      views.push_back({task.id, task.prefill_left > 0, task.anywhere && task.prefill_left > 0,
                       task.cancelled});
    }
    const IterationPlan plan = PlanIteration(views, config.budget);

    // Every task is planned exactly once.
    std::vector<int> seen(running.size(), 0);
    for (size_t i : plan.steps) ++seen[i];
    for (const IterationPlan::Prefill& p : plan.prefills) ++seen[p.task];
    for (size_t i : plan.deferred) ++seen[i];
    ASSERT_EQ(seen, std::vector<int>(running.size(), 1));
    // Decode tokens (and cancelled tasks) never wait; only prefills are planned as prefills.
    for (size_t i : plan.steps) {
      ASSERT_TRUE(!views[i].wants_prefill || views[i].cancelled);
    }
    size_t wanting = 0;
    for (const TaskView& view : views) wanting += view.wants_prefill && !view.cancelled;
    for (const IterationPlan::Prefill& p : plan.prefills) {
      ASSERT_TRUE(views[p.task].wants_prefill && !views[p.task].cancelled);
      ASSERT_EQ(p.anywhere, views[p.task].prefills_anywhere);
    }
    // The budget holds, and is used: exactly as many prefills as it admits.
    ASSERT_EQ(plan.prefills.size(), ExpectedPrefills(config.budget, wanting));
    // Last time's deferred prefills (still wanting one) come first, in their order.
    std::vector<uint64_t> still_deferred;
    for (uint64_t id : last_deferred) {
      for (const TaskView& view : views) {
        if (view.id == id && view.wants_prefill && !view.cancelled) still_deferred.push_back(id);
      }
    }
    for (size_t k = 0; k < still_deferred.size() && k < plan.prefills.size(); ++k) {
      ASSERT_EQ(views[plan.prefills[k].task].id, still_deferred[k]) << "iteration " << iteration;
    }
    // Steps and prefills keep the running set's order (round-robin).
    ASSERT_TRUE(std::is_sorted(plan.steps.begin(), plan.steps.end()));
    ASSERT_TRUE(std::is_sorted(plan.deferred.begin(), plan.deferred.end()));
    const std::vector<size_t> prefill_tasks = PrefillTasks(plan);
    ASSERT_TRUE(std::is_sorted(prefill_tasks.begin(), prefill_tasks.end()));

    // "Execute": one unit per planned task.
    auto work = [&](FakeTask& task) {
      task.last_work = iteration;
      if (task.cancelled) {
        task.finished = true;
      } else if (task.prefill_left > 0) {
        --task.prefill_left;
      } else if (--task.decode_left <= 0) {
        task.finished = true;
      }
    };
    for (size_t i : plan.steps) work(running[i]);
    for (const IterationPlan::Prefill& p : plan.prefills) work(running[p.task]);
    // No running task goes long without a unit.
    for (const FakeTask& task : running) {
      ASSERT_LE(iteration - task.last_work, max_gap) << "task " << task.id << " starves";
    }

    // Deferred to the front in their order, finished ones out (Scheduler::RunIteration).
    last_deferred.clear();
    std::vector<FakeTask> next;
    for (size_t i : plan.deferred) {
      last_deferred.push_back(running[i].id);
      next.push_back(running[i]);
    }
    for (size_t i = 0; i < running.size(); ++i) {
      if (std::find(plan.deferred.begin(), plan.deferred.end(), i) != plan.deferred.end()) {
        continue;
      }
      if (running[i].finished) {
        finished.push_back(running[i]);
      } else {
        next.push_back(running[i]);
      }
    }
    running = std::move(next);
  }
  EXPECT_EQ(started, submitted);
  EXPECT_EQ(finished.size(), submitted);  // every task finished
}

TEST(IterationPlanTest, SimulatedLoopKeepsEveryInvariant) {
  uint32_t seed = 1;
  for (int64_t max_prefill_tokens : {0, 1, 64, 100, 512}) {
    for (int max_running : {1, 3, 8, 64}) {
      SimConfig config;
      config.budget = {max_prefill_tokens, 64, max_running};
      config.seed = seed++;
      Simulate(config);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(IterationPlanTest, SimulatedLoopUnderHeavyLoadWithoutCancellations) {
  // More arrivals than the running set drains: the ready queue grows, then drains after.
  SimConfig config;
  config.budget = {128, 64, 8};
  config.arrival_rate = 2.0;
  config.cancel_rate = 0.0;
  config.iterations = 300;
  config.seed = 99;
  Simulate(config);
}

}  // namespace
}  // namespace mnemo::scheduler
