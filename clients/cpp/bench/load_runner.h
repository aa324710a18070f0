// LoadRunner: drives one load level — N streams, each with one Generate request in flight at a
// time — and collects a RequestRecord per measured request.
//
// Run(): in `reuse` mode creates one session per stream; runs the warmup phase (each stream
// sends `warmup_per_stream` requests, not recorded); then the measured phase, whose clock
// origin is its start: each stream sends its next request as soon as the previous one ends,
// until it has sent `requests_per_stream` or `duration` has passed (requests in flight then
// finish and are counted); finally deletes the sessions it created. A phase ends when every
// stream has stopped. After `max_errors` failed requests (warmup included) or an interrupt no
// stream starts another request; an interrupt also cancels the requests in flight.
//
// Threads: Run() blocks the calling thread, which also draws the progress line. Requests start
// and end on gRPC callback threads; everything they share with Run() is guarded by mu_ (the
// token counter is an atomic, bumped per chunk). Nothing under mu_ blocks or calls gRPC.
// Borrows the stubs, the session client, the prompts, the progress line and the interrupt flag;
// all must outlive Run().
#ifndef MNEMO_CLIENTS_CPP_BENCH_LOAD_RUNNER_H_
#define MNEMO_CLIENTS_CPP_BENCH_LOAD_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "clients/cpp/bench/generate_call.h"
#include "clients/cpp/bench/load_config.h"
#include "clients/cpp/bench/progress_line.h"
#include "clients/cpp/bench/prompt_source.h"
#include "clients/cpp/bench/request_record.h"
#include "clients/cpp/mnemo_client.h"
#include "mnemo/v1/generation.grpc.pb.h"

namespace mnemo::bench {

// Why a level stopped before its planned end.
enum class StopReason { kNone, kMaxErrors, kInterrupted };
const char* StopReasonName(StopReason reason);

// What one level measured, before aggregation.
struct LevelRecords {
  LoadConfig config;
  std::vector<RequestRecord> records;          // the measured phase, in completion order
  std::vector<RequestRecord> warmup_failures;  // failed warmup requests (chunks dropped)
  int64_t warmup_requests = 0;                 // warmup requests that ended
  double client_cpu_s = 0;  // user + system CPU of this process over the measured phase
  double phase_wall_s = 0;  // measured phase: start until every stream stopped
  StopReason stopped = StopReason::kNone;
  int session_delete_failures = 0;
};

class LoadRunner : public CallObserver {
 public:
  // Stream i sends on stubs[i % stubs.size()] (one stub per channel).
  LoadRunner(const LoadConfig& config, const PromptSource& prompts,
             const std::vector<v1::Generation::Stub*>& stubs, client::Client& sessions,
             ProgressLine& progress, const std::atomic<bool>& interrupted);

  // Runs the level. An error only when it could not start (a session could not be created);
  // failed requests are in the records, not errors.
  absl::StatusOr<LevelRecords> Run();

  void OnTokens(int tokens) override;
  void OnCallDone(int stream, RequestRecord record) override;

 private:
  enum class Phase { kWarmup, kMeasure };

  void RunPhase(Phase phase);
  // Starts the stream's next request, or retires the stream when it is done.
  void StartNext(int stream);
  // Also turns a pending interrupt into stop_.
  bool ShouldStartLocked(int stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::GenerateRequest BuildRequestLocked(int stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelInFlight();
  // Waits until the phase's last calls have been destroyed.
  void WaitForCallsDestroyed();
  std::string ProgressText(Phase phase, bool final);

  const LoadConfig config_;
  const PromptSource& prompts_;
  const std::vector<v1::Generation::Stub*> stubs_;
  client::Client& sessions_client_;
  ProgressLine& progress_;
  const std::atomic<bool>& interrupted_;

  std::vector<std::string> session_ids_;  // one per stream in reuse mode; set before phases
  std::atomic<int64_t> phase_tokens_{0};  // tokens received in the current phase

  mutable absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kWarmup;
  Clock::time_point origin_ ABSL_GUARDED_BY(mu_);  // the current phase's start
  std::vector<int> started_ ABSL_GUARDED_BY(mu_);  // requests started per stream, this phase
  int active_streams_ ABSL_GUARDED_BY(mu_) = 0;    // streams not yet retired this phase
  int64_t phase_done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t phase_failed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_request_index_ ABSL_GUARDED_BY(mu_) = 0;  // over the run: prompts and seeds
  StopReason stop_ ABSL_GUARDED_BY(mu_) = StopReason::kNone;
  std::vector<std::weak_ptr<GenerateCall>> in_flight_ ABSL_GUARDED_BY(mu_);  // per stream
  LevelRecords result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mnemo::bench

#endif  // MNEMO_CLIENTS_CPP_BENCH_LOAD_RUNNER_H_
