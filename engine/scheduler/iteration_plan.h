// IterationPlan: what one scheduler iteration does, decided before anything runs (the policy
// half of Scheduler::RunIteration; IterationExecutor is the other half).
//
// PlanIteration is a pure function of plain data: a snapshot of the running tasks (TaskView)
// and the budget. It touches no task, model or thread, so the policy is tested by a simulated
// step loop (tests/engine/scheduler/iteration_plan_test.cc). The policy (docs/design.md §5):
//   - every running task gets one unit of work per iteration, in the running set's order
//     (round-robin: the set keeps start order, so concurrent streams interleave);
//   - a task whose next unit is a decode token (or a cancelled task, which finishes without
//     model work) always steps: decoding streams are never stalled behind prompts;
//   - prefill units (prompt / Score / datastore chunks of at most seg_len tokens) are counted
//     in seg_len units against max_prefill_tokens; the first prefill always runs, so prefills
//     progress even with a zero budget; the prefills that do not fit are deferred;
//   - deferred tasks go to the front of the running set, in their order, so next time they are
//     the first prefills considered and none waits forever.
// Admission (TasksToStart) keeps at most max_running tasks in the running set.
//
// Thread-safety: plain values and pure functions; any thread.
#ifndef MNEMO_ENGINE_SCHEDULER_ITERATION_PLAN_H_
#define MNEMO_ENGINE_SCHEDULER_ITERATION_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace mnemo::scheduler {

// What the policy needs to know of one running task (Task's accessors, copied).
struct TaskView {
  uint64_t id = 0;
  bool wants_prefill = false;      // Task::WantsPrefill: the next unit is a prefill chunk
  bool prefills_anywhere = false;  // Task::PrefillsAnywhere: that chunk may run on a worker
  bool cancelled = false;          // Task::cancelled: the next step finishes it, no model work
};

struct IterationBudget {
  int64_t max_prefill_tokens = 512;  // prefill tokens per iteration beyond the first chunk
  int seg_len = 1;                   // tokens a prefill unit may take (counted as a whole unit)
  int max_running = 64;              // tasks in the running set
};

// Indices are into the TaskView span the plan was made for (the running set, in its order).
// Every index appears in exactly one of the three lists.
struct IterationPlan {
  // Stepped first, on the loop thread, in this order: each adds its decode token to the
  // iteration's batch (or feeds it at once without batching), or finishes (a cancelled task).
  std::vector<size_t> steps;
  // Prefill units run while the batch decodes, taken in this order by whichever thread is free
  // (the loop thread takes any; a worker only those with `anywhere`).
  struct Prefill {
    size_t task = 0;
    bool anywhere = false;
  };
  std::vector<Prefill> prefills;
  // Prefills over the budget: not stepped; moved to the front of the running set, in this
  // order, after the iteration.
  std::vector<size_t> deferred;
};

// How many of `ready` waiting tasks join a running set of `running` tasks (front first).
int TasksToStart(int running, int ready, int max_running);

// The plan for one iteration over `running`, in the running set's order.
IterationPlan PlanIteration(absl::Span<const TaskView> running, const IterationBudget& budget);

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_ITERATION_PLAN_H_
