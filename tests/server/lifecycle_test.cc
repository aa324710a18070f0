// Server lifecycle on loopback: health while loading / serving / draining, graceful drain,
// and the Prometheus endpoint (scraped over HTTP, checked by promtool).
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/server/test_server.h"

namespace mnemo::server::testing {
namespace {

v1::GenerateRequest LongRequest(int max_new_tokens) {
  v1::GenerateRequest request;
  request.set_prompt("a long stream");
  request.set_max_new_tokens(max_new_tokens);
  request.set_stop_at_eos(false);
  request.set_logprobs(20);  // large chunks: the stream cannot finish unless the client reads
  return request;
}

// Polls health until `service` reports `want` or 10 s pass; returns the last answer.
std::string WaitHealth(grpc::health::v1::Health::Stub& stub, const std::string& service,
                       const std::string& want) {
  std::string got;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    got = HealthOf(stub, service);
    if (got == want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (absl::Now() < deadline);
  return got;
}

TEST(LifecycleTest, HealthIsNotServingWhileLoadingThenServing) {
  TestServerOptions options;
  options.load = false;
  TestServer server(options);
  auto health = server.health();
  EXPECT_EQ(HealthOf(*health, kReadinessService), "NOT_SERVING");

  auto generation = server.generation();
  v1::GenerateRequest request = LongRequest(4);
  StreamResult early = GenerateAll(*generation, request);
  EXPECT_EQ(early.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(early.status.error_message(), "loading"))
      << early.status.error_message();

  ASSERT_TRUE(server.server().LoadEngine(TinyEngineConfig()).ok());
  EXPECT_EQ(HealthOf(*health, kReadinessService), "SERVING");
  EXPECT_EQ(HealthOf(*health, ""), "SERVING");
  StreamResult ready = GenerateAll(*generation, request);
  EXPECT_TRUE(ready.status.ok()) << ready.status.error_message();
}

TEST(LifecycleTest, LoadFailureNamesTheProblem) {
  TestServerOptions options;
  options.load = false;
  TestServer server(options);
  engine::EngineConfig config = TinyEngineConfig();
  config.model_dir = "/nonexistent/model/dir";
  absl::Status status = server.server().LoadEngine(config);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), "/nonexistent/model/dir")) << status;
  EXPECT_EQ(HealthOf(*server.health(), kReadinessService), "NOT_SERVING");
}

TEST(LifecycleTest, DrainLetsInFlightStreamsFinishAndRejectsNewCalls) {
  TestServer server;
  auto generation = server.generation();
  auto health = server.health();

  std::unique_ptr<grpc::ClientContext> context = ContextWithTimeout(absl::Seconds(60));
  auto reader = generation->Generate(context.get(), LongRequest(1500));
  v1::GenerateResponse chunk;
  ASSERT_TRUE(reader->Read(&chunk));
  int tokens = chunk.tokens_size();

  const absl::Time drain_start = absl::Now();
  std::thread drain([&] { server.server().Drain(absl::Seconds(30)); });

  EXPECT_EQ(WaitHealth(*health, kReadinessService, "NOT_SERVING"), "NOT_SERVING");
  EXPECT_EQ(HealthOf(*health, ""), "NOT_SERVING");
  StreamResult rejected = GenerateAll(*generation, LongRequest(4));
  EXPECT_EQ(rejected.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(rejected.status.error_message(), "server is draining"))
      << rejected.status.error_message();
  v1::ListModelsResponse models;
  grpc::Status unary = server.models()->ListModels(ContextWithTimeout(absl::Seconds(10)).get(),
                                                   v1::ListModelsRequest(), &models);
  EXPECT_EQ(unary.error_code(), grpc::StatusCode::UNAVAILABLE);

  // The stream that was running completes normally.
  v1::GenerateResponse last;
  while (reader->Read(&chunk)) {
    tokens += chunk.tokens_size();
    last = chunk;
  }
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(tokens, 1500);
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_LENGTH);
  drain.join();
  EXPECT_LT(absl::Now() - drain_start, absl::Seconds(30));  // returned once idle, not at grace
}

TEST(LifecycleTest, DrainCancelsStreamsStillRunningAfterTheGracePeriod) {
  TestServer server;
  // A client that buffers at most ~64 KB it has not read: without that, gRPC's window grows
  // (BDP probing) until the whole answer fits, and a fast machine streams all of it within the
  // grace period. With it the stream cannot finish while the client does not read, however
  // fast the engine is.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 * 1024);
  auto generation = v1::Generation::NewStub(
      grpc::CreateCustomChannel(server.address(), grpc::InsecureChannelCredentials(), args));
  std::unique_ptr<grpc::ClientContext> context = ContextWithTimeout(absl::Seconds(60));
  auto reader = generation->Generate(context.get(), LongRequest(4000));
  v1::GenerateResponse chunk;
  ASSERT_TRUE(reader->Read(&chunk));

  const absl::Time start = absl::Now();
  server.server().Drain(absl::Milliseconds(300));  // the client is not reading
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Seconds(10));
  int tokens = chunk.tokens_size();
  while (reader->Read(&chunk)) tokens += chunk.tokens_size();
  const grpc::Status status = reader->Finish();
  EXPECT_FALSE(status.ok());
  EXPECT_LT(tokens, 4000);
  // The engine closed the stream before the reactor finished; its gauges follow within a step.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (server.server().engine()->Stats().running != 0 && absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(server.server().engine()->Stats().running, 0);
}

// The value of an unlabelled sample `name` in Prometheus text output, or -1.
double Sample(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (absl::StartsWith(line, name + " ")) return std::atof(line.c_str() + name.size() + 1);
  }
  return -1;
}

TEST(LifecycleTest, MetricsScrapeIsValidPrometheus) {
  std::string which;
  if (RunCommand("command -v curl && command -v promtool", &which) != 0) {
    GTEST_SKIP() << "curl or promtool not installed";
  }
  TestServerOptions options;
  options.metrics_endpoint = true;
  TestServer server(options);
  ASSERT_GT(server.server().metrics_port(), 0);
  auto sessions = server.sessions();
  CreateSession(*sessions, "metrics");
  v1::GenerateRequest request = LongRequest(8);
  request.set_session_id("metrics");
  StreamResult result = GenerateAll(*server.generation(), request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  v1::GenerateRequest bad = LongRequest(8);
  bad.mutable_sampling()->set_temperature(-1);
  EXPECT_FALSE(GenerateAll(*server.generation(), bad).status.ok());

  const std::string file = ::testing::TempDir() + "mnemo_metrics_scrape.txt";
  std::string output;
  ASSERT_EQ(RunCommand(absl::StrCat("curl -sf -o ", file, " http://127.0.0.1:",
                                    server.server().metrics_port(), "/metrics"),
                       &output),
            0)
      << output;
  std::ifstream in(file);
  const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* name :
       {"mnemo_time_to_first_token_seconds_bucket", "mnemo_inter_token_latency_seconds_bucket",
        "mnemo_request_duration_seconds_count", "mnemo_queue_time_seconds_sum",
        "mnemo_token_exit_layer_bucket", "mnemo_requests_running", "mnemo_requests_waiting",
        "mnemo_session_memory_bytes", "mnemo_sessions_evicted_total"}) {
    EXPECT_TRUE(absl::StrContains(body, name)) << name;
  }
  EXPECT_EQ(Sample(body, "mnemo_generated_tokens_total"), 8);
  EXPECT_EQ(Sample(body, "mnemo_prompt_tokens_total"), 13);
  EXPECT_EQ(Sample(body, "mnemo_sessions"), 1);
  EXPECT_GT(Sample(body, "mnemo_session_memory_bytes"), 0);
  EXPECT_EQ(Sample(body, "mnemo_time_to_first_token_seconds_count"), 1);
  EXPECT_TRUE(absl::StrContains(body, "mnemo_generate_requests_total{finish_reason=\"length\"} 1"))
      << body;
  EXPECT_TRUE(absl::StrContains(body, "rpc=\"Generate\"") &&
              absl::StrContains(body, "code=\"INVALID_ARGUMENT\""))
      << body;

  ASSERT_EQ(RunCommand(absl::StrCat("promtool check metrics < ", file), &output), 0)
      << output << body;
}

}  // namespace
}  // namespace mnemo::server::testing
