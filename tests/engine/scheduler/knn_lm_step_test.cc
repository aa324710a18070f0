// kNN-LM through the scheduler with a session's private datastore: adding text, scoring and
// generating with knn_lm, and the errors a client can meet.
#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/engine/scheduler/scheduler_fixture.h"

namespace mnemo::scheduler {
namespace {

using engine::AddToDatastoreResult;
using engine::KnnLmOptions;

constexpr char kDocument[] =
    "A datastore remembers what followed each context, so a text seen once can be recalled "
    "token for token: retrieval, not generalisation.";

class KnnLmTest : public SchedulerTest {
 protected:
  absl::StatusOr<AddToDatastoreResult> Add(const std::string& session, const std::string& text) {
    Waiter<absl::StatusOr<AddToDatastoreResult>> w;
    scheduler_->SubmitAddToDatastore({session, text}, w.Callback());
    return w.Wait();
  }
  absl::StatusOr<ScoreResult> ScoreKnn(const std::string& session, const std::string& text,
                                       std::optional<KnnLmOptions> knn) {
    Waiter<absl::StatusOr<ScoreResult>> w;
    ScoreOptions options;
    options.session_id = session;
    options.text = text;
    options.knn_lm = std::move(knn);
    scheduler_->SubmitScore(options, w.Callback());
    return w.Wait();
  }
  static KnnLmOptions Session(float lambda, int k = 0, float temperature = 1.0f) {
    KnnLmOptions o;
    o.datastore = "session";
    o.lambda = lambda;
    o.k = k;
    o.temperature = temperature;
    return o;
  }
};

TEST_F(KnnLmTest, AddedTextBecomesOneEntryPerTokenAndLeavesMemoryAlone) {
  Start();
  CreateSession("s");
  const std::string text = kDocument;
  absl::StatusOr<AddToDatastoreResult> added = Add("s", text);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->entries_added, static_cast<int64_t>(text.size()));
  EXPECT_EQ(added->datastore.entries, static_cast<int64_t>(text.size()));
  EXPECT_EQ(added->datastore.name, "session");
  EXPECT_EQ(added->datastore.session_id, "s");
  EXPECT_EQ(added->datastore.d, testing::TinyConfig().d_model);
  EXPECT_GT(added->datastore.bytes, 0);
  // The session's own memory did not read the text.
  EXPECT_EQ(GetSession("s")->tokens_seen, 0);
  ASSERT_TRUE(Add("s", "more").ok());
  Waiter<absl::StatusOr<engine::DatastoreInfo>> w;
  scheduler_->GetSessionDatastore("s", w.Callback());
  absl::StatusOr<engine::DatastoreInfo> info = w.Wait();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->entries, static_cast<int64_t>(text.size()) + 4);
  // Stats count it (refreshed by the periodic sweep).
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(scheduler_->Stats().session_datastore_entries, info->entries);
}

TEST_F(KnnLmTest, ScoreWithTheDatastoreOfTheSameTextIsBetterAndLambdaZeroIsExact) {
  Start();
  CreateSession("s");
  const std::string text = kDocument;
  ASSERT_TRUE(Add("s", text).ok());
  absl::StatusOr<ScoreResult> plain = ScoreKnn("s", text, std::nullopt);
  absl::StatusOr<ScoreResult> zero = ScoreKnn("s", text, Session(0.0f));
  absl::StatusOr<ScoreResult> mixed = ScoreKnn("s", text, Session(0.5f, 8));
  ASSERT_TRUE(plain.ok() && zero.ok() && mixed.ok()) << mixed.status();
  EXPECT_DOUBLE_EQ(zero->total_logprob, plain->total_logprob);
  // Every context of the text is in the datastore at distance ~0 with the right next token,
  // so p >= 0.5 * p_kNN(y) where p_kNN(y) is large: far better than the random model alone.
  EXPECT_GT(mixed->total_logprob, plain->total_logprob + 0.5 * text.size());
  EXPECT_LT(mixed->bits_per_byte, plain->bits_per_byte);
}

TEST_F(KnnLmTest, GreedyGenerationWithLambdaOneRecallsTheAddedText) {
  Start();
  CreateSession("s");
  const std::string text = kDocument;
  ASSERT_TRUE(Add("s", text).ok());
  // Same prefix, fresh memory: the state after it is (up to float rounding) a stored key,
  // whose value is the next character; and so on, token after token.
  const size_t prefix = 20;
  GenerateOptions options = Greedy(text.substr(0, prefix), 40, "s");
  options.knn_lm = Session(1.0f, 1);
  Collector collector;
  const GenerateFinal final = Run(options, collector);
  ASSERT_TRUE(final.status.ok()) << final.status;
  EXPECT_EQ(collector.text(), text.substr(prefix, 40));
  for (const engine::TokenOutput& t : collector.tokens()) EXPECT_NEAR(t.logprob, 0.0f, 1e-5);
}

TEST_F(KnnLmTest, ErrorsNameTheProblem) {
  Start();
  CreateSession("s");
  // No private datastore yet.
  absl::StatusOr<ScoreResult> none = ScoreKnn("s", "x", Session(0.5f));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(none.status().message(), "AddToSessionDatastore"));
  // "session" needs a session.
  EXPECT_EQ(ScoreKnn("", "x", Session(0.5f)).status().code(), absl::StatusCode::kInvalidArgument);
  // Unknown shared datastore: NOT_FOUND, listing what is loaded.
  KnnLmOptions wiki;
  wiki.datastore = "wiki";
  absl::StatusOr<ScoreResult> unknown = ScoreKnn("s", "x", wiki);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "loaded: none"));
  // Ranges, on the caller's thread for Generate.
  GenerateOptions bad = Greedy("x", 1, "s");
  bad.knn_lm = Session(1.5f);
  Collector c;
  absl::Status refused = scheduler_->SubmitGenerate(bad, c.stream());
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.message(), "knn_lm.lambda"));
  bad.knn_lm = Session(0.5f, 2000);
  EXPECT_TRUE(absl::StrContains(scheduler_->SubmitGenerate(bad, c.stream()).message(), "knn_lm.k"));
  bad.knn_lm = Session(0.5f, 4, 0.0f);
  EXPECT_TRUE(absl::StrContains(scheduler_->SubmitGenerate(bad, c.stream()).message(),
                                "knn_lm.temperature"));
  // Adding needs a session that exists, and text.
  EXPECT_EQ(Add("", "x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Add("s", "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Add("ghost", "x").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KnnLmTest, SessionDatastoreLimitRefusesWholeText) {
  SchedulerConfig config = TestConfig();
  config.max_session_datastore_entries = 10;
  Start(config);
  CreateSession("s");
  ASSERT_TRUE(Add("s", "12345678").ok());
  absl::StatusOr<AddToDatastoreResult> over = Add("s", "abc");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  Waiter<absl::StatusOr<engine::DatastoreInfo>> w;
  scheduler_->GetSessionDatastore("s", w.Callback());
  EXPECT_EQ(w.Wait()->entries, 8);
}

TEST_F(KnnLmTest, RefusedRequestsLeaveTheSessionAsItWas) {
  SchedulerConfig config = TestConfig();
  config.max_session_datastore_entries = 10;
  Start(config);
  CreateSession("s");
  // No private datastore: refused before any model work, so nothing was read into memory.
  GenerateOptions generate = Greedy("hello", 4, "s");
  generate.knn_lm = Session(0.5f);
  Collector c;
  const GenerateFinal final = Run(generate, c);
  EXPECT_EQ(final.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(GetSession("s")->tokens_seen, 0);
  Waiter<absl::StatusOr<ScoreResult>> w;
  ScoreOptions score;
  score.session_id = "s";
  score.text = std::string(40, 'x');  // several segments
  score.update_memory = true;
  score.knn_lm = Session(0.5f);
  scheduler_->SubmitScore(score, w.Callback());
  EXPECT_EQ(w.Wait().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(GetSession("s")->tokens_seen, 0);
  // A first addition over the limit leaves no empty datastore behind: kNN-LM is still refused.
  EXPECT_EQ(Add("s", std::string(20, 'y')).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ScoreKnn("s", "x", Session(1.0f)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mnemo::scheduler
