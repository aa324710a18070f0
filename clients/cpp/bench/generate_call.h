// GenerateCall: one Generation.Generate request on the gRPC callback API, timing every chunk.
//
// The callback API lets 64+ concurrent streams share gRPC's few callback threads instead of a
// thread each; a reaction only stamps the time, counts tokens and starts the next read, so the
// client adds microseconds per chunk (mnemo-bench reports its own CPU use to show it).
//
// Ownership: the call owns itself through `self_` from Create until OnDone, where it hands its
// record to the observer and lets go. Whoever wants to cancel it keeps a weak_ptr (see
// LoadRunner), so a cancel never touches a finished call. Borrows the stub and the observer,
// which must outlive every call started on them.
// Thread-safety: gRPC runs the reactions one at a time; Cancel may be called from any thread.
#ifndef MNEMO_CLIENTS_CPP_BENCH_GENERATE_CALL_H_
#define MNEMO_CLIENTS_CPP_BENCH_GENERATE_CALL_H_

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "clients/cpp/bench/request_record.h"
#include "mnemo/v1/generation.grpc.pb.h"

namespace mnemo::bench {

using Clock = std::chrono::steady_clock;

// Receives the progress and the outcome of calls. Called on gRPC callback threads; must not
// block.
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  // `tokens` more tokens arrived on some stream (for the live progress line).
  virtual void OnTokens(int tokens) = 0;
  // The call of stream `stream` ended; exactly once per call, its last act.
  virtual void OnCallDone(int stream, RequestRecord record) = 0;
};

class GenerateCall : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  // A call of stream `stream` whose times are measured from `origin`; not started yet, so
  // the caller can register it (for Cancel) before it can possibly end.
  static std::shared_ptr<GenerateCall> Create(Clock::time_point origin, int stream,
                                              CallObserver& observer);

  // Sends `request`; call once. From here the call may end (and release itself) on another
  // thread at any moment; the caller's shared_ptr keeps it alive until dropped.
  void Start(v1::Generation::Stub& stub, const v1::GenerateRequest& request,
             absl::Duration deadline, const std::string& api_key = "");

  // Cancels the call (it then ends with CANCELLED), also before Start; harmless once ended.
  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  GenerateCall(Clock::time_point origin, int stream, CallObserver& observer)
      : origin_(origin), stream_(stream), observer_(observer) {}

  double Now() const;

  const Clock::time_point origin_;
  const int stream_;
  CallObserver& observer_;
  std::shared_ptr<GenerateCall> self_;  // released in OnDone
  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::GenerateResponse response_;  // the chunk being read
  RequestRecord record_;
};

}  // namespace mnemo::bench

#endif  // MNEMO_CLIENTS_CPP_BENCH_GENERATE_CALL_H_
