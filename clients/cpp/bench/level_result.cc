#include "clients/cpp/bench/level_result.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "mnemo/v1/generation.pb.h"

namespace mnemo::bench {
namespace {

// At most this many timeline buckets: the bucket is the first "round" size that fits.
constexpr int kMaxTimelineBuckets = 120;
constexpr double kBucketSizes[] = {0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600};

double BucketSize(double window_s) {
  for (double size : kBucketSizes) {
    if (window_s / size <= kMaxTimelineBuckets) return size;
  }
  return std::ceil(window_s / kMaxTimelineBuckets);
}

void AddError(std::map<std::string, ErrorSummary>& errors, const RequestRecord& record) {
  ErrorSummary& summary = errors[StatusCodeName(record.code)];
  if (summary.count++ == 0) summary.first_message = record.message;
}

}  // namespace

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double rank = std::ceil(p / 100.0 * static_cast<double>(sorted.size()));
  const size_t index = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

Distribution Summarize(std::vector<double>& samples) {
  Distribution d;
  if (samples.empty()) return d;
  std::sort(samples.begin(), samples.end());
  d.count = static_cast<int64_t>(samples.size());
  double sum = 0;
  for (double s : samples) sum += s;
  d.mean = sum / static_cast<double>(samples.size());
  d.p50 = Percentile(samples, 50);
  d.p90 = Percentile(samples, 90);
  d.p99 = Percentile(samples, 99);
  d.max = samples.back();
  return d;
}

std::string StatusCodeName(int code) {
  // gRPC and Abseil share the canonical code numbers.
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

std::string FinishReasonName(int reason) {
  std::string name = v1::FinishReason_Name(static_cast<v1::FinishReason>(reason));
  constexpr absl::string_view kPrefix = "FINISH_REASON_";
  if (absl::StartsWith(name, kPrefix)) name = name.substr(kPrefix.size());
  return name.empty() ? std::to_string(reason) : name;
}

LevelResult Aggregate(const LevelRecords& level) {
  LevelResult r;
  r.config = level.config;
  r.stopped = level.stopped;
  r.session_delete_failures = level.session_delete_failures;
  r.warmup_requests = level.warmup_requests;
  for (const RequestRecord& record : level.warmup_failures) AddError(r.warmup_errors, record);

  std::vector<double> ttft, itl, latency;
  int64_t layer_sum = 0, layer_tokens = 0;
  for (const RequestRecord& record : level.records) {
    ++r.requests;
    r.window_s = std::max(r.window_s, record.end_s);
    r.output_tokens += record.output_tokens;
    if (r.exit_layer_counts.size() < record.exit_layer_counts.size()) {
      r.exit_layer_counts.resize(record.exit_layer_counts.size(), 0);
    }
    for (size_t layer = 0; layer < record.exit_layer_counts.size(); ++layer) {
      r.exit_layer_counts[layer] += record.exit_layer_counts[layer];
      if (layer > 0) {
        layer_sum += static_cast<int64_t>(layer) * record.exit_layer_counts[layer];
        layer_tokens += record.exit_layer_counts[layer];
      }
    }
    if (!record.ok()) {
      ++r.failed;
      AddError(r.errors, record);
      continue;
    }
    ++r.ok;
    r.usage_generated_tokens += record.usage_generated_tokens;
    r.usage_prompt_tokens += record.usage_prompt_tokens;
    ++r.finish_reasons[FinishReasonName(record.finish_reason)];
    latency.push_back(record.end_s - record.start_s);
    double previous = 0;
    for (size_t i = 0; i < record.chunks.size(); ++i) {
      const ChunkArrival& chunk = record.chunks[i];
      if (i == 0) {
        ttft.push_back(chunk.time_s - record.start_s);
      } else {
        itl.push_back(chunk.time_s - previous);
      }
      for (int extra = 1; extra < chunk.tokens; ++extra) itl.push_back(0.0);
      previous = chunk.time_s;
    }
  }
  r.ttft = Summarize(ttft);
  r.itl = Summarize(itl);
  r.latency = Summarize(latency);
  r.ttft_sorted = std::move(ttft);
  r.itl_sorted = std::move(itl);
  r.exit_layer_mean = layer_tokens > 0 ? static_cast<double>(layer_sum) / layer_tokens : 0;
  if (r.window_s > 0) {
    r.output_tokens_per_s = static_cast<double>(r.output_tokens) / r.window_s;
    r.requests_per_s = static_cast<double>(r.requests) / r.window_s;
  }
  if (level.phase_wall_s > 0) {
    r.client_cpu_s = level.client_cpu_s;
    r.client_cpu_percent = 100.0 * level.client_cpu_s / level.phase_wall_s;
  }

  r.timeline_bucket_s = BucketSize(r.window_s);
  const size_t buckets =
      r.window_s > 0 ? static_cast<size_t>(std::ceil(r.window_s / r.timeline_bucket_s)) : 0;
  r.timeline_tokens_per_s.assign(buckets, 0.0);
  for (const RequestRecord& record : level.records) {
    for (const ChunkArrival& chunk : record.chunks) {
      if (buckets == 0) break;
      const size_t bucket = std::min(
          buckets - 1, static_cast<size_t>(std::max(0.0, chunk.time_s) / r.timeline_bucket_s));
      r.timeline_tokens_per_s[bucket] += chunk.tokens;
    }
  }
  if (buckets > 1) {
    // A last bucket covering under half a bucket joins the one before, so a few tokens in a
    // sliver of time do not draw a spike.
    const double last_covered = r.window_s - static_cast<double>(buckets - 1) * r.timeline_bucket_s;
    if (last_covered < 0.5 * r.timeline_bucket_s) {
      r.timeline_tokens_per_s[buckets - 2] += r.timeline_tokens_per_s[buckets - 1];
      r.timeline_tokens_per_s.pop_back();
    }
  }
  for (size_t i = 0; i < r.timeline_tokens_per_s.size(); ++i) {
    const bool last = i + 1 == r.timeline_tokens_per_s.size();
    const double covered =
        last ? r.window_s - static_cast<double>(i) * r.timeline_bucket_s : r.timeline_bucket_s;
    r.timeline_tokens_per_s[i] /= std::max(covered, 1e-9);
  }
  return r;
}

}  // namespace mnemo::bench
