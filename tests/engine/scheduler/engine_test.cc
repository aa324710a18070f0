// The Engine facade over a tiny random model saved to a temporary directory.
#include "engine/engine.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/engine/scheduler/test_util.h"

namespace mnemo::engine {
namespace {

using testing::Collector;
using testing::Waiter;

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("mnemo_engine_test_" + std::to_string(getpid())));
    absl::Status s = testing::TinyModel()->Save(*dir_);
    ASSERT_TRUE(s.ok()) << s;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  std::unique_ptr<Engine> MakeEngine() {
    EngineConfig config;
    config.model_dir = *dir_;
    config.threads = 1;
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(config);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  static std::string* dir_;
};
std::string* EngineTest::dir_ = nullptr;

TEST_F(EngineTest, LoadsAndDescribesTheModel) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const ModelInfo& info = engine->model_info();
  EXPECT_EQ(info.name, "tiny");
  EXPECT_EQ(info.layers, 2);
  EXPECT_EQ(info.vocab_size, 259);
  EXPECT_EQ(info.seg_len, 16);
  EXPECT_EQ(info.tokenizer, "byte");
  EXPECT_EQ(info.device, "cpu");
  EXPECT_GT(info.parameters, 0);
}

TEST_F(EngineTest, BadModelDirectoryIsAnError) {
  EngineConfig config;
  config.model_dir = "/nonexistent/mnemo-model";
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(config);
  EXPECT_FALSE(engine.ok());
  config.model_dir = *dir_;
  config.device = "toaster";
  EXPECT_EQ(Engine::Create(config).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, GeneratesInASessionAndValidatesSynchronously) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  Waiter<absl::StatusOr<SessionInfo>> created;
  engine->CreateSession({"chat", 0}, created.Callback());
  ASSERT_TRUE(created.Wait().ok());

  GenerateOptions bad;
  bad.session_id = "chat";
  bad.max_new_tokens = 5000;
  Collector untouched;
  absl::Status s = engine->Submit(bad, untouched.stream());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "max_new_tokens 5000 exceeds the server cap 4096"));
  EXPECT_FALSE(untouched.Wait(absl::ZeroDuration()).has_value());

  GenerateOptions options;
  options.session_id = "chat";
  options.prompt = "Hi";
  options.max_new_tokens = 6;
  options.sampling.seed = 3;
  Collector c;
  ASSERT_TRUE(engine->Submit(options, c.stream()).ok());
  std::optional<GenerateFinal> final = c.Wait();
  ASSERT_TRUE(final.has_value());
  EXPECT_EQ(final->reason, FinishReason::kLength);
  EXPECT_EQ(final->usage.session_tokens, 8);

  Waiter<absl::StatusOr<SessionInfo>> got;
  engine->GetSession("chat", got.Callback());
  absl::StatusOr<SessionInfo> info = got.Wait();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->tokens_seen, 8);
  EXPECT_EQ(engine->Stats().sessions, 1);
  EXPECT_EQ(engine->Stats().running, 0);

  Waiter<absl::StatusOr<ScoreResult>> scored;
  engine->Score({"", "", false, false}, scored.Callback());  // inline INVALID_ARGUMENT
  EXPECT_EQ(scored.Wait().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, Tokenize) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  absl::StatusOr<TokenizeResult> r = engine->Tokenize("a\xC3\xA9");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ids, (std::vector<int>{'a', 0xC3, 0xA9}));
  EXPECT_EQ(r->pieces, (std::vector<std::string>{"a", "", "\xC3\xA9"}));
  EXPECT_FALSE(engine->Tokenize("\xFF").ok());
}

TEST_F(EngineTest, DestructorClosesOutstandingStreams) {
  std::unique_ptr<Engine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  GenerateOptions options;
  options.prompt = "go";
  options.max_new_tokens = 4000;
  Collector c;
  ASSERT_TRUE(engine->Submit(options, c.stream()).ok());
  ASSERT_TRUE(c.WaitTokens(1));
  engine.reset();
  std::optional<GenerateFinal> final = c.Wait(absl::ZeroDuration());
  ASSERT_TRUE(final.has_value());
  EXPECT_EQ(final->reason, FinishReason::kCancelled);
  EXPECT_EQ(final->status.code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace mnemo::engine
