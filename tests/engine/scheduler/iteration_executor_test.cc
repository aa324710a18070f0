// IterationExecutor: carries out a plan with fake tasks on a tiny random model. Decode rows
// come back to the task that added them, as data, in the same iteration (a failed batched feed
// finishes every task in it at once); prefills run beside the batch, those that may run
// anywhere on the decode workers too, each exactly once.
#include "engine/scheduler/iteration_executor.h"

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "engine/model/model.h"
#include "engine/model/parallel_decoder.h"
#include "engine/util/worker_pool.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::scheduler {
namespace {

// Decodes `tokens` tokens through the batch (token 100000 is out of the vocabulary: the
// batched step rejects it), or, with `prefills` > 0, first runs that many prefill units.
class FakeTask : public Task {
 public:
  FakeTask(uint64_t id, model::Model& model, int token, int prefills, bool anywhere)
      : Task(id, nullptr), memory_(model.NewMemory()), token_(token), prefills_(prefills),
        anywhere_(anywhere) {}

  bool Step(StepContext& ctx) override {
    ++steps_;
    if (prefills_ > 0) {
      --prefills_;
      std::lock_guard<std::mutex> lock(mu_);
      prefill_threads_.insert(std::this_thread::get_id());
      return prefills_ == 0 && finish_after_prefill_;
    }
    model::DecodeRow row;
    row.token = token_;
    row.memory = &memory_;
    ctx.decode_batch->Add(id(), row);
    return false;
  }
  bool OnDecoded(DecodeOutput out, absl::Time) override {
    decoded_.push_back(std::move(out));
    return !decoded_.back().status.ok() || ++tokens_ == 2;
  }
  void Abort(const absl::Status&, absl::Time) override { ++aborts_; }
  bool WantsPrefill() const override { return prefills_ > 0; }
  bool PrefillsAnywhere() const override { return anywhere_ && prefills_ > 0; }

  TaskView View() const { return {id(), WantsPrefill(), PrefillsAnywhere(), false}; }

  memory::SessionMemory memory_;
  const int token_;
  int prefills_;
  const bool anywhere_;
  bool finish_after_prefill_ = false;
  int steps_ = 0, tokens_ = 0, aborts_ = 0;
  std::vector<DecodeOutput> decoded_;
  static std::mutex mu_;
  std::set<std::thread::id> prefill_threads_;
};
std::mutex FakeTask::mu_;

class IterationExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = model::Model::Random(::mnemo::testing::TinyMemoryModelConfig(), 3);
  }
  void MakeExecutor(int threads) {
    workers_ = std::make_unique<util::WorkerPool>(threads - 1);
    decoder_ = std::make_unique<model::ParallelDecoder>(
        *model_, model::ParallelDecoderOptions{{}, threads, 1}, *workers_);
    executor_ = std::make_unique<IterationExecutor>(*model_, *decoder_, memory_, observer_,
                                                    absl::Now, IterationExecutor::Options{});
  }
  FakeTask* Add(int token, int prefills = 0, bool anywhere = false) {
    tasks_.push_back(std::make_unique<FakeTask>(tasks_.size() + 1, *model_, token, prefills,
                                                anywhere));
    return tasks_.back().get();
  }
  IterationOutcome RunOnce(int64_t max_prefill_tokens = 1 << 20) {
    std::vector<Task*> tasks;
    std::vector<TaskView> views;
    for (auto& task : tasks_) {
      tasks.push_back(task.get());
      views.push_back(task->View());
    }
    const IterationPlan plan =
        PlanIteration(views, {max_prefill_tokens, model_->config().seg_len, 64});
    return executor_->Run(plan, tasks);
  }

  std::unique_ptr<model::Model> model_;
  model::MemoryOptions memory_;
  KnnSearchObserver observer_;
  std::unique_ptr<util::WorkerPool> workers_;
  std::unique_ptr<model::ParallelDecoder> decoder_;
  std::unique_ptr<IterationExecutor> executor_;
  std::vector<std::unique_ptr<FakeTask>> tasks_;
};

TEST_F(IterationExecutorTest, DecodeResultsComeBackToTheTaskThatAddedTheRow) {
  MakeExecutor(2);
  FakeTask* a = Add(65);
  FakeTask* b = Add(66);
  IterationOutcome first = RunOnce();
  EXPECT_EQ(first.decode_rows, 2);
  EXPECT_TRUE(first.finished.empty());
  IterationOutcome second = RunOnce();
  EXPECT_EQ(second.finished, (std::vector<size_t>{0, 1}));  // each finishes on its 2nd token
  for (FakeTask* task : {a, b}) {
    ASSERT_EQ(task->decoded_.size(), 2u);
    for (const DecodeOutput& out : task->decoded_) {
      EXPECT_TRUE(out.status.ok()) << out.status;
      EXPECT_EQ(out.task_id, task->id());
      EXPECT_EQ(out.logprobs.size(0), model_->config().vocab_size);
    }
    EXPECT_EQ(task->memory_.next_position(), 2);
  }
  // Different tokens, different memories: different distributions.
  EXPECT_GT(::mnemo::testing::MaxDiff(a->decoded_[0].logprobs, b->decoded_[0].logprobs), 0.0f);
}

TEST_F(IterationExecutorTest, AFailedBatchedFeedFinishesItsTasksInTheSameIteration) {
  MakeExecutor(1);
  FakeTask* good = Add(65);
  FakeTask* bad = Add(100000);
  IterationOutcome outcome = RunOnce();
  EXPECT_EQ(outcome.decode_rows, 2);
  EXPECT_EQ(outcome.finished, (std::vector<size_t>{0, 1}));
  for (FakeTask* task : {good, bad}) {
    ASSERT_EQ(task->decoded_.size(), 1u);
    EXPECT_EQ(task->decoded_[0].status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(task->steps_, 1);
  }
}

TEST_F(IterationExecutorTest, PrefillsRunBesideTheBatchEachOnce) {
  MakeExecutor(2);
  FakeTask* decoding = Add(65);
  FakeTask* loop_only = Add(0, 1, /*anywhere=*/false);
  loop_only->finish_after_prefill_ = true;
  std::vector<FakeTask*> anywhere;
  for (int i = 0; i < 6; ++i) anywhere.push_back(Add(0, 1, /*anywhere=*/true));
  IterationOutcome outcome = RunOnce();
  EXPECT_EQ(outcome.decode_rows, 1);
  EXPECT_EQ(outcome.finished, (std::vector<size_t>{1}));  // the prefill that finished
  EXPECT_EQ(decoding->decoded_.size(), 1u);
  EXPECT_EQ(loop_only->steps_, 1);
  EXPECT_EQ(loop_only->prefill_threads_, std::set<std::thread::id>{std::this_thread::get_id()});
  for (FakeTask* task : anywhere) EXPECT_EQ(task->steps_, 1);
}

TEST_F(IterationExecutorTest, DeferredPrefillsDoNotRun) {
  MakeExecutor(1);
  FakeTask* first = Add(0, 1);
  FakeTask* second = Add(0, 1);
  IterationOutcome outcome = RunOnce(/*max_prefill_tokens=*/0);
  EXPECT_EQ(outcome.decode_rows, 0);
  EXPECT_EQ(first->steps_, 1);
  EXPECT_EQ(second->steps_, 0);
}

}  // namespace
}  // namespace mnemo::scheduler
