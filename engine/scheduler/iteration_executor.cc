#include "engine/scheduler/iteration_executor.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/scheduler/decode_batch.h"
#include "engine/util/omp_threads.h"

namespace mnemo::scheduler {
namespace {

// The plan's prefills, shared by the threads of one step: each thread takes the first one not
// yet taken that it may run, so they run in the plan's order as threads come free.
class PrefillQueue {
 public:
  explicit PrefillQueue(const std::vector<IterationPlan::Prefill>& prefills)
      : prefills_(prefills), taken_(prefills.size(), false) {}

  // The task index of the next prefill for this thread (the loop thread may run any; a worker
  // only those that prefill anywhere), or nullopt when none is left for it.
  std::optional<size_t> Take(bool loop_thread) {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < prefills_.size(); ++i) {
      if (taken_[i] || !(loop_thread || prefills_[i].anywhere)) continue;
      taken_[i] = true;
      return prefills_[i].task;
    }
    return std::nullopt;
  }
  void Finished(size_t task) {
    absl::MutexLock lock(&mu_);
    finished_.push_back(task);
  }
  std::vector<size_t> TakeFinished() {
    absl::MutexLock lock(&mu_);
    return std::move(finished_);
  }

 private:
  const std::vector<IterationPlan::Prefill>& prefills_;
  absl::Mutex mu_;
  std::vector<bool> taken_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> finished_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

IterationExecutor::IterationExecutor(model::Model& model, model::ParallelDecoder& decoder,
                                     const model::MemoryOptions& memory,
                                     const KnnSearchObserver& knn_search_observer,
                                     std::function<absl::Time()> clock, Options options)
    : model_(model),
      decoder_(decoder),
      memory_(memory),
      knn_search_observer_(knn_search_observer),
      clock_(std::move(clock)),
      options_(options) {}

bool IterationExecutor::Step(Task& task, StepContext& ctx) {
  ctx.now = clock_();
  try {
    util::ScopedOmpThreads prefill_threads(task.WantsPrefill() ? options_.prefill_threads : 0);
    return task.Step(ctx);
  } catch (const std::exception& e) {  // a LibTorch error outside the model boundary
    task.Abort(absl::InternalError(absl::StrCat("request failed: ", e.what())), ctx.now);
    return true;
  }
}

IterationOutcome IterationExecutor::Run(const IterationPlan& plan, absl::Span<Task* const> tasks) {
  IterationOutcome outcome;
  DecodeBatch batch;
  StepContext ctx{model_, clock_(), memory_, knn_search_observer_,
                  options_.batch_decode ? &batch : nullptr, options_.memory_pool};
  // 1. Decode tokens into the batch (row r's task is tasks[row_tasks[r]]).
  std::vector<size_t> row_tasks;
  row_tasks.reserve(plan.steps.size());
  for (size_t i : plan.steps) {
    const int rows_before = batch.size();
    if (Step(*tasks[i], ctx)) outcome.finished.push_back(i);
    if (batch.size() > rows_before) row_tasks.push_back(i);
  }

  // 2. The batch decodes on the workers while the threads prefill. A prefill unit adds no
  // decode row (a prompt chunk never decodes), so prefills get no batch.
  PrefillQueue prefills(plan.prefills);
  auto prefill = [&](bool loop_thread) {
    StepContext prefill_ctx{model_, ctx.now, memory_, knn_search_observer_, nullptr,
                            options_.memory_pool};
    while (std::optional<size_t> i = prefills.Take(loop_thread)) {
      if (Step(*tasks[*i], prefill_ctx)) prefills.Finished(*i);
    }
  };
  std::vector<DecodeOutput> decoded =
      plan.prefills.empty()
          ? batch.Run(decoder_)
          : batch.RunAlongside(decoder_, [&] { prefill(/*loop_thread=*/true); },
                               [&] { prefill(/*loop_thread=*/false); });
  for (size_t i : prefills.TakeFinished()) outcome.finished.push_back(i);

  // 3. Each row's result back to its task.
  outcome.decode_rows = static_cast<int>(decoded.size());
  const absl::Time now = clock_();
  for (size_t r = 0; r < decoded.size(); ++r) {
    Task& task = *tasks[row_tasks[r]];
    if (decoded[r].task_id != task.id()) {  // a task broke Step's contract: never expected
      task.Abort(absl::InternalError("a decode row came back to another task"), now);
      outcome.finished.push_back(row_tasks[r]);
    } else if (task.OnDecoded(std::move(decoded[r]), now)) {
      outcome.finished.push_back(row_tasks[r]);
    }
  }
  // Ascending and once each (a task whose Step threw after adding its row is in twice).
  std::sort(outcome.finished.begin(), outcome.finished.end());
  outcome.finished.erase(std::unique(outcome.finished.begin(), outcome.finished.end()),
                         outcome.finished.end());
  return outcome;
}

}  // namespace mnemo::scheduler
