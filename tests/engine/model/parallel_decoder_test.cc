// ParallelDecoder: a step split into shards on several threads must give every row what one
// BatchDecoder step over all the rows gives (log-probs, exit layers, kNN-LM keys, memories),
// and must reject a bad row before any shard changes a memory.
#include "engine/model/parallel_decoder.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/model/batch_decoder.h"
#include "engine/model/model.h"
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
  ParallelDecoder parallel(*model_, options);
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
      EXPECT_LT(MaxDiff(parallel_[r].layer(i).k_raw, reference_[r].layer(i).k_raw), 1e-5);
      EXPECT_LT(MaxDiff(parallel_[r].layer(i).v_cmp, reference_[r].layer(i).v_cmp), 1e-5);
    }
    EXPECT_EQ(parallel_[r].knn_entries(), reference_[r].knn_entries());
  }
}

TEST_F(ParallelDecoderTest, SmallStepsStayInOneShard) {
  ParallelDecoderOptions options;
  options.threads = 2;
  options.min_shard_rows = 4;
  ParallelDecoder parallel(*model_, options);
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
  ParallelDecoder parallel(*model_, options);
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

// StepAlongside: the rows decode on the workers while the caller runs its own work (the
// engine's prefills): the same results as one step, and the work runs exactly once whether the
// step succeeds, is rejected, or there is no worker. Here the work is a prefill of another
// memory, as in the engine, checked against the same prefill done alone.
TEST_F(ParallelDecoderTest, StepAlongsideGivesWhatOneStepGivesAndRunsTheWorkOnce) {
  Prime(9);
  BatchDecoder one(*model_);
  const std::vector<int> prompt = RandomBytes(20, 7);
  memory::SessionMemory alone = model_->NewMemory();
  auto alone_out = model_->Forward(prompt, alone);
  ASSERT_TRUE(alone_out.ok());
  for (int threads : {1, 2, 3}) {
    ParallelDecoderOptions options;
    options.threads = threads;
    options.min_shard_rows = 2;
    ParallelDecoder parallel(*model_, options);
    for (int step = 0; step < 3; ++step) {
      memory::SessionMemory side = model_->NewMemory();
      int calls = 0;
      torch::Tensor side_out;
      auto expected = one.Step(Rows(reference_, step));
      auto got = parallel.StepAlongside(Rows(parallel_, step), [&] {
        ++calls;
        side_out = model_->Forward(prompt, side).value();
      });
      ASSERT_TRUE(expected.ok()) << expected.status();
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(calls, 1) << threads << " threads";
      EXPECT_LT(MaxDiff(got->logprobs, expected->logprobs), 1e-4) << threads << " threads";
      EXPECT_EQ(got->exit_layers, expected->exit_layers);
      EXPECT_LT(MaxDiff(side_out, *alone_out), 1e-5) << threads << " threads";
    }
    // A rejected step still runs the work once and changes no row's memory.
    std::vector<DecodeRow> rows = Rows(parallel_, 0);
    rows[5].token = 100000;
    const int64_t before = parallel_[0].next_position();
    int calls = 0;
    auto out = parallel.StepAlongside(rows, [&] { ++calls; });
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(parallel_[0].next_position(), before);
  }
}

}  // namespace
}  // namespace mnemo::model
