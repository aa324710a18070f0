// LevelResult: the aggregate numbers of one load level, computed from its RequestRecords.
//
// Definitions (docs/bench.md explains them for users):
// - window_s: from the start of the measured phase to the end of its last request. Output
//   tokens/s and requests/s divide by it; warmup is outside it.
// - output_tokens: tokens received in the window, failed requests included.
// - TTFT: request sent -> first chunk carrying a token. ITL: time between consecutive tokens
//   of a request; a chunk carrying k tokens adds its gap to the previous chunk once and k-1
//   gaps of 0 (those tokens arrived together), so a request of n tokens gives n-1 gaps.
//   Latency: request sent -> final status. All three from successful requests only.
// - Percentiles are nearest-rank: pXX is the smallest sample >= XX% of the samples.
// Plain data; Aggregate is a pure function.
#ifndef MNEMO_CLIENTS_CPP_BENCH_LEVEL_RESULT_H_
#define MNEMO_CLIENTS_CPP_BENCH_LEVEL_RESULT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "clients/cpp/bench/load_config.h"
#include "clients/cpp/bench/load_runner.h"

namespace mnemo::bench {

// Summary of a sample of durations, in seconds; all zero when count == 0.
struct Distribution {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};

// Sorts `samples` in place and summarises them.
Distribution Summarize(std::vector<double>& samples);

// Nearest-rank percentile of sorted samples, p in (0, 100]; 0 when empty.
double Percentile(const std::vector<double>& sorted, double p);

struct ErrorSummary {
  int64_t count = 0;
  std::string first_message;
};

struct LevelResult {
  LoadConfig config;
  StopReason stopped = StopReason::kNone;

  int64_t requests = 0, ok = 0, failed = 0;
  double window_s = 0;
  int64_t output_tokens = 0;
  int64_t usage_generated_tokens = 0;  // as the servers' usage reported (successful requests)
  int64_t usage_prompt_tokens = 0;
  double output_tokens_per_s = 0;
  double requests_per_s = 0;

  Distribution ttft, itl, latency;
  std::vector<double> ttft_sorted, itl_sorted;  // the samples, ascending (for the CDF plot)

  std::vector<int64_t> exit_layer_counts;  // [layer] tokens; index 0 = not reported
  double exit_layer_mean = 0;              // over tokens that reported a layer

  std::map<std::string, int64_t> finish_reasons;       // "LENGTH" -> count (successful requests)
  std::map<std::string, ErrorSummary> errors;          // gRPC code name -> count, first message
  int64_t warmup_requests = 0;
  std::map<std::string, ErrorSummary> warmup_errors;

  double client_cpu_s = 0;
  double client_cpu_percent = 0;  // of one core, over the measured phase

  // Output tokens/s in consecutive buckets of timeline_bucket_s from the window's start.
  double timeline_bucket_s = 1;
  std::vector<double> timeline_tokens_per_s;

  int session_delete_failures = 0;
};

LevelResult Aggregate(const LevelRecords& level);

// "UNAVAILABLE", "LENGTH": names as users see them.
std::string StatusCodeName(int code);
std::string FinishReasonName(int reason);

}  // namespace mnemo::bench

#endif  // MNEMO_CLIENTS_CPP_BENCH_LEVEL_RESULT_H_
