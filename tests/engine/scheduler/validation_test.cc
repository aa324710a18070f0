#include "engine/scheduler/validation.h"

#include <cmath>
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

// A model calibrated for softmax response (0.9) and the classifier (0.8), not for saturation.
ModelExitInfo CalibratedModel(bool has_classifier) {
  ModelExitInfo info;
  info.thresholds[static_cast<size_t>(model::ExitMeasure::kSoftmaxResponse)] = 0.9f;
  info.thresholds[static_cast<size_t>(model::ExitMeasure::kClassifier)] = 0.8f;
  info.has_classifier = has_classifier;
  return info;
}

TEST(ValidationTest, EarlyExitResolvesTheMeasureAndItsCalibratedThreshold) {
  engine::GenerateOptions o = Valid();
  o.early_exit.enabled = true;
  ASSERT_TRUE(ValidateGenerate(o, RequestLimits(), CalibratedModel(true)).ok());
  EXPECT_EQ(o.early_exit.measure, model::ExitMeasure::kSoftmaxResponse);
  EXPECT_EQ(o.early_exit.threshold, 0.9f);

  o = Valid();
  o.early_exit.enabled = true;
  o.early_exit.measure = model::ExitMeasure::kClassifier;
  ASSERT_TRUE(ValidateGenerate(o, RequestLimits(), CalibratedModel(true)).ok());
  EXPECT_EQ(o.early_exit.threshold, 0.8f);

  // The model's default measure when the request names none; a given threshold is kept.
  ModelExitInfo classifier_default = CalibratedModel(true);
  classifier_default.default_measure = model::ExitMeasure::kClassifier;
  o = Valid();
  o.early_exit.enabled = true;
  o.early_exit.threshold = 0.5f;
  ASSERT_TRUE(ValidateGenerate(o, RequestLimits(), classifier_default).ok());
  EXPECT_EQ(o.early_exit.measure, model::ExitMeasure::kClassifier);
  EXPECT_EQ(o.early_exit.threshold, 0.5f);

  // Saturation has no calibrated threshold, but a request may bring its own.
  o = Valid();
  o.early_exit.enabled = true;
  o.early_exit.measure = model::ExitMeasure::kHiddenSaturation;
  o.early_exit.threshold = 0.99f;
  EXPECT_TRUE(ValidateGenerate(o, RequestLimits(), CalibratedModel(true)).ok());
}

TEST(ValidationTest, EarlyExitRefusesMeasuresTheModelCannotServe) {
  auto expect_invalid = [](engine::GenerateOptions o, const ModelExitInfo& info,
                           const std::string& field, const std::string& detail) {
    absl::Status s = ValidateGenerate(o, RequestLimits(), info);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_TRUE(absl::StartsWith(s.message(), field)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), detail)) << s;
  };
  engine::GenerateOptions o = Valid();
  o.early_exit.enabled = true;
  o.early_exit.threshold = 0.5f;
  o.early_exit.measure = model::ExitMeasure::kClassifier;
  expect_invalid(o, CalibratedModel(false), "early_exit.measure", "no exit classifier");
  o.early_exit.enabled = false;  // naming a measure the model lacks is a mistake either way
  expect_invalid(o, CalibratedModel(false), "early_exit.measure", "classifier");
  // A model whose default measure is a classifier it lacks (its loader refuses that, but the
  // check must not depend on it).
  ModelExitInfo broken = CalibratedModel(false);
  broken.default_measure = model::ExitMeasure::kClassifier;
  o = Valid();
  o.early_exit.enabled = true;
  expect_invalid(o, broken, "early_exit", "classifier");

  o = Valid();
  o.early_exit.enabled = true;
  o.early_exit.measure = model::ExitMeasure::kHiddenSaturation;
  expect_invalid(o, CalibratedModel(true), "early_exit.threshold",
                 "must be set for measure saturation");
  o = Valid();
  o.early_exit.enabled = true;
  expect_invalid(o, ModelExitInfo(), "early_exit.threshold", "must be set for measure softmax");
  // Disabled, nothing is resolved and nothing is needed.
  o = Valid();
  ASSERT_TRUE(ValidateGenerate(o, RequestLimits(), ModelExitInfo()).ok());
  EXPECT_FALSE(o.early_exit.measure.has_value());
  EXPECT_FALSE(o.early_exit.threshold.has_value());
}

TEST(ValidationTest, Score) {
  engine::ScoreOptions options;
  EXPECT_EQ(ValidateScore(options, RequestLimits()).code(), absl::StatusCode::kInvalidArgument);
  options.text = "\xFF";
  EXPECT_TRUE(absl::StartsWith(ValidateScore(options, RequestLimits()).message(), "text"));
  options.text = "fine";
  EXPECT_TRUE(ValidateScore(options, RequestLimits()).ok());
}

RequestLimits VocabOf(int vocab_size) {
  RequestLimits limits;
  limits.vocab_size = vocab_size;
  return limits;
}

TEST(ValidationTest, ScoreTokenIds) {
  const RequestLimits limits = VocabOf(10);
  engine::ScoreOptions options;
  options.token_ids = {1, 2, 9};
  EXPECT_TRUE(ValidateScore(options, limits).ok());
  options.text = "and text";  // both
  EXPECT_EQ(ValidateScore(options, limits).code(), absl::StatusCode::kInvalidArgument);
  options.text.clear();
  options.token_ids = {1, 10, -1};
  absl::Status s = ValidateScore(options, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(), "token_ids[1] = 10")) << s;
  options.token_ids = {3};  // one-shot: the only id would be context only
  s = ValidateScore(options, limits);
  EXPECT_TRUE(absl::StartsWith(s.message(), "token_ids")) << s;
  options.session_id = "s";  // a session may have a history to score it against
  EXPECT_TRUE(ValidateScore(options, limits).ok());
}

TEST(ValidationTest, PromptTokenIds) {
  const RequestLimits limits = VocabOf(10);
  engine::GenerateOptions o;
  o.prompt_token_ids = {0, 9};
  EXPECT_TRUE(ValidateGenerate(o, limits).ok());
  o.prompt = "x";
  absl::Status s = ValidateGenerate(o, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "prompt_token_ids")) << s;
  o.prompt.clear();
  o.prompt_token_ids = {0, 1, 2, 12};
  s = ValidateGenerate(o, limits);
  EXPECT_TRUE(absl::StartsWith(s.message(), "prompt_token_ids[3] = 12")) << s;
  o.prompt_token_ids.clear();  // neither: only with a session
  EXPECT_TRUE(absl::StartsWith(ValidateGenerate(o, limits).message(), "prompt"));
  o.session_id = "s";
  EXPECT_TRUE(ValidateGenerate(o, limits).ok());
}

TEST(ValidationTest, NewSamplingKnobsNameTheFieldAtFault) {
  const RequestLimits limits = VocabOf(10);
  auto expect_invalid = [&](engine::GenerateOptions o, const std::string& field) {
    absl::Status s = ValidateGenerate(o, limits);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_TRUE(absl::StartsWith(s.message(), field)) << s;
  };
  engine::GenerateOptions o = Valid();
  o.sampling.min_p = 1.0f;
  o.sampling.presence_penalty = -2.0f;
  o.sampling.frequency_penalty = 2.0f;
  o.sampling.logit_bias = {{0, -100.0f}, {9, 5.0f}};
  o.stop_token_ids = {0, 9};
  EXPECT_TRUE(ValidateGenerate(o, limits).ok());
  for (float p : {-0.1f, 1.1f, NAN}) {
    o = Valid();
    o.sampling.min_p = p;
    expect_invalid(o, "sampling.min_p");
  }
  for (float p : {-2.1f, 2.1f, NAN}) {
    o = Valid();
    o.sampling.presence_penalty = p;
    expect_invalid(o, "sampling.presence_penalty");
    o = Valid();
    o.sampling.frequency_penalty = p;
    expect_invalid(o, "sampling.frequency_penalty");
  }
  o = Valid();
  o.sampling.logit_bias = {{3, 1.0f}, {10, 1.0f}};
  expect_invalid(o, "sampling.logit_bias[10]");
  o.sampling.logit_bias = {{-1, 1.0f}};
  expect_invalid(o, "sampling.logit_bias[-1]");
  o.sampling.logit_bias = {{3, INFINITY}};
  expect_invalid(o, "sampling.logit_bias[3]");
  o = Valid();
  o.stop_token_ids = {4, 4, 11};
  expect_invalid(o, "stop_token_ids[2] = 11");
}

}  // namespace
}  // namespace mnemo::scheduler
