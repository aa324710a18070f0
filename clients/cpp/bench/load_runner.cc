#include "clients/cpp/bench/load_runner.h"

#include <sys/resource.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace mnemo::bench {
namespace {

// How often the waiting thread wakes to check for an interrupt (and offers the progress line a
// redraw, which ProgressLine limits to its own interval). Ctrl-C cancels the calls in flight at
// the next wake-up; meanwhile a stream whose request ends starts no other. At 100 ms, two
// streams decoding in step (same lengths, one batch) both finished inside that window after
// the signal in about one run in six of 0.6 s requests, and nothing was left to cancel.
constexpr absl::Duration kPollInterval = absl::Milliseconds(5);
// How long to wait for finished calls to be destroyed (microseconds in practice).
constexpr absl::Duration kCleanupTimeout = absl::Seconds(10);

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

const char* StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kNone: return "completed";
    case StopReason::kMaxErrors: return "max_errors";
    case StopReason::kInterrupted: return "interrupted";
  }
  return "unknown";
}

LoadRunner::LoadRunner(const LoadConfig& config, const PromptSource& prompts,
                       const std::vector<v1::Generation::Stub*>& stubs,
                       client::Client& sessions, ProgressLine& progress,
                       const std::atomic<bool>& interrupted)
    : config_(config),
      prompts_(prompts),
      stubs_(stubs),
      sessions_client_(sessions),
      progress_(progress),
      interrupted_(interrupted) {}

absl::StatusOr<LevelRecords> LoadRunner::Run() {
  {
    absl::MutexLock lock(&mu_);
    result_ = LevelRecords();
    result_.config = config_;
    in_flight_.assign(config_.concurrency, {});
  }
  session_ids_.assign(config_.concurrency, "");
  if (config_.sessions != SessionMode::kFresh) {
    for (int i = 0; i < config_.concurrency; ++i) {
      v1::CreateSessionRequest request;
      request.set_remember(config_.sessions == SessionMode::kRemember);
      absl::StatusOr<v1::Session> session = sessions_client_.CreateSession(request);
      if (!session.ok()) {
        for (int j = 0; j < i; ++j) (void)sessions_client_.DeleteSession(session_ids_[j]);
        return absl::Status(session.status().code(),
                            absl::StrCat("cannot create session ", i + 1, " of ",
                                         config_.concurrency, ": ", session.status().message()));
      }
      session_ids_[i] = session->session_id();
    }
  }

  if (config_.warmup_per_stream > 0) RunPhase(Phase::kWarmup);
  bool measure = false;
  {
    absl::MutexLock lock(&mu_);
    measure = stop_ == StopReason::kNone;
  }
  if (measure) RunPhase(Phase::kMeasure);

  int delete_failures = 0;
  if (config_.sessions != SessionMode::kFresh) {
    for (const std::string& id : session_ids_) {
      if (!sessions_client_.DeleteSession(id).ok()) ++delete_failures;
    }
  }
  absl::MutexLock lock(&mu_);
  result_.stopped = stop_;
  result_.session_delete_failures = delete_failures;
  return std::move(result_);
}

void LoadRunner::RunPhase(Phase phase) {
  {
    absl::MutexLock lock(&mu_);
    phase_ = phase;
    started_.assign(config_.concurrency, 0);
    active_streams_ = config_.concurrency;
    phase_done_ = 0;
    phase_failed_ = 0;
    phase_tokens_ = 0;
    origin_ = Clock::now();
  }
  const double cpu_start = ProcessCpuSeconds();
  const Clock::time_point wall_start = Clock::now();
  for (int stream = 0; stream < config_.concurrency; ++stream) StartNext(stream);

  bool cancelled = false;
  for (;;) {
    bool done = false;
    {
      absl::MutexLock lock(&mu_);
      auto all_retired = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return active_streams_ == 0; };
      done = mu_.AwaitWithTimeout(absl::Condition(&all_retired), kPollInterval);
    }
    if (done) break;
    if (interrupted_.load() && !cancelled) {
      CancelInFlight();
      cancelled = true;
    }
    progress_.Update(ProgressText(phase, /*final=*/false));
  }
  progress_.Finish(ProgressText(phase, /*final=*/true));
  WaitForCallsDestroyed();
  if (phase == Phase::kMeasure) {
    absl::MutexLock lock(&mu_);
    result_.client_cpu_s = ProcessCpuSeconds() - cpu_start;
    result_.phase_wall_s = SecondsSince(wall_start);
  }
}

bool LoadRunner::ShouldStartLocked(int stream) {
  if (stop_ == StopReason::kNone && interrupted_.load()) stop_ = StopReason::kInterrupted;
  if (stop_ != StopReason::kNone) return false;
  if (phase_ == Phase::kWarmup) return started_[stream] < config_.warmup_per_stream;
  if (config_.duration_mode()) {
    return Clock::now() < origin_ + absl::ToChronoNanoseconds(config_.duration);
  }
  return started_[stream] < config_.requests_per_stream;
}

v1::GenerateRequest LoadRunner::BuildRequestLocked(int stream) {
  const uint64_t index = next_request_index_++;
  v1::GenerateRequest request;
  request.set_session_id(session_ids_[stream]);
  request.set_prompt(prompts_.Get(index));
  request.set_max_new_tokens(config_.max_new_tokens);
  request.set_stop_at_eos(config_.stop_at_eos);
  v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_temperature(config_.temperature);
  if (config_.seed.has_value()) sampling->set_seed(*config_.seed + index);
  if (config_.early_exit) {
    request.mutable_early_exit()->set_enabled(true);
    if (config_.exit_threshold.has_value()) {
      request.mutable_early_exit()->set_threshold(*config_.exit_threshold);
    }
    if (!config_.exit_measure.empty()) {
      request.mutable_early_exit()->set_measure(
          config_.exit_measure == "softmax"      ? v1::EXIT_MEASURE_SOFTMAX_RESPONSE
          : config_.exit_measure == "saturation" ? v1::EXIT_MEASURE_HIDDEN_SATURATION
                                                 : v1::EXIT_MEASURE_CLASSIFIER);
    }
  }
  return request;
}

void LoadRunner::StartNext(int stream) {
  std::shared_ptr<GenerateCall> call;
  v1::GenerateRequest request;
  {
    absl::MutexLock lock(&mu_);
    if (!ShouldStartLocked(stream)) {
      --active_streams_;
      return;
    }
    ++started_[stream];
    request = BuildRequestLocked(stream);
    call = GenerateCall::Create(origin_, stream, *this);
    // Registered before Start, so an interrupt can reach it however fast it ends.
    in_flight_[stream] = call;
  }
  call->Start(*stubs_[stream % stubs_.size()], request, config_.deadline, config_.api_key);
}

void LoadRunner::OnTokens(int tokens) { phase_tokens_.fetch_add(tokens); }

void LoadRunner::OnCallDone(int stream, RequestRecord record) {
  {
    absl::MutexLock lock(&mu_);
    ++phase_done_;
    if (!record.ok()) {
      ++phase_failed_;
      ++failed_total_;
      if (config_.max_errors > 0 && failed_total_ >= config_.max_errors &&
          stop_ == StopReason::kNone) {
        stop_ = StopReason::kMaxErrors;
      }
    }
    if (phase_ == Phase::kMeasure) {
      result_.records.push_back(std::move(record));
    } else {
      ++result_.warmup_requests;
      if (!record.ok()) {
        record.chunks.clear();
        result_.warmup_failures.push_back(std::move(record));
      }
    }
  }
  StartNext(stream);
}

void LoadRunner::WaitForCallsDestroyed() {
  // Every stream has retired, so each call has delivered its record; what remains is the
  // calls' own clean-up on gRPC threads, which must finish before this runner (their
  // observer) or the stubs go away.
  const absl::Time give_up = absl::Now() + kCleanupTimeout;
  for (;;) {
    bool all_gone = true;
    {
      absl::MutexLock lock(&mu_);
      for (const std::weak_ptr<GenerateCall>& weak : in_flight_) all_gone &= weak.expired();
    }
    if (all_gone || absl::Now() > give_up) return;
    absl::SleepFor(absl::Milliseconds(1));
  }
}

void LoadRunner::CancelInFlight() {
  std::vector<std::shared_ptr<GenerateCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    if (stop_ == StopReason::kNone) stop_ = StopReason::kInterrupted;
    for (const std::weak_ptr<GenerateCall>& weak : in_flight_) {
      if (std::shared_ptr<GenerateCall> call = weak.lock()) calls.push_back(std::move(call));
    }
  }
  // Outside mu_: a cancelled call may end (and call OnCallDone) on this very thread.
  for (const std::shared_ptr<GenerateCall>& call : calls) call->Cancel();
}

std::string LoadRunner::ProgressText(Phase phase, bool final) {
  int64_t done = 0, failed = 0;
  double elapsed = 0;
  {
    absl::MutexLock lock(&mu_);
    done = phase_done_;
    failed = phase_failed_;
    elapsed = SecondsSince(origin_);
  }
  const int64_t tokens = phase_tokens_.load();
  std::string text = absl::StrFormat("[%d streams] %s ", config_.concurrency,
                                     phase == Phase::kWarmup ? "warmup " : "measure");
  const int64_t per_stream =
      phase == Phase::kWarmup ? config_.warmup_per_stream : config_.requests_per_stream;
  if (phase == Phase::kMeasure && config_.duration_mode()) {
    absl::StrAppendFormat(&text, "%6.1f/%.0fs  %d requests", elapsed,
                          absl::ToDoubleSeconds(config_.duration), done);
  } else {
    absl::StrAppendFormat(&text, "%d/%d requests  %6.1fs", done,
                          per_stream * config_.concurrency, elapsed);
  }
  absl::StrAppendFormat(&text, "  %d tokens  %.1f tokens/s  errors %d", tokens,
                        elapsed > 0 ? tokens / elapsed : 0.0, failed);
  if (final) absl::StrAppend(&text, "  done");
  return text;
}

}  // namespace mnemo::bench
