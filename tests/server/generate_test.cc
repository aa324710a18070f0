// Generation.Generate / Score / Tokenize against an in-process server with a tiny random model.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "tests/server/test_server.h"

namespace mnemo::server::testing {
namespace {

v1::GenerateRequest Request(const std::string& prompt, int max_new_tokens) {
  v1::GenerateRequest request;
  request.set_prompt(prompt);
  request.set_max_new_tokens(max_new_tokens);
  request.set_stop_at_eos(false);
  request.mutable_sampling()->set_seed(1234);
  return request;
}

// Waits until the engine has no running or waiting request.
void WaitEngineIdle(MnemoServer& server) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    const engine::EngineStats stats = server.engine()->Stats();
    if (stats.running == 0 && stats.waiting == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ADD_FAILURE() << "engine still busy after 30s";
}

class GenerateTest : public ::testing::Test {
 protected:
  TestServer server_;
  std::unique_ptr<v1::Generation::Stub> generation_ = server_.generation();
  std::unique_ptr<v1::Sessions::Stub> sessions_ = server_.sessions();
};

TEST_F(GenerateTest, StreamsIncrementallyAndEndsWithFinishReasonAndUsage) {
  const std::string prompt = "The quick brown fox";
  StreamResult result = GenerateAll(*generation_, Request(prompt, 200));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.tokens, 200);
  ASSERT_GE(result.chunks.size(), 2u);
  // The first chunk left before the last token was generated.
  EXPECT_LT(result.chunks.front().tokens_size(), 200);
  std::string token_text;
  for (size_t i = 0; i < result.chunks.size(); ++i) {
    const v1::GenerateResponse& chunk = result.chunks[i];
    for (const v1::Token& token : chunk.tokens()) {
      token_text += token.text();
      EXPECT_EQ(token.exit_layer(), 2);
      EXPECT_LE(token.logprob(), 0.0f);
    }
    if (i + 1 < result.chunks.size()) {
      EXPECT_EQ(chunk.finish_reason(), v1::FINISH_REASON_UNSPECIFIED) << "chunk " << i;
      EXPECT_FALSE(chunk.has_usage()) << "chunk " << i;
    }
  }
  EXPECT_EQ(token_text, result.text);
  const v1::GenerateResponse& last = result.chunks.back();
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().prompt_tokens(), static_cast<int>(prompt.size()));
  EXPECT_EQ(last.usage().generated_tokens(), 200);
}

TEST_F(GenerateTest, SlowClientGetsCoalescedChunks) {
  // A small flow-control window and large chunks (20 alternatives per token) make the server's
  // writes wait on the client, so tokens pile up in the stream and leave together.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  auto channel =
      grpc::CreateCustomChannel(server_.address(), grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Generation::NewStub(channel);
  v1::GenerateRequest request = Request("slow reader", 600);
  request.set_logprobs(20);

  std::unique_ptr<grpc::ClientContext> context = ContextWithTimeout(absl::Seconds(60));
  auto reader = stub->Generate(context.get(), request);
  v1::GenerateResponse chunk;
  ASSERT_TRUE(reader->Read(&chunk));
  int tokens = chunk.tokens_size();
  int chunks = 1;
  int largest = chunk.tokens_size();
  WaitEngineIdle(server_.server());  // everything is generated; most of it not yet sent
  while (reader->Read(&chunk)) {
    tokens += chunk.tokens_size();
    largest = std::max(largest, chunk.tokens_size());
    ++chunks;
    EXPECT_LE(chunk.tokens_size() > 0 ? chunk.tokens(0).top_logprobs_size() : 20, 20);
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 600);
  EXPECT_GT(largest, 1);
  EXPECT_LT(chunks, 600);
}

TEST_F(GenerateTest, SameSeedSameOutputEvenWhenConcurrent) {
  const v1::GenerateRequest request = Request("determinism", 64);
  const StreamResult alone = GenerateAll(*generation_, request);
  ASSERT_TRUE(alone.status.ok()) << alone.status.error_message();
  StreamResult first, second;
  std::thread a([&] { first = GenerateAll(*generation_, request); });
  std::thread b([&] { second = GenerateAll(*generation_, request); });
  a.join();
  b.join();
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(first.text, alone.text);
  EXPECT_EQ(second.text, alone.text);
}

TEST_F(GenerateTest, TwoSessionsConcurrently) {
  const std::string prompt = "session prompt";
  CreateSession(*sessions_, "left");
  CreateSession(*sessions_, "right");
  StreamResult left, right;
  std::thread a([&] {
    v1::GenerateRequest request = Request(prompt, 100);
    request.set_session_id("left");
    left = GenerateAll(*generation_, request);
  });
  std::thread b([&] {
    v1::GenerateRequest request = Request(prompt, 100);
    request.set_session_id("right");
    right = GenerateAll(*generation_, request);
  });
  a.join();
  b.join();
  for (const StreamResult* result : {&left, &right}) {
    ASSERT_TRUE(result->status.ok()) << result->status.error_message();
    EXPECT_EQ(result->tokens, 100);
    EXPECT_EQ(result->chunks.back().usage().session_tokens(),
              static_cast<int64_t>(prompt.size()) + 100);
  }
  EXPECT_EQ(left.text, right.text);  // same seed, same prompt, same (empty) history
  EXPECT_EQ(WaitSessionIdle(*sessions_, "left").tokens_seen(),
            static_cast<int64_t>(prompt.size()) + 100);

  // A session continues from its memory: an empty prompt is fine, and its tokens add up.
  v1::GenerateRequest more = Request("", 10);
  more.set_session_id("left");
  StreamResult next = GenerateAll(*generation_, more);
  ASSERT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_EQ(next.chunks.back().usage().session_tokens(), static_cast<int64_t>(prompt.size()) + 110);
}

TEST_F(GenerateTest, ClientCancelStopsGenerationAndSessionKeepsWhatWasSent) {
  const std::string prompt = "cancel me";
  CreateSession(*sessions_, "cancelled");
  v1::GenerateRequest request = Request(prompt, 4000);
  request.set_session_id("cancelled");

  std::unique_ptr<grpc::ClientContext> context = ContextWithTimeout(absl::Seconds(60));
  auto reader = generation_->Generate(context.get(), request);
  v1::GenerateResponse chunk;
  int received = 0;
  for (int i = 0; i < 3 && reader->Read(&chunk); ++i) received += chunk.tokens_size();
  ASSERT_GT(received, 0);
  const absl::Time cancel_time = absl::Now();
  context->TryCancel();
  while (reader->Read(&chunk)) received += chunk.tokens_size();
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();

  const v1::Session session = WaitSessionIdle(*sessions_, "cancelled");
  const absl::Duration stop_latency = absl::Now() - cancel_time;
  EXPECT_LT(stop_latency, absl::Seconds(5));
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
  // The session holds the prompt, every token the client received, and at most the few the
  // engine pushed between the client's cancel and its next step; never the whole budget.
  EXPECT_GE(session.tokens_seen(), prompt_tokens + received);
  EXPECT_LT(session.tokens_seen(), prompt_tokens + 4000);
  std::printf("cancel: received %d tokens, session has %lld beyond prompt, stopped in %s\n",
              received, static_cast<long long>(session.tokens_seen() - prompt_tokens),
              absl::FormatDuration(stop_latency).c_str());
  WaitEngineIdle(server_.server());
}

TEST_F(GenerateTest, DeadlineExceededStopsGeneration) {
  StreamResult result =
      GenerateAll(*generation_, Request("deadline", 4000), absl::Milliseconds(100));
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << result.status.error_message();
  EXPECT_LT(result.tokens, 4000);
  WaitEngineIdle(server_.server());
}

TEST_F(GenerateTest, ManyStreamsWithCancelsAndDeadlinesAllEnd) {
  // Every way a stream can end, at once: completion, client cancel after a few chunks,
  // deadlines mid-stream. Each call must end with the expected kind of status, the engine must
  // go idle, and the server must then drain promptly (a reactor that never finished would
  // hang Drain).
  constexpr int kThreads = 8;
  constexpr int kStreamsPerThread = 6;
  std::atomic<int> unexpected{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kStreamsPerThread; ++i) {
        const int kind = (t + i) % 3;
        v1::GenerateRequest request = Request(absl::StrCat("stress ", t, " ", i), 300);
        std::unique_ptr<grpc::ClientContext> context =
            ContextWithTimeout(kind == 2 ? absl::Milliseconds(5 + 7 * i) : absl::Seconds(60));
        auto reader = generation_->Generate(context.get(), request);
        v1::GenerateResponse chunk;
        int chunks = 0;
        while (reader->Read(&chunk)) {
          if (kind == 1 && ++chunks == 1 + i) context->TryCancel();
        }
        const grpc::StatusCode code = reader->Finish().error_code();
        const bool expected = code == grpc::StatusCode::OK ||
                              (kind == 1 && code == grpc::StatusCode::CANCELLED) ||
                              (kind == 2 && code == grpc::StatusCode::DEADLINE_EXCEEDED);
        if (!expected) {
          ++unexpected;
          ADD_FAILURE() << "kind " << kind << " ended with code " << code;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(unexpected.load(), 0);
  WaitEngineIdle(server_.server());
  const absl::Time start = absl::Now();
  server_.server().Drain(absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

struct BadInput {
  const char* name;
  std::function<void(v1::GenerateRequest&)> mutate;
  const char* field;  // the message must name it
};

TEST_F(GenerateTest, BadInputIsInvalidArgumentNamingTheField) {
  const std::vector<BadInput> cases = {
      {"negative temperature",
       [](v1::GenerateRequest& r) { r.mutable_sampling()->set_temperature(-0.5f); }, "temperature"},
      {"top_p 0", [](v1::GenerateRequest& r) { r.mutable_sampling()->set_top_p(0.0f); }, "top_p"},
      {"top_p 1.5", [](v1::GenerateRequest& r) { r.mutable_sampling()->set_top_p(1.5f); }, "top_p"},
      {"negative top_k", [](v1::GenerateRequest& r) { r.mutable_sampling()->set_top_k(-1); },
       "top_k"},
      {"repetition_penalty 0",
       [](v1::GenerateRequest& r) { r.mutable_sampling()->set_repetition_penalty(0.0f); },
       "repetition_penalty"},
      {"max_new_tokens above the cap", [](v1::GenerateRequest& r) { r.set_max_new_tokens(4097); },
       "max_new_tokens"},
      {"negative max_new_tokens", [](v1::GenerateRequest& r) { r.set_max_new_tokens(-1); },
       "max_new_tokens"},
      {"empty prompt without a session", [](v1::GenerateRequest& r) { r.clear_prompt(); },
       "prompt"},
      {"too many logprobs", [](v1::GenerateRequest& r) { r.set_logprobs(21); }, "logprobs"},
      {"empty stop string", [](v1::GenerateRequest& r) { r.add_stop(""); }, "stop"},
      {"early_exit threshold 1.5",
       [](v1::GenerateRequest& r) { r.mutable_early_exit()->set_threshold(1.5f); },
       "early_exit.threshold"},
      {"early_exit measure of an unknown value",
       [](v1::GenerateRequest& r) {
         r.mutable_early_exit()->set_enabled(true);
         r.mutable_early_exit()->set_measure(static_cast<v1::ExitMeasure>(9));
       },
       "early_exit.measure"},
      {"early_exit on the classifier of a model without one",
       [](v1::GenerateRequest& r) {
         r.mutable_early_exit()->set_enabled(true);
         r.mutable_early_exit()->set_threshold(0.5f);
         r.mutable_early_exit()->set_measure(v1::EXIT_MEASURE_CLASSIFIER);
       },
       "early_exit.measure"},
      // The test model is uncalibrated: no threshold to fall back on, for any measure.
      {"early_exit without a threshold on an uncalibrated model",
       [](v1::GenerateRequest& r) { r.mutable_early_exit()->set_enabled(true); },
       "early_exit.threshold must be set for measure softmax"},
      {"early_exit saturation without a threshold on an uncalibrated model",
       [](v1::GenerateRequest& r) {
         r.mutable_early_exit()->set_enabled(true);
         r.mutable_early_exit()->set_measure(v1::EXIT_MEASURE_HIDDEN_SATURATION);
       },
       "early_exit.threshold must be set for measure saturation"},
      {"knn_lm lambda 2", [](v1::GenerateRequest& r) { r.mutable_knn_lm()->set_lambda(2.0f); },
       "knn_lm.lambda"},
  };
  for (const BadInput& bad : cases) {
    v1::GenerateRequest request = Request("valid prompt", 8);
    bad.mutate(request);
    StreamResult result = GenerateAll(*generation_, request);
    EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad.name;
    EXPECT_TRUE(absl::StrContains(result.status.error_message(), bad.field))
        << bad.name << ": " << result.status.error_message();
    EXPECT_TRUE(result.chunks.empty()) << bad.name;
  }
}

// Sends raw bytes as a Generate request; returns the call's status.
grpc::Status GenerateRaw(const std::shared_ptr<grpc::Channel>& channel, const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  auto call = stub.PrepareCall(&context, "/mnemo.v1.Generation/Generate", &cq);
  auto step = [&cq] {
    void* tag;
    bool ok = false;
    cq.Next(&tag, &ok);
    return ok;
  };
  call->StartCall(nullptr);
  step();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, nullptr);
  step();
  call->WritesDone(nullptr);
  step();
  grpc::ByteBuffer response;
  do {
    call->Read(&response, nullptr);
  } while (step());
  grpc::Status status;
  call->Finish(&status, nullptr);
  step();
  cq.Shutdown();
  return status;
}

// A length-delimited field: tag byte, one-byte length (short values only), bytes.
std::string Field(char tag, const std::string& value) {
  return std::string(1, tag) + static_cast<char>(value.size()) + value;
}

TEST_F(GenerateTest, NonUtf8TextIsInvalidArgumentNamingTheField) {
  // protobuf C++ will not build such a request without complaint, so write the bytes by hand:
  // what any client that sends raw bytes in a string field produces.
  const std::string bad = "bad \xff\xfe bytes";
  const std::string max_new_tokens = "\x18\x08";  // field 3, varint 8
  struct Case {
    std::string bytes;
    const char* field;
  };
  const Case cases[] = {
      {Field('\x12', bad) + max_new_tokens, "prompt"},                      // field 2
      {Field('\x12', "ok") + Field('\x2a', bad) + max_new_tokens, "stop"},  // field 5
      {Field('\x12', "ok") + Field('\x42', Field('\x0a', bad)), "knn_lm.datastore"},
  };
  for (const Case& c : cases) {
    const grpc::Status status = GenerateRaw(server_.channel(), c.bytes);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_EQ(status.error_message(), std::string(c.field) + " is not valid UTF-8");
  }
  const grpc::Status garbage = GenerateRaw(server_.channel(), "\x12\x7f");  // truncated
  EXPECT_EQ(garbage.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(garbage.error_message(), "mnemo.v1.GenerateRequest"))
      << garbage.error_message();

  // Score takes the same path.
  grpc::GenericStub stub(server_.channel());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  grpc::Slice slice(Field('\x12', bad));  // ScoreRequest.text
  grpc::ByteBuffer request(&slice, 1), response;
  absl::Notification done;
  grpc::Status score_status;
  stub.UnaryCall(&context, "/mnemo.v1.Generation/Score", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   score_status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  EXPECT_EQ(score_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(score_status.error_message(), "text is not valid UTF-8");

  // The engine's own check (for callers that do not come through protobuf) names it too.
  engine::GenerateOptions options;
  options.prompt = bad;
  options.max_new_tokens = 4;
  absl::Status submitted =
      server_.server().engine()->Submit(options, std::make_shared<engine::GenerateStream>());
  EXPECT_EQ(submitted.code(), absl::StatusCode::kInvalidArgument) << submitted;
  EXPECT_TRUE(absl::StrContains(submitted.message(), "prompt")) << submitted;
}

TEST_F(GenerateTest, UnknownSessionIsNotFound) {
  v1::GenerateRequest request = Request("hello", 8);
  request.set_session_id("no-such-session");
  StreamResult result = GenerateAll(*generation_, request);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::NOT_FOUND)
      << result.status.error_message();
  EXPECT_TRUE(absl::StrContains(result.status.error_message(), "no-such-session"))
      << result.status.error_message();
}

TEST_F(GenerateTest, ScoreAndTokenize) {
  v1::TokenizeRequest tokenize;
  tokenize.set_text("h\xc3\xa9llo");  // 5 characters, 6 bytes
  v1::TokenizeResponse tokens;
  grpc::Status status =
      generation_->Tokenize(ContextWithTimeout(absl::Seconds(10)).get(), tokenize, &tokens);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(tokens.ids_size(), 6);
  EXPECT_EQ(tokens.pieces_size(), 6);

  v1::ScoreRequest score;
  score.set_text("hello world");
  score.set_token_logprobs(true);
  v1::ScoreResponse scored;
  status = generation_->Score(ContextWithTimeout(absl::Seconds(30)).get(), score, &scored);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(scored.token_count(), 11);
  EXPECT_EQ(scored.byte_count(), 11);
  EXPECT_LT(scored.total_logprob(), 0.0);
  EXPECT_GT(scored.bits_per_byte(), 0.0);
  EXPECT_EQ(scored.logprobs_size(), 11);

  score.set_session_id("no-such-session");
  status = generation_->Score(ContextWithTimeout(absl::Seconds(30)).get(), score, &scored);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  score.clear_session_id();
  score.clear_text();
  status = generation_->Score(ContextWithTimeout(absl::Seconds(30)).get(), score, &scored);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "text")) << status.error_message();
}

// Ids instead of text (issue 21): with a BOS in front they are the text's tokens on a fresh
// sequence, so Generate and Score agree with the text; bad ids are refused naming the index.
TEST_F(GenerateTest, PromptTokenIdsAndScoreTokenIds) {
  const std::string prompt = "The quick brown fox";
  v1::TokenizeRequest tokenize;
  tokenize.set_text(prompt);
  tokenize.set_add_special_tokens(true);
  v1::TokenizeResponse tokens;
  grpc::Status status =
      generation_->Tokenize(ContextWithTimeout(absl::Seconds(10)).get(), tokenize, &tokens);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(tokens.ids_size(), static_cast<int>(prompt.size()) + 1);
  EXPECT_EQ(tokens.ids(0), 256);  // the byte tokenizer's BOS
  EXPECT_EQ(tokens.pieces(0), "");

  v1::GenerateRequest by_text = Request(prompt, 24);
  by_text.mutable_sampling()->set_temperature(0.8f);
  v1::GenerateRequest by_ids = by_text;
  by_ids.clear_prompt();
  by_ids.mutable_prompt_token_ids()->CopyFrom(tokens.ids());
  StreamResult text_result = GenerateAll(*generation_, by_text);
  StreamResult ids_result = GenerateAll(*generation_, by_ids);
  ASSERT_TRUE(ids_result.status.ok()) << ids_result.status.error_message();
  EXPECT_EQ(ids_result.text, text_result.text);
  EXPECT_EQ(ids_result.chunks.back().usage().prompt_tokens(), tokens.ids_size());

  by_ids.add_prompt_token_ids(259);
  StreamResult bad = GenerateAll(*generation_, by_ids);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(bad.status.error_message(),
                                absl::StrCat("prompt_token_ids[", tokens.ids_size(), "] = 259")))
      << bad.status.error_message();
  by_ids.set_prompt(prompt);  // both
  bad = GenerateAll(*generation_, by_ids);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::ScoreRequest score_text;
  score_text.set_text(prompt);
  score_text.set_token_logprobs(true);
  v1::ScoreRequest score_ids;
  score_ids.mutable_token_ids()->CopyFrom(tokens.ids());
  score_ids.set_token_logprobs(true);
  v1::ScoreResponse text_scored, ids_scored;
  status = generation_->Score(ContextWithTimeout(absl::Seconds(30)).get(), score_text,
                              &text_scored);
  ASSERT_TRUE(status.ok()) << status.error_message();
  status =
      generation_->Score(ContextWithTimeout(absl::Seconds(30)).get(), score_ids, &ids_scored);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ids_scored.token_count(), static_cast<int64_t>(prompt.size()));  // BOS is context
  EXPECT_EQ(ids_scored.byte_count(), static_cast<int64_t>(prompt.size()));
  EXPECT_NEAR(ids_scored.total_logprob(), text_scored.total_logprob(), 1e-4);
  EXPECT_NEAR(ids_scored.bits_per_byte(), text_scored.bits_per_byte(), 1e-5);
  ASSERT_EQ(ids_scored.logprobs_size(), text_scored.logprobs_size());

  score_ids.set_token_ids(1, -7);
  status =
      generation_->Score(ContextWithTimeout(absl::Seconds(30)).get(), score_ids, &ids_scored);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "token_ids[1] = -7"))
      << status.error_message();
}

TEST_F(GenerateTest, SamplingKnobsAndStopTokenIds) {
  v1::GenerateRequest request = Request("abc", 8);
  request.mutable_sampling()->set_temperature(0.0f);
  (*request.mutable_sampling()->mutable_logit_bias())['x'] = 100.0f;
  StreamResult result = GenerateAll(*generation_, request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.text, "xxxxxxxx");
  // 'x' is also a stop token: it is emitted, and the stream ends with STOP.
  request.add_stop_token_ids('x');
  result = GenerateAll(*generation_, request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.text, "x");
  EXPECT_EQ(result.chunks.back().finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(result.chunks.back().usage().generated_tokens(), 1);

  struct Case {
    std::function<void(v1::SamplingParams*)> set;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::SamplingParams* s) { s->set_min_p(1.5f); }, "sampling.min_p"},
      {[](v1::SamplingParams* s) { s->set_presence_penalty(-2.5f); },
       "sampling.presence_penalty"},
      {[](v1::SamplingParams* s) { s->set_frequency_penalty(3.0f); },
       "sampling.frequency_penalty"},
      {[](v1::SamplingParams* s) { (*s->mutable_logit_bias())[400] = 1.0f; },
       "sampling.logit_bias[400]"},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest bad = Request("abc", 4);
    c.set(bad.mutable_sampling());
    StreamResult r = GenerateAll(*generation_, bad);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_TRUE(absl::StrContains(r.status.error_message(), c.field))
        << c.field << ": " << r.status.error_message();
  }
}

TEST_F(GenerateTest, Detokenize) {
  v1::DetokenizeRequest request;
  for (int id : {256, int{'h'}, 0xC3, 0xA9, 257}) request.add_ids(id);
  v1::DetokenizeResponse response;
  grpc::Status status =
      generation_->Detokenize(ContextWithTimeout(absl::Seconds(10)).get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.text(), "<|bos|>h\xC3\xA9<|eos|>");
  request.set_skip_special_tokens(true);
  status =
      generation_->Detokenize(ContextWithTimeout(absl::Seconds(10)).get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.text(), "h\xC3\xA9");
  request.add_ids(1000);
  status =
      generation_->Detokenize(ContextWithTimeout(absl::Seconds(10)).get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "ids[5] = 1000"))
      << status.error_message();
}

}  // namespace
}  // namespace mnemo::server::testing
