#include "engine/scheduler/iteration_plan.h"

#include <algorithm>

namespace mnemo::scheduler {

int TasksToStart(int running, int ready, int max_running) {
  return std::clamp(max_running - running, 0, std::max(ready, 0));
}

IterationPlan PlanIteration(absl::Span<const TaskView> running, const IterationBudget& budget) {
  IterationPlan plan;
  plan.steps.reserve(running.size());
  int64_t prefill_left = budget.max_prefill_tokens;
  bool prefilled = false;
  for (size_t i = 0; i < running.size(); ++i) {
    const TaskView& task = running[i];
    // A cancelled task's next step finishes it without model work, whatever its next unit.
    if (!task.wants_prefill || task.cancelled) {
      plan.steps.push_back(i);
      continue;
    }
    // The first prefill always runs, so prefills progress even with a zero budget.
    if (prefilled && prefill_left <= 0) {
      plan.deferred.push_back(i);
      continue;
    }
    prefilled = true;
    prefill_left -= budget.seg_len;  // a unit is charged a whole segment, whatever its length
    plan.prefills.push_back({i, task.prefills_anywhere});
  }
  return plan;
}

}  // namespace mnemo::scheduler
