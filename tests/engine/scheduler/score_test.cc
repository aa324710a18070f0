// Score through the scheduler: parity between one call and split calls, scoring without
// updating a session's memory, and stopping when the caller gives up.
#include <atomic>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/scheduler/scheduler_fixture.h"

namespace mnemo::scheduler {
namespace {

TEST_F(SchedulerTest, ScoreInOneCallEqualsSplitCalls) {
  Start();
  const std::string text =
      "Memory must be defined per position, not per segment: a server cannot let results "
      "depend on how a client chunked its input.";
  CreateSession("whole");
  CreateSession("split");
  absl::StatusOr<ScoreResult> whole = Score("whole", text, true, true);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->token_count, static_cast<int64_t>(text.size()));
  EXPECT_EQ(whole->byte_count, static_cast<int64_t>(text.size()));
  EXPECT_NEAR(whole->bits_per_byte, -whole->total_logprob / std::log(2.0) / text.size(), 1e-9);
  double split_total = 0;
  std::vector<float> split_logprobs;
  for (auto [from, to] : {std::pair<size_t, size_t>{0, 7}, {7, 8}, {8, 40}, {40, text.size()}}) {
    absl::StatusOr<ScoreResult> part = Score("split", text.substr(from, to - from), true, true);
    ASSERT_TRUE(part.ok()) << part.status();
    split_total += part->total_logprob;
    split_logprobs.insert(split_logprobs.end(), part->logprobs.begin(), part->logprobs.end());
  }
  EXPECT_NEAR(split_total, whole->total_logprob, 1e-4 * text.size());
  ASSERT_EQ(split_logprobs.size(), whole->logprobs.size());
  for (size_t i = 0; i < split_logprobs.size(); ++i) {
    EXPECT_NEAR(split_logprobs[i], whole->logprobs[i], 1e-4) << i;
  }
  // One-shot scoring equals a fresh session.
  absl::StatusOr<ScoreResult> one_shot = Score("", text, false);
  ASSERT_TRUE(one_shot.ok());
  EXPECT_NEAR(one_shot->total_logprob, whole->total_logprob, 1e-4 * text.size());
  EXPECT_EQ(GetSession("whole")->tokens_seen, static_cast<int64_t>(text.size()));
  EXPECT_EQ(GetSession("split")->tokens_seen, static_cast<int64_t>(text.size()));
}

TEST_F(SchedulerTest, ScoreWithoutUpdateLeavesSessionUnchanged) {
  Start();
  CreateSession("s");
  ASSERT_TRUE(Score("s", "Some history that the session remembers. ", true).ok());
  const SessionInfo before = *GetSession("s");
  absl::StatusOr<ScoreResult> probe1 = Score("s", "a probe", false);
  absl::StatusOr<ScoreResult> probe2 = Score("s", "a probe", false);
  ASSERT_TRUE(probe1.ok() && probe2.ok());
  EXPECT_DOUBLE_EQ(probe1->total_logprob, probe2->total_logprob);
  const SessionInfo after = *GetSession("s");
  EXPECT_EQ(after.tokens_seen, before.tokens_seen);
  EXPECT_EQ(after.memory.xl_tokens, before.memory.xl_tokens);
  EXPECT_EQ(after.memory.compressed_slots, before.memory.compressed_slots);
  // Now append it for real: same log-prob, and the session moves on.
  absl::StatusOr<ScoreResult> real = Score("s", "a probe", true);
  ASSERT_TRUE(real.ok());
  EXPECT_NEAR(real->total_logprob, probe1->total_logprob, 1e-4 * 7);
  EXPECT_EQ(GetSession("s")->tokens_seen, before.tokens_seen + 7);
  // History matters: the probe scores differently in a fresh one-shot context.
  absl::StatusOr<ScoreResult> fresh = Score("", "a probe", false);
  EXPECT_GT(std::abs(fresh->total_logprob - probe1->total_logprob), 1e-4);
}

TEST_F(SchedulerTest, ByteByByteScoreEqualsWhole) {
  Start();
  const std::string text = "Byte by byte, across segment and memory boundaries: 0123456789.";
  CreateSession("bytes");
  double total = 0;
  for (char c : text) {
    absl::StatusOr<ScoreResult> part = Score("bytes", std::string(1, c), true);
    ASSERT_TRUE(part.ok()) << part.status();
    total += part->total_logprob;
  }
  absl::StatusOr<ScoreResult> whole = Score("", text, false);
  ASSERT_TRUE(whole.ok());
  EXPECT_NEAR(total, whole->total_logprob, 1e-4 * text.size());
}


// A check that answers true from its `after`-th call on (0 = at once), counting its calls.
struct GiveUpAfter {
  explicit GiveUpAfter(int after) : after(after) {}
  CancelCheck check() {
    return [this] { return calls.fetch_add(1) >= after; };
  }
  const int after;
  std::atomic<int> calls{0};
};

std::string LongText(int bytes) {
  std::string text;
  while (static_cast<int>(text.size()) < bytes) text += "A long text, read chunk by chunk. ";
  return text.substr(0, static_cast<size_t>(bytes));
}

TEST_F(SchedulerTest, ScoreWhoseCallerGaveUpWhileWaitingNeverRuns) {
  Start();
  CreateSession("s");
  Collector running;
  ASSERT_TRUE(scheduler_->SubmitGenerate(Greedy("go", 4000, "s"), running.stream()).ok());
  ASSERT_TRUE(running.WaitTokens(1));
  std::atomic<bool> gone{false};
  Waiter<absl::StatusOr<ScoreResult>> score;
  ScoreOptions options;
  options.session_id = "s";
  options.text = "queued behind the generation";
  options.update_memory = true;
  scheduler_->SubmitScore(options, score.Callback(), [&gone] { return gone.load(); });
  gone = true;
  // It ends while the generation that holds the session still runs: it never waited its turn.
  EXPECT_EQ(score.Wait().status().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(running.Wait(absl::ZeroDuration()).has_value()) << "the generation still runs";
  running.stream()->Cancel();
  std::optional<GenerateFinal> final = running.Wait();
  ASSERT_TRUE(final.has_value());
  // The session holds the prompt and what was generated, nothing of the cancelled Score.
  EXPECT_EQ(GetSession("s")->tokens_seen, final->usage.session_tokens);
}

TEST_F(SchedulerTest, ScoreStopsBetweenChunksWhenItsCallerGivesUp) {
  Start();
  CreateSession("s");
  const std::string text = LongText(4000);  // many chunks of seg_len tokens
  GiveUpAfter give_up(6);
  Waiter<absl::StatusOr<ScoreResult>> score;
  ScoreOptions options;
  options.session_id = "s";
  options.text = text;
  options.update_memory = true;
  scheduler_->SubmitScore(options, score.Callback(), give_up.check());
  EXPECT_EQ(score.Wait().status().code(), absl::StatusCode::kCancelled);
  // It stopped part way: the session keeps what was read (like a Generate cancelled mid-way)
  // and takes the next call.
  const int64_t seen = GetSession("s")->tokens_seen;
  EXPECT_GT(seen, 0);
  EXPECT_LT(seen, static_cast<int64_t>(text.size()));
  absl::StatusOr<ScoreResult> next = Score("s", "and the session goes on", true);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(GetSession("s")->tokens_seen, seen + 23);
  // A one-shot Score cancelled the same way ends the same way; without a check it runs to the end.
  GiveUpAfter one_shot_give_up(3);
  Waiter<absl::StatusOr<ScoreResult>> one_shot;
  options.session_id = "";
  scheduler_->SubmitScore(options, one_shot.Callback(), one_shot_give_up.check());
  EXPECT_EQ(one_shot.Wait().status().code(), absl::StatusCode::kCancelled);
  absl::StatusOr<ScoreResult> whole = Score("", text, false);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->token_count, static_cast<int64_t>(text.size()));
}

TEST_F(SchedulerTest, DatastoreAdditionWhoseCallerGaveUpAddsNothing) {
  Start();
  CreateSession("s");
  GiveUpAfter give_up(4);
  Waiter<absl::StatusOr<engine::AddToDatastoreResult>> added;
  scheduler_->SubmitAddToDatastore({"s", LongText(4000)}, added.Callback(), give_up.check());
  EXPECT_EQ(added.Wait().status().code(), absl::StatusCode::kCancelled);
  EXPECT_GT(give_up.calls.load(), 0);
  Waiter<absl::StatusOr<engine::DatastoreInfo>> info;
  scheduler_->GetSessionDatastore("s", info.Callback());
  absl::StatusOr<engine::DatastoreInfo> datastore = info.Wait();
  ASSERT_TRUE(datastore.ok()) << datastore.status();
  EXPECT_EQ(datastore->entries, 0);
}

}  // namespace
}  // namespace mnemo::scheduler
