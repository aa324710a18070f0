// Recall through the scheduler (docs/recall.md): a remembering session (and a one-shot request
// that asks) gives back what it read long ago, one call == many calls under recall, and the
// errors for recall on a session that does not remember.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/scheduler/scheduler_fixture.h"

namespace mnemo::scheduler {
namespace {

// A code stated once, ~3 KB of unrelated bytes, then the statement's prefix again.
std::string PasskeyPrompt(const std::string& code) {
  std::string filler;
  uint64_t x = 12345;
  while (filler.size() < 3000) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    filler.push_back(static_cast<char>('a' + (x >> 33) % 26));
    if (filler.size() % 61 == 0) filler.push_back('\n');
  }
  return "The vault code is " + code + ". Remember it.\n" + filler +
         "\nWhat is the vault code? The vault code is ";
}

class RecallTest : public SchedulerTest {
 protected:
  SessionInfo CreateRemembering(const std::string& id) {
    Waiter<absl::StatusOr<SessionInfo>> w;
    engine::CreateSessionOptions options;
    options.session_id = id;
    options.remember = true;
    scheduler_->CreateSession(options, w.Callback());
    absl::StatusOr<SessionInfo> info = w.Wait();
    EXPECT_TRUE(info.ok()) << info.status();
    return info.value_or(SessionInfo());
  }
  std::string Text(GenerateOptions options) {
    Collector collector;
    GenerateFinal final = Run(std::move(options), collector);
    EXPECT_TRUE(final.status.ok()) << final.status;
    std::string text;
    for (const engine::TokenOutput& t : collector.tokens()) text += t.bytes;
    return text;
  }
  absl::StatusOr<ScoreResult> ScoreRecall(const std::string& session, const std::string& text,
                                          bool update_memory, std::optional<bool> recall) {
    engine::RecallRequest request;
    request.enabled = recall;
    return Score(session, text, update_memory, /*token_logprobs=*/true, request);
  }
};

TEST_F(RecallTest, ARememberingSessionGivesBackWhatItReadLongAgo) {
  Start();
  const std::string code = "83Q1Z7";
  CreateRemembering("remembers");
  CreateSession("forgets");
  // The tiny random model cannot copy from 3 KB back on its own; recall can.
  EXPECT_EQ(Text(Greedy(PasskeyPrompt(code), 6, "remembers")), code);
  EXPECT_NE(Text(Greedy(PasskeyPrompt(code), 6, "forgets")), code);
  const SessionInfo info = *GetSession("remembers");
  // BOS, the prompt and the generated tokens (the last one too: a session feeds it).
  EXPECT_EQ(info.memory.remembered_tokens, info.tokens_seen + 1);
  EXPECT_EQ(GetSession("forgets")->memory.remembered_tokens, 0);
  // The session default can be turned off per request.
  GenerateOptions off = Greedy("\nWhat is the vault code? The vault code is ", 6, "remembers");
  off.recall.enabled = false;
  EXPECT_NE(Text(off), code);
}

TEST_F(RecallTest, AOneShotRequestRemembersItsOwnPromptWhenAsked) {
  Start();
  GenerateOptions options = Greedy(PasskeyPrompt("40917"), 5);
  EXPECT_NE(Text(options), "40917");
  options.recall.enabled = true;
  EXPECT_EQ(Text(options), "40917");
}

TEST_F(RecallTest, RecallOnASessionWithoutRememberIsAPreconditionError) {
  Start();
  CreateSession("plain");
  GenerateOptions options = Greedy("hello", 2, "plain");
  options.recall.enabled = true;
  Collector collector;
  GenerateFinal final = Run(options, collector);
  EXPECT_EQ(final.status.code(), absl::StatusCode::kFailedPrecondition) << final.status;
  EXPECT_NE(final.status.message().find("remember"), std::string::npos);
  EXPECT_EQ(ScoreRecall("plain", "hello", true, true).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(RecallTest, ScoreUnderRecallInOneCallEqualsSplitCallsAndHelpsRepeats) {
  Start();
  std::string text = "def area(width, height):\n    return width * height\n";
  text += text + "# and once more\n" + text;
  CreateRemembering("whole");
  CreateRemembering("split");
  absl::StatusOr<ScoreResult> whole = ScoreRecall("whole", text, true, std::nullopt);
  ASSERT_TRUE(whole.ok()) << whole.status();
  std::vector<float> split;
  for (size_t from = 0; from < text.size(); from += 37) {
    absl::StatusOr<ScoreResult> part =
        ScoreRecall("split", text.substr(from, 37), true, std::nullopt);
    ASSERT_TRUE(part.ok()) << part.status();
    split.insert(split.end(), part->logprobs.begin(), part->logprobs.end());
  }
  ASSERT_EQ(split.size(), whole->logprobs.size());
  for (size_t i = 0; i < split.size(); ++i) EXPECT_NEAR(split[i], whole->logprobs[i], 1e-4) << i;
  // The repeats are predicted from the history: far better than the model alone.
  absl::StatusOr<ScoreResult> alone = ScoreRecall("", text, false, false);
  absl::StatusOr<ScoreResult> one_shot = ScoreRecall("", text, false, true);
  ASSERT_TRUE(alone.ok() && one_shot.ok());
  EXPECT_NEAR(one_shot->total_logprob, whole->total_logprob, 1e-3 * text.size());
  EXPECT_LT(one_shot->bits_per_byte, 0.6 * alone->bits_per_byte);
  // Scoring without update_memory leaves the history as it was.
  const int64_t before = GetSession("whole")->memory.remembered_tokens;
  ASSERT_TRUE(ScoreRecall("whole", "probe", false, std::nullopt).ok());
  EXPECT_EQ(GetSession("whole")->memory.remembered_tokens, before);
}

}  // namespace
}  // namespace mnemo::scheduler
