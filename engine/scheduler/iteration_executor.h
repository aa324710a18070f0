// IterationExecutor: runs one IterationPlan over the running tasks (the mechanism half of
// Scheduler::RunIteration; PlanIteration decides, this only carries the plan out).
//
// In order:
//   1. the plan's steps, on the loop thread: each decoding task adds its token's row to one
//      DecodeBatch (or feeds it at once when batching is off); cancelled tasks finish;
//   2. the batch's rows decode on the decoder's workers while the loop thread runs the plan's
//      prefills; a worker done with its rows takes the next prefill that may run off the loop
//      thread (Task::PrefillsAnywhere), so the cores stay busy while prompts wait
//      (model::ParallelDecoder::StepAlongside; docs/results/batching.md);
//   3. each row's DecodeOutput goes back to the task that added it (Task::OnDecoded), so a
//      failed feed finishes its task in this same iteration.
// It reports which tasks finished; the scheduler releases their sessions and removes them.
//
// Ownership: borrows the model, the decoder and the options (all must outlive it; the
// Scheduler owns them). Thread-safety: Run is called by the loop thread; within it, prefill
// units run on the decoder's workers too, one thread per task (Task's rule).
#ifndef MNEMO_ENGINE_SCHEDULER_ITERATION_EXECUTOR_H_
#define MNEMO_ENGINE_SCHEDULER_ITERATION_EXECUTOR_H_

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/model/model.h"
#include "engine/model/parallel_decoder.h"
#include "engine/scheduler/iteration_plan.h"
#include "engine/scheduler/knn_lm_step.h"
#include "engine/scheduler/task.h"

namespace mnemo::scheduler {

struct IterationOutcome {
  std::vector<size_t> finished;  // indices of the tasks that finished, ascending
  int decode_rows = 0;           // rows of the batched decode step (0: none ran)
};

class IterationExecutor {
 public:
  struct Options {
    // Decode tokens go through one batched step (false: each task feeds its own at once).
    bool batch_decode = true;
    // OpenMP threads while a task prefills (0 = LibTorch's setting); see SchedulerConfig.
    int prefill_threads = 0;
    // Where one-shot tasks draw their memories from (StepContext::memory_pool; thread-safe);
    // borrowed, may be null (a new memory each).
    memory::MemoryPool* memory_pool = nullptr;
  };

  IterationExecutor(model::Model& model, model::ParallelDecoder& decoder,
                    const model::MemoryOptions& memory,
                    const KnnSearchObserver& knn_search_observer,
                    std::function<absl::Time()> clock, Options options);

  // Carries out `plan`, made for `tasks` (the running set, in its order).
  IterationOutcome Run(const IterationPlan& plan, absl::Span<Task* const> tasks);

 private:
  // Steps `task` once at the clock's time; an exception escaping it aborts the task. Returns
  // true when the task finished.
  bool Step(Task& task, StepContext& ctx);

  model::Model& model_;
  model::ParallelDecoder& decoder_;
  const model::MemoryOptions& memory_;
  const KnnSearchObserver& knn_search_observer_;
  const std::function<absl::Time()> clock_;
  const Options options_;
};

}  // namespace mnemo::scheduler

#endif  // MNEMO_ENGINE_SCHEDULER_ITERATION_EXECUTOR_H_
