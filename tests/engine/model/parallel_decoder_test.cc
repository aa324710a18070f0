// ParallelDecoder: a step split into shards on several threads must give every row what one
// BatchDecoder step over all the rows gives (log-probs, exit layers, kNN-LM keys, memories),
// and must reject a bad row before any shard changes a memory.
#include "engine/model/parallel_decoder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/batch_decoder.h"
#include "engine/model/model.h"
#include "engine/util/worker_pool.h"
#include "tests/engine/tiny_model.h"

namespace mnemo::model {
namespace {

using ::mnemo::testing::MaxDiff;
using ::mnemo::testing::RandomBytes;

ModelConfig Config() { return ::mnemo::testing::TinyMemoryModelConfig(Compression::kConv); }

class ParallelDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = Model::Random(Config(), 5); }

  // Two identical memories per session (one per decoder), primed with different histories.
  void Prime(int sessions) {
    for (int i = 0; i < sessions; ++i) {
      reference_.push_back(model_->NewMemory());
      parallel_.push_back(model_->NewMemory());
      const int history = (i * 13) % 70;  // 0 .. 69: some before, some past a compressed group
      if (history > 0) {
        std::vector<int> prefix = RandomBytes(history, 100 + i);
        ASSERT_TRUE(model_->Forward(prefix, reference_.back()).ok());
        ASSERT_TRUE(model_->Forward(prefix, parallel_.back()).ok());
      }
    }
  }

  // Rows of step `step` over every session: threshold per row alternating none / 0.3 / 0.9;
  // rows 2 and 7 want kNN-LM keys (full depth).
  std::vector<DecodeRow> Rows(std::vector<memory::SessionMemory>& memories, int step) {
    std::vector<DecodeRow> rows;
    const float thresholds[] = {2.0f, 0.3f, 0.9f};
    for (size_t r = 0; r < memories.size(); ++r) {
      DecodeRow row;
      row.token = static_cast<int>((r * 31 + step * 7) % 256);
      row.memory = &memories[r];
      row.exit_threshold = thresholds[(r + step) % 3];
      row.knn_lm_key = r == 2 || r == 7;
      rows.push_back(row);
    }
    return rows;
  }

  std::unique_ptr<Model> model_;
  std::vector<memory::SessionMemory> reference_, parallel_;
};

TEST_F(ParallelDecoderTest, ShardsGiveWhatOneStepGives) {
  Prime(11);
  BatchDecoder one(*model_);
  ParallelDecoderOptions options;
  options.threads = 3;
  options.min_shard_rows = 2;
  util::WorkerPool workers(options.threads - 1);
  ParallelDecoder parallel(*model_, options, workers);
  ASSERT_EQ(parallel.ShardsFor(11), 3);
  for (int step = 0; step < 12; ++step) {
    auto expected = one.Step(Rows(reference_, step));
    auto got = parallel.Step(Rows(parallel_, step));
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->logprobs.sizes(), expected->logprobs.sizes());
    EXPECT_LT(MaxDiff(got->logprobs, expected->logprobs), 1e-4) << "step " << step;
    EXPECT_EQ(got->exit_layers, expected->exit_layers) << "step " << step;
    ASSERT_TRUE(got->knn_lm_keys.defined());
    for (int64_t r : {2, 7}) {  // the rows that asked (in the first and the last shard)
      EXPECT_LT(MaxDiff(got->knn_lm_keys[r], expected->knn_lm_keys[r]), 1e-4) << "step " << step;
    }
  }
  for (size_t r = 0; r < reference_.size(); ++r) {
    ASSERT_EQ(parallel_[r].next_position(), reference_[r].next_position());
    for (int i = 0; i < reference_[r].num_layers(); ++i) {
      EXPECT_LT(MaxDiff(parallel_[r].layer(i).k_raw(), reference_[r].layer(i).k_raw()), 1e-5);
      EXPECT_LT(MaxDiff(parallel_[r].layer(i).v_cmp(), reference_[r].layer(i).v_cmp()), 1e-5);
    }
    EXPECT_EQ(parallel_[r].knn_entries(), reference_[r].knn_entries());
  }
}

TEST_F(ParallelDecoderTest, SmallStepsStayInOneShard) {
  ParallelDecoderOptions options;
  options.threads = 2;
  options.min_shard_rows = 4;
  util::WorkerPool workers(options.threads - 1);
  ParallelDecoder parallel(*model_, options, workers);
  EXPECT_EQ(parallel.ShardsFor(1), 1);
  EXPECT_EQ(parallel.ShardsFor(7), 1);
  EXPECT_EQ(parallel.ShardsFor(8), 2);
  EXPECT_EQ(parallel.ShardsFor(100), 2);
  Prime(3);
  auto got = parallel.Step(Rows(parallel_, 0));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->logprobs.size(0), 3);
}

TEST_F(ParallelDecoderTest, BadRowInALaterShardChangesNoMemory) {
  Prime(8);
  ParallelDecoderOptions options;
  options.threads = 2;
  options.min_shard_rows = 2;
  util::WorkerPool workers(options.threads - 1);
  ParallelDecoder parallel(*model_, options, workers);
  std::vector<DecodeRow> rows = Rows(parallel_, 0);
  rows[6].token = 100000;  // outside the vocabulary, in the second shard
  auto out = parallel.Step(rows);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  rows = Rows(parallel_, 0);
  rows[7].memory = rows[1].memory;  // one memory in both shards
  out = parallel.Step(rows);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
  for (size_t r = 0; r < parallel_.size(); ++r) {
    EXPECT_EQ(parallel_[r].next_position(), reference_[r].next_position()) << "row " << r;
  }
}

// StepAlongside: the rows decode on the workers while the caller runs the work (the engine's
// prefills), and each worker runs it too once its rows are done: the same results as one step,
// the work called once on every thread (also when the step is rejected or there is no worker),
// and a queue of jobs the threads share done exactly once each. Here the jobs are prefills of
// other memories, as in the engine, checked against the same prefills done alone.
TEST_F(ParallelDecoderTest, StepAlongsideGivesWhatOneStepGivesAndSharesTheWork) {
  Prime(9);
  BatchDecoder one(*model_);
  constexpr int kJobs = 3;
  std::vector<std::vector<int>> prompts;
  std::vector<torch::Tensor> alone_out;
  for (int j = 0; j < kJobs; ++j) {
    prompts.push_back(RandomBytes(12 + 4 * j, 30 + j));
    memory::SessionMemory alone = model_->NewMemory();
    alone_out.push_back(model_->Forward(prompts[j], alone).value());
  }
  for (int threads : {1, 2, 3}) {
    ParallelDecoderOptions options;
    options.threads = threads;
    options.min_shard_rows = 2;
    util::WorkerPool workers(options.threads - 1);
    ParallelDecoder parallel(*model_, options, workers);
    for (int step = 0; step < 3; ++step) {
      std::vector<memory::SessionMemory> side;
      for (int j = 0; j < kJobs; ++j) side.push_back(model_->NewMemory());
      std::vector<torch::Tensor> side_out(kJobs);
      std::vector<int> runs(kJobs, 0);
      std::mutex mu;
      std::set<std::thread::id> callers;
      int calls = 0, next = 0;
      auto expected = one.Step(Rows(reference_, step));
      auto got = parallel.StepAlongside(Rows(parallel_, step), [&] {
        {
          std::lock_guard<std::mutex> lock(mu);
          ++calls;
          callers.insert(std::this_thread::get_id());
        }
        for (;;) {
          int j;
          {
            std::lock_guard<std::mutex> lock(mu);
            if (next == kJobs) return;
            j = next++;
          }
          ++runs[j];
          side_out[j] = model_->Forward(prompts[j], side[j]).value();
        }
      });
      ASSERT_TRUE(expected.ok()) << expected.status();
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(calls, threads);
      EXPECT_EQ(callers.size(), static_cast<size_t>(threads));
      EXPECT_LT(MaxDiff(got->logprobs, expected->logprobs), 1e-4) << threads << " threads";
      EXPECT_EQ(got->exit_layers, expected->exit_layers);
      for (int j = 0; j < kJobs; ++j) {
        EXPECT_EQ(runs[j], 1) << "job " << j;
        EXPECT_LT(MaxDiff(side_out[j], alone_out[j]), 1e-5) << threads << " threads, job " << j;
      }
    }
    // A rejected step still runs the work on every thread and changes no row's memory.
    std::vector<DecodeRow> rows = Rows(parallel_, 0);
    rows[5].token = 100000;
    const int64_t before = parallel_[0].next_position();
    std::atomic<int> calls{0};
    auto out = parallel.StepAlongside(rows, [&] { ++calls; });
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
    EXPECT_EQ(calls.load(), threads);
    EXPECT_EQ(parallel_[0].next_position(), before);
    // Without rows: every thread runs it, and returns only when all have.
    std::atomic<int> started{0}, finished{0};
    parallel.RunOnAll([&] {
      ++started;
      while (started.load() < threads) std::this_thread::yield();  // all threads at once
      ++finished;
    });
    EXPECT_EQ(finished.load(), threads);
  }
}

// An exception from the work on a worker reaches the caller, after every thread is done.
TEST_F(ParallelDecoderTest, WorkThrowingOnAWorkerIsRethrownToTheCaller) {
  ParallelDecoderOptions options;
  options.threads = 2;
  util::WorkerPool workers(options.threads - 1);
  ParallelDecoder parallel(*model_, options, workers);
  const std::thread::id caller = std::this_thread::get_id();
  EXPECT_THROW(parallel.RunOnAll([&] {
    if (std::this_thread::get_id() != caller) throw std::runtime_error("worker failed");
  }),
               std::runtime_error);
  int calls = 0;
  parallel.RunOnAll([&] { if (std::this_thread::get_id() == caller) ++calls; });  // still usable
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace mnemo::model
