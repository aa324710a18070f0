#include "engine/scheduler/validation.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mnemo::scheduler {
namespace {

engine::GenerateOptions Valid() {
  engine::GenerateOptions options;
  options.prompt = "hello";
  return options;
}

// Expects INVALID_ARGUMENT whose message starts with `field`.
void ExpectInvalid(engine::GenerateOptions options, const std::string& field,
                   const std::string& detail = "") {
  absl::Status s = ValidateGenerate(options, RequestLimits());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_TRUE(absl::StartsWith(s.message(), field)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), detail)) << s;
}

TEST(ValidationTest, AcceptsDefaultsAndResolvesMaxNewTokens) {
  engine::GenerateOptions options = Valid();
  ASSERT_TRUE(ValidateGenerate(options, RequestLimits()).ok());
  EXPECT_EQ(options.max_new_tokens, 256);
  options.sampling.temperature = 0;
  options.sampling.top_p = 1;
  options.max_new_tokens = 4096;
  options.top_logprobs = 20;
  EXPECT_TRUE(ValidateGenerate(options, RequestLimits()).ok());
  options.prompt = "";
  options.session_id = "chat-1";
  EXPECT_TRUE(ValidateGenerate(options, RequestLimits()).ok());
}

TEST(ValidationTest, NamesTheFieldAtFault) {
  engine::GenerateOptions o = Valid();
  o.sampling.temperature = -0.1f;
  ExpectInvalid(o, "sampling.temperature");
  o = Valid();
  o.sampling.temperature = NAN;
  ExpectInvalid(o, "sampling.temperature");
  for (float p : {0.0f, -1.0f, 1.01f}) {
    o = Valid();
    o.sampling.top_p = p;
    ExpectInvalid(o, "sampling.top_p");
  }
  o = Valid();
  o.sampling.top_k = -1;
  ExpectInvalid(o, "sampling.top_k");
  for (float penalty : {0.0f, -1.0f}) {
    o = Valid();
    o.sampling.repetition_penalty = penalty;
    ExpectInvalid(o, "sampling.repetition_penalty");
  }
  o = Valid();
  o.max_new_tokens = 5000;
  ExpectInvalid(o, "max_new_tokens", "max_new_tokens 5000 exceeds the server cap 4096");
  o = Valid();
  o.max_new_tokens = -1;
  ExpectInvalid(o, "max_new_tokens");
  for (int n : {-1, 21}) {
    o = Valid();
    o.top_logprobs = n;
    ExpectInvalid(o, "logprobs");
  }
  o = Valid();
  o.prompt = "caf\xC3";
  ExpectInvalid(o, "prompt", "UTF-8");
  o = Valid();
  o.prompt = "";
  ExpectInvalid(o, "prompt", "session_id");
  o = Valid();
  o.stop = {"ok", ""};
  ExpectInvalid(o, "stop[1]");
  o = Valid();
  o.session_id = "bad id";
  ExpectInvalid(o, "session_id");
}

TEST(ValidationTest, Score) {
  engine::ScoreOptions options;
  EXPECT_EQ(ValidateScore(options).code(), absl::StatusCode::kInvalidArgument);
  options.text = "\xFF";
  EXPECT_TRUE(absl::StartsWith(ValidateScore(options).message(), "text"));
  options.text = "fine";
  EXPECT_TRUE(ValidateScore(options).ok());
}

}  // namespace
}  // namespace mnemo::scheduler
