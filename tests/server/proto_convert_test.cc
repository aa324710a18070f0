// proto <-> engine conversions and the edge checks that live in the server.
#include "server/proto_convert.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "server/status_convert.h"

namespace mnemo::server {
namespace {

TEST(ProtoConvertTest, UnsetOptionalsTakeDocumentedDefaults) {
  v1::GenerateRequest request;
  request.set_prompt("hi");
  absl::StatusOr<engine::GenerateOptions> options = ToGenerateOptions(request, 20);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->sampling.temperature, 1.0f);
  EXPECT_EQ(options->sampling.top_p, 1.0f);
  EXPECT_EQ(options->sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(options->sampling.top_k, 0);
  EXPECT_FALSE(options->sampling.seed.has_value());
  EXPECT_TRUE(options->stop_at_eos);
  EXPECT_EQ(options->max_new_tokens, 0);
  EXPECT_EQ(options->prompt, "hi");
  // The knobs added for imported models are off.
  EXPECT_EQ(options->sampling.min_p, 0.0f);
  EXPECT_EQ(options->sampling.presence_penalty, 0.0f);
  EXPECT_EQ(options->sampling.frequency_penalty, 0.0f);
  EXPECT_TRUE(options->sampling.logit_bias.empty());
  EXPECT_TRUE(options->stop_token_ids.empty());
  EXPECT_TRUE(options->prompt_token_ids.empty());
}

TEST(ProtoConvertTest, TokenIdsAndNewSamplingKnobsAreCopied) {
  v1::GenerateRequest request;
  request.add_prompt_token_ids(256);
  request.add_prompt_token_ids(104);
  request.add_stop_token_ids(10);
  request.add_stop_token_ids(257);
  v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_min_p(0.05f);
  sampling->set_presence_penalty(0.5f);
  sampling->set_frequency_penalty(-0.25f);
  (*sampling->mutable_logit_bias())[65] = 2.5f;
  (*sampling->mutable_logit_bias())[7] = -100.0f;
  absl::StatusOr<engine::GenerateOptions> options = ToGenerateOptions(request, 20);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->prompt, "");
  EXPECT_EQ(options->prompt_token_ids, (std::vector<int>{256, 104}));
  EXPECT_EQ(options->stop_token_ids, (std::vector<int>{10, 257}));
  EXPECT_EQ(options->sampling.min_p, 0.05f);
  EXPECT_EQ(options->sampling.presence_penalty, 0.5f);
  EXPECT_EQ(options->sampling.frequency_penalty, -0.25f);
  EXPECT_EQ(options->sampling.logit_bias, (std::map<int, float>{{7, -100.0f}, {65, 2.5f}}));

  v1::ScoreRequest score;
  score.add_token_ids(1);
  score.add_token_ids(2);
  absl::StatusOr<engine::ScoreOptions> score_options = ToScoreOptions(score);
  ASSERT_TRUE(score_options.ok()) << score_options.status();
  EXPECT_EQ(score_options->token_ids, (std::vector<int>{1, 2}));
  EXPECT_EQ(score_options->text, "");
}

TEST(ProtoConvertTest, ModelInfoFields) {
  engine::ModelInfo info;
  info.name = "m";
  info.family = "LlamaForCausalLM";
  info.vocab_size = 32000;
  info.tokenizer = "bpe";
  info.dtype = "float32";
  info.weight_dtype = "bfloat16";
  info.window = 4096;
  info.sink_tokens = 4;
  v1::Model model;
  ToProto(info, &model);
  EXPECT_EQ(model.family(), "LlamaForCausalLM");
  EXPECT_EQ(model.vocab_size(), 32000);
  EXPECT_EQ(model.tokenizer(), "bpe");
  EXPECT_EQ(model.dtype(), "float32");
  EXPECT_EQ(model.weight_dtype(), "bfloat16");
  EXPECT_EQ(model.window(), 4096);
  EXPECT_EQ(model.sink_tokens(), 4);
}

TEST(ProtoConvertTest, SetFieldsAreCopiedIncludingMeaningfulZeros) {
  v1::GenerateRequest request;
  request.set_session_id("s");
  request.set_prompt("p");
  request.set_max_new_tokens(7);
  request.mutable_sampling()->set_temperature(0.0f);  // greedy, not "unset"
  request.mutable_sampling()->set_top_k(5);
  request.mutable_sampling()->set_top_p(0.5f);
  request.mutable_sampling()->set_seed(0);
  request.mutable_sampling()->set_repetition_penalty(1.2f);
  request.add_stop("\n");
  request.set_logprobs(3);
  request.set_stop_at_eos(false);
  absl::StatusOr<engine::GenerateOptions> options = ToGenerateOptions(request, 20);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->session_id, "s");
  EXPECT_EQ(options->max_new_tokens, 7);
  EXPECT_EQ(options->sampling.temperature, 0.0f);
  EXPECT_EQ(options->sampling.top_k, 5);
  EXPECT_EQ(options->sampling.top_p, 0.5f);
  ASSERT_TRUE(options->sampling.seed.has_value());
  EXPECT_EQ(*options->sampling.seed, 0u);
  EXPECT_FLOAT_EQ(options->sampling.repetition_penalty, 1.2f);
  EXPECT_EQ(options->stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(options->top_logprobs, 3);
  EXPECT_FALSE(options->stop_at_eos);
}

TEST(ProtoConvertTest, EdgeChecksNameTheField) {
  struct Case {
    void (*mutate)(v1::GenerateRequest&);
    absl::StatusCode code;
    const char* field;
  };
  const Case cases[] = {
      {[](v1::GenerateRequest& r) { r.set_logprobs(-1); }, absl::StatusCode::kInvalidArgument,
       "logprobs"},
      {[](v1::GenerateRequest& r) { r.set_logprobs(21); }, absl::StatusCode::kInvalidArgument,
       "logprobs"},
      {[](v1::GenerateRequest& r) { r.mutable_early_exit()->set_threshold(0.0f); },
       absl::StatusCode::kInvalidArgument, "early_exit.threshold"},
      {[](v1::GenerateRequest& r) {
         r.mutable_early_exit()->set_measure(static_cast<v1::ExitMeasure>(4));
       },
       absl::StatusCode::kInvalidArgument, "early_exit.measure"},
      {[](v1::GenerateRequest& r) { r.mutable_knn_lm()->set_lambda(-0.1f); },
       absl::StatusCode::kInvalidArgument, "knn_lm.lambda"},
      {[](v1::GenerateRequest& r) { r.mutable_knn_lm()->set_k(-1); },
       absl::StatusCode::kInvalidArgument, "knn_lm.k"},
      {[](v1::GenerateRequest& r) { r.mutable_knn_lm()->set_temperature(0.0f); },
       absl::StatusCode::kInvalidArgument, "knn_lm.temperature"},
      // Parameters without a datastore are a mistake, not a no-op (unknown names are the
      // engine's NOT_FOUND: it knows what is loaded).
      {[](v1::GenerateRequest& r) { r.mutable_knn_lm()->set_lambda(0.5f); },
       absl::StatusCode::kInvalidArgument, "knn_lm.datastore"},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest request;
    request.set_prompt("p");
    c.mutate(request);
    absl::StatusOr<engine::GenerateOptions> options = ToGenerateOptions(request, 20);
    EXPECT_EQ(options.status().code(), c.code) << c.field;
    EXPECT_TRUE(absl::StrContains(options.status().message(), c.field)) << options.status();
  }
}

// The edge checks say what they got, as the engine's do; an infinite kNN-LM temperature is
// refused here too (it is not > 0 in any useful sense: every neighbour would weigh the same).
TEST(ProtoConvertTest, EdgeChecksReportTheValue) {
  struct Case {
    void (*mutate)(v1::GenerateRequest&);
    const char* message;
  };
  const Case cases[] = {
      {[](v1::GenerateRequest& r) { r.set_logprobs(21); }, "logprobs must be in [0, 20], got 21"},
      {[](v1::GenerateRequest& r) { r.mutable_early_exit()->set_threshold(1.5f); },
       "early_exit.threshold must be in (0, 1], got 1.5"},
      {[](v1::GenerateRequest& r) { r.mutable_knn_lm()->set_lambda(-0.5f); },
       "knn_lm.lambda must be in [0, 1], got -0.5"},
      {[](v1::GenerateRequest& r) { r.mutable_knn_lm()->set_k(-3); },
       "knn_lm.k must be >= 0, got -3"},
      {[](v1::GenerateRequest& r) { r.mutable_knn_lm()->set_temperature(0.0f); },
       "knn_lm.temperature must be a finite number > 0, got 0"},
      {[](v1::GenerateRequest& r) {
         r.mutable_knn_lm()->set_temperature(std::numeric_limits<float>::infinity());
       },
       "knn_lm.temperature must be a finite number > 0, got inf"},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest request;
    request.set_prompt("p");
    request.mutable_knn_lm()->set_datastore("wiki");
    c.mutate(request);
    absl::StatusOr<engine::GenerateOptions> options = ToGenerateOptions(request, 20);
    EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(options.status().message(), c.message);
  }
}

TEST(ProtoConvertTest, EarlyExitMeasureMapsToTheEngineAndUnsetIsTheModelDefault) {
  v1::GenerateRequest request;
  request.set_prompt("p");
  request.mutable_early_exit()->set_enabled(true);
  absl::StatusOr<engine::GenerateOptions> unset = ToGenerateOptions(request, 20);
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_TRUE(unset->early_exit.enabled);
  EXPECT_FALSE(unset->early_exit.measure.has_value());
  EXPECT_FALSE(unset->early_exit.threshold.has_value());
  const std::pair<v1::ExitMeasure, model::ExitMeasure> pairs[] = {
      {v1::EXIT_MEASURE_SOFTMAX_RESPONSE, model::ExitMeasure::kSoftmaxResponse},
      {v1::EXIT_MEASURE_HIDDEN_SATURATION, model::ExitMeasure::kHiddenSaturation},
      {v1::EXIT_MEASURE_CLASSIFIER, model::ExitMeasure::kClassifier}};
  for (const auto& [wire, engine_measure] : pairs) {
    request.mutable_early_exit()->set_measure(wire);
    request.mutable_early_exit()->set_threshold(0.75f);
    absl::StatusOr<engine::GenerateOptions> options = ToGenerateOptions(request, 20);
    ASSERT_TRUE(options.ok()) << options.status();
    EXPECT_EQ(options->early_exit.measure, engine_measure);
    EXPECT_EQ(options->early_exit.threshold, 0.75f);
  }
}

TEST(ProtoConvertTest, FinalChunkFields) {
  EXPECT_EQ(ToProto(engine::FinishReason::kLength), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(ToProto(engine::FinishReason::kStop), v1::FINISH_REASON_STOP);
  EXPECT_EQ(ToProto(engine::FinishReason::kEos), v1::FINISH_REASON_EOS);
  EXPECT_EQ(ToProto(engine::FinishReason::kCancelled), v1::FINISH_REASON_CANCELLED);
  EXPECT_EQ(ToProto(engine::FinishReason::kError), v1::FINISH_REASON_ERROR);

  engine::TokenOutput token;
  token.id = 104;
  token.text = "h";
  token.bytes = "h";
  token.logprob = -0.5f;
  token.exit_layer = 3;
  token.top_logprobs.push_back({105, "i", -1.5f});
  v1::GenerateResponse chunk;
  AppendTokens({token, token}, "hh", &chunk);
  ASSERT_EQ(chunk.tokens_size(), 2);
  EXPECT_EQ(chunk.text(), "hh");
  EXPECT_EQ(chunk.tokens(1).id(), 104);
  EXPECT_EQ(chunk.tokens(1).bytes(), "h");
  EXPECT_EQ(chunk.tokens(1).exit_layer(), 3);
  ASSERT_EQ(chunk.tokens(1).top_logprobs_size(), 1);
  EXPECT_EQ(chunk.tokens(1).top_logprobs(0).text(), "i");
}

std::vector<engine::SessionInfo> Sessions(int n) {
  std::vector<engine::SessionInfo> sessions(n);
  for (int i = 0; i < n; ++i) sessions[i].session_id = "s" + std::to_string(i);
  return sessions;
}

TEST(ProtoConvertTest, PaginationWalksEveryEntryOnce) {
  const std::vector<engine::SessionInfo> all = Sessions(7);
  std::vector<std::string> seen;
  v1::ListSessionsRequest request;
  request.set_page_size(3);
  int pages = 0;
  do {
    v1::ListSessionsResponse response;
    ASSERT_TRUE(FillSessionsPage(all, request, &response).ok());
    for (const v1::Session& s : response.sessions()) seen.push_back(s.session_id());
    request.set_page_token(response.next_page_token());
    ++pages;
  } while (!request.page_token().empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, (std::vector<std::string>{"s0", "s1", "s2", "s3", "s4", "s5", "s6"}));

  // A deletion between pages neither skips nor repeats.
  request.set_page_token("");
  v1::ListSessionsResponse first;
  ASSERT_TRUE(FillSessionsPage(all, request, &first).ok());
  std::vector<engine::SessionInfo> fewer = all;
  fewer.erase(fewer.begin() + 1);  // s1 deleted
  request.set_page_token(first.next_page_token());
  v1::ListSessionsResponse second;
  ASSERT_TRUE(FillSessionsPage(fewer, request, &second).ok());
  EXPECT_EQ(second.sessions(0).session_id(), "s3");
}

TEST(ProtoConvertTest, PaginationLimits) {
  EXPECT_EQ(ParsePageRequest(0, "")->size, kDefaultPageSize);
  EXPECT_EQ(ParsePageRequest(1000, "")->size, 1000);
  absl::StatusOr<PageRequest> too_big = ParsePageRequest(1001, "");
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(too_big.status().message(), "page_size"));
  EXPECT_EQ(ParsePageRequest(-1, "").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<PageRequest> bad_token = ParsePageRequest(10, "not*base64");
  EXPECT_EQ(bad_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad_token.status().message(), "page_token"));
  EXPECT_EQ(ParsePageRequest(10, EncodePageToken("abc"))->after, "abc");

  std::vector<engine::ModelInfo> models(1);
  models[0].name = "m";
  v1::ListModelsRequest request;
  v1::ListModelsResponse response;
  ASSERT_TRUE(FillModelsPage(models, request, &response).ok());
  EXPECT_EQ(response.models_size(), 1);
  EXPECT_TRUE(response.next_page_token().empty());
}

TEST(StatusConvertTest, KeepsCodeAndMessage) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  grpc::Status status = ToGrpcStatus(absl::NotFoundError("session \"x\" not found"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "session \"x\" not found");
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("a")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("a")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("a")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(99), "x")).error_code(),
            grpc::StatusCode::UNKNOWN);
}

}  // namespace
}  // namespace mnemo::server
