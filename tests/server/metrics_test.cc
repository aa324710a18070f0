// Metrics and its /metrics endpoint, without an engine: values, gauge refresh on scrape,
// HTTP behaviour, and promtool's verdict on the text format.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/server/test_server.h"

namespace mnemo::server {
namespace {

using testing::HttpGet;
using testing::RunCommand;

TEST(MetricsTest, RecordsAndRefreshesGaugesOnScrape) {
  absl::StatusOr<std::unique_ptr<Metrics>> created = Metrics::Create("");
  ASSERT_TRUE(created.ok()) << created.status();
  Metrics& metrics = **created;
  EXPECT_EQ(metrics.port(), 0);

  engine::EngineStats stats;
  stats.running = 2;
  stats.waiting = 3;
  stats.sessions = 4;
  stats.session_memory_bytes = 5000;
  stats.sessions_evicted_total = 6;
  metrics.SetStatsSource([&stats] { return stats; });

  metrics.CountRequest("Generate", "OK");
  metrics.CountRequest("Generate", "OK");
  metrics.CountRequest("Score", "NOT_FOUND");
  metrics.ObserveTimeToFirstToken(absl::Milliseconds(20));
  metrics.ObserveTokens(4, absl::Milliseconds(8));
  engine::GenerateFinal final;
  final.reason = engine::FinishReason::kLength;
  final.usage.prompt_tokens = 10;
  final.usage.generated_tokens = 5;
  metrics.ObserveGenerateFinal(final, absl::Milliseconds(50));

  std::string text = metrics.TextFormat();
  EXPECT_TRUE(absl::StrContains(text, "mnemo_requests_total{code=\"OK\",rpc=\"Generate\"} 2"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "mnemo_requests_total{code=\"NOT_FOUND\",rpc=\"Score\"} 1"));
  EXPECT_TRUE(absl::StrContains(text, "mnemo_generate_requests_total{finish_reason=\"length\"} 1"));
  EXPECT_TRUE(absl::StrContains(text, "mnemo_prompt_tokens_total 10\n"));
  EXPECT_TRUE(absl::StrContains(text, "mnemo_generated_tokens_total 5\n"));
  EXPECT_TRUE(absl::StrContains(text, "mnemo_inter_token_latency_seconds_count 4\n"));
  EXPECT_TRUE(absl::StrContains(text, "mnemo_requests_running 2\n"));
  EXPECT_TRUE(absl::StrContains(text, "mnemo_requests_waiting 3\n"));
  EXPECT_TRUE(absl::StrContains(text, "mnemo_sessions 4\n"));
  EXPECT_TRUE(absl::StrContains(text, "mnemo_session_memory_bytes 5000\n"));
  EXPECT_TRUE(absl::StrContains(text, "mnemo_sessions_evicted_total 6\n"));

  // The engine's absolute eviction count becomes a monotonic counter.
  stats.sessions = 1;
  stats.sessions_evicted_total = 9;
  text = metrics.TextFormat();
  EXPECT_TRUE(absl::StrContains(text, "mnemo_sessions 1\n"));
  EXPECT_TRUE(absl::StrContains(text, "mnemo_sessions_evicted_total 9\n"));
  metrics.SetStatsSource(nullptr);
}

TEST(MetricsTest, ServesMetricsOverHttpAndPassesPromtool) {
  std::string which;
  if (RunCommand("command -v curl && command -v promtool", &which) != 0) {
    GTEST_SKIP() << "curl or promtool not installed";
  }
  absl::StatusOr<std::unique_ptr<Metrics>> created = Metrics::Create("127.0.0.1:0");
  ASSERT_TRUE(created.ok()) << created.status();
  Metrics& metrics = **created;
  ASSERT_GT(metrics.port(), 0);
  metrics.CountRequest("Generate", "OK");
  metrics.ObserveTimeToFirstToken(absl::Milliseconds(3));

  std::string body;
  ASSERT_EQ(HttpGet(metrics.port(), "/metrics", &body), 200);
  EXPECT_TRUE(absl::StrContains(body, "mnemo_time_to_first_token_seconds_count 1")) << body;
  std::string other;
  EXPECT_EQ(HttpGet(metrics.port(), "/", &other), 404);
  EXPECT_EQ(HttpGet(metrics.port(), "/metrics", &other, "POST"), 405);
  ASSERT_EQ(HttpGet(metrics.port(), "/metrics?x=1", &other), 200);

  const std::string file = ::testing::TempDir() + "mnemo_metrics_test.txt";
  std::ofstream(file) << body;
  std::string output;
  EXPECT_EQ(RunCommand(absl::StrCat("promtool check metrics < ", file), &output), 0)
      << output << body;
}

TEST(MetricsTest, BadListenAddressIsAClearError) {
  absl::StatusOr<std::unique_ptr<Metrics>> created = Metrics::Create("127.0.0.1:0");
  ASSERT_TRUE(created.ok());
  const std::string taken = absl::StrCat("127.0.0.1:", (*created)->port());
  absl::StatusOr<std::unique_ptr<Metrics>> clash = Metrics::Create(taken);
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(clash.status().message(), taken)) << clash.status();
  EXPECT_FALSE(Metrics::Create("no-port").ok());
}

}  // namespace
}  // namespace mnemo::server
