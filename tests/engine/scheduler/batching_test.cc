// Continuous batching through the scheduler: streams decoded together give exactly what each
// gives alone, rows join and leave between steps, and new prompts cannot stall decoding.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/engine/scheduler/scheduler_fixture.h"

namespace mnemo::scheduler {
namespace {

struct StreamOutput {
  std::vector<int> ids;
  std::vector<float> logprobs;
};

// Runs `prompts` as concurrent greedy streams (different lengths, so rows join and leave the
// batch at different steps) and returns what each produced.
std::vector<StreamOutput> RunConcurrently(Scheduler& scheduler,
                                          const std::vector<std::string>& prompts) {
  std::vector<std::unique_ptr<testing::Collector>> collectors;
  for (size_t i = 0; i < prompts.size(); ++i) {
    collectors.push_back(std::make_unique<testing::Collector>());
    GenerateOptions options = Greedy(prompts[i], 8 + 5 * static_cast<int>(i));
    options.stop_at_eos = false;
    options.top_logprobs = 0;
    EXPECT_TRUE(scheduler.SubmitGenerate(options, collectors.back()->stream()).ok());
  }
  std::vector<StreamOutput> out;
  for (auto& c : collectors) {
    std::optional<GenerateFinal> final = c->Wait();
    EXPECT_TRUE(final.has_value() && final->status.ok());
    StreamOutput o;
    for (const engine::TokenOutput& t : c->tokens()) {
      o.ids.push_back(t.id);
      o.logprobs.push_back(t.logprob);
    }
    out.push_back(std::move(o));
  }
  return out;
}

// decode_threads 1: one BatchDecoder step; 2 with one-row shards: ParallelDecoder's threads.
class BatchingTest : public SchedulerTest, public ::testing::WithParamInterface<int> {};

TEST_P(BatchingTest, BatchedDecodingEqualsOneStreamAtATime) {
  std::vector<std::string> prompts;
  for (int i = 0; i < 6; ++i) {
    // Histories from a few tokens to several segments (seg_len 16), so rows differ in memory.
    prompts.push_back(std::string(1 + 9 * i * i % 70, static_cast<char>('a' + i)) +
                      absl::StrCat(" prompt ", i));
  }
  SchedulerConfig solo = TestConfig();
  solo.batch_decode = false;
  Start(solo);
  const std::vector<StreamOutput> alone = RunConcurrently(*scheduler_, prompts);
  int batches = 0, rows = 0;
  SchedulerConfig batched = TestConfig();
  batched.decode_threads = GetParam();
  batched.decode_min_shard_rows = 1;
  batched.decode_batch_observer = [&](int n) {
    ++batches;
    rows += n;
  };
  Start(batched);
  const std::vector<StreamOutput> together = RunConcurrently(*scheduler_, prompts);
  scheduler_.reset();  // no more observer calls
  ASSERT_EQ(alone.size(), together.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_EQ(together[i].ids, alone[i].ids) << "stream " << i;
    ASSERT_EQ(together[i].logprobs.size(), alone[i].logprobs.size());
    for (size_t t = 0; t < alone[i].logprobs.size(); ++t) {
      EXPECT_NEAR(together[i].logprobs[t], alone[i].logprobs[t], 1e-4) << i << ":" << t;
    }
  }
  // Streams really were decoded together (more rows than steps).
  EXPECT_GT(batches, 0);
  EXPECT_GT(rows, batches);
}

INSTANTIATE_TEST_SUITE_P(DecodeThreads, BatchingTest, ::testing::Values(1, 2));

TEST_F(SchedulerTest, NewPromptsDoNotStallADecodingStream) {
  SchedulerConfig config = TestConfig();
  config.max_prefill_tokens = 0;  // one prefill segment per iteration
  testing::EventLog log;
  Start(config);
  testing::Collector decoding(&log, 0);
  GenerateOptions options = Greedy("go", 400);
  options.stop_at_eos = false;
  ASSERT_TRUE(scheduler_->SubmitGenerate(options, decoding.stream()).ok());
  ASSERT_TRUE(decoding.WaitTokens(1));
  // Three prompts of 10 segments each: 30 prefill units in all.
  std::vector<std::unique_ptr<testing::Collector>> late;
  for (int i = 1; i <= 3; ++i) {
    late.push_back(std::make_unique<testing::Collector>(&log, i));
    GenerateOptions o = Greedy(std::string(160, static_cast<char>('k' + i)), 2);
    o.stop_at_eos = false;
    ASSERT_TRUE(scheduler_->SubmitGenerate(o, late.back()->stream()).ok());
  }
  for (auto& c : late) ASSERT_TRUE(c->Wait().has_value());
  // While the 30 segments were read one per iteration, the decoding stream got a token in
  // (nearly) every iteration: many more than the ~10 it would get if each iteration read all
  // three prompts' next segments first.
  int decoded_before_late = 0;
  for (const testing::EventLog::Event& e : log.Snapshot()) {
    if (e.stream != 0) break;
    ++decoded_before_late;
  }
  EXPECT_GE(decoded_before_late, 20);
  decoding.stream()->Cancel();
  decoding.Wait();
}

}  // namespace
}  // namespace mnemo::scheduler
