// LoadConfig: what one load level of mnemo-bench sends (one concurrency level of a sweep).
//
// Plain data, filled by main.cc from the flags and validated there; the runner only reads it.
#ifndef MNEMO_CLIENTS_CPP_BENCH_LOAD_CONFIG_H_
#define MNEMO_CLIENTS_CPP_BENCH_LOAD_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace mnemo::bench {

enum class SessionMode {
  kFresh,  // every request is a one-shot Generate (empty session_id: a fresh, discarded memory)
  kReuse,     // each stream creates one session and sends all its requests on it
  kRemember,  // as kReuse, the sessions created with remember (recall on; docs/recall.md)
};

inline const char* SessionModeName(SessionMode mode) {
  return mode == SessionMode::kReuse      ? "reuse"
         : mode == SessionMode::kRemember ? "remember"
                                          : "fresh";
}

struct LoadConfig {
  int concurrency = 1;  // streams, each with at most one request in flight
  // Exactly one of the two ends the measured phase: a request count per stream, or a wall
  // time after which streams start no new request (those in flight finish and are counted).
  int requests_per_stream = 0;
  absl::Duration duration = absl::ZeroDuration();
  int warmup_per_stream = 0;  // requests per stream before measuring; not in the results

  int max_new_tokens = 64;
  std::string api_key;  // sent with every Generate as `authorization: Bearer KEY`; "" = none
  SessionMode sessions = SessionMode::kFresh;
  bool early_exit = false;
  std::optional<float> exit_threshold;  // unset = the model's calibrated value
  // "softmax", "saturation" or "classifier"; empty = the model's default measure.
  std::string exit_measure;
  float temperature = 0.0f;             // 0 = greedy
  std::optional<uint64_t> seed;         // request i gets seed + i
  bool stop_at_eos = false;  // false: every request asks for exactly max_new_tokens tokens
  absl::Duration deadline = absl::Seconds(120);  // per request, the whole stream
  int max_errors = 100;  // stop starting requests after this many failures; 0 = never

  bool duration_mode() const { return duration > absl::ZeroDuration(); }
};

}  // namespace mnemo::bench

#endif  // MNEMO_CLIENTS_CPP_BENCH_LOAD_CONFIG_H_
