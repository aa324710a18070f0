// ServerState: what every service shares — the engine (once loaded), the metrics, the tenants
// and request log, and the admission gate that lets the server drain. Calls use it through
// server/call.h.
//
// Owns the tenants and counters; borrows the engine, the metrics and the request log, which the
// MnemoServer keeps alive until grpc::Server::Shutdown has returned (so until every call has
// finished).
// Thread-safety: all methods are thread-safe. BeginCall/EndCall take a mutex for a few
// instructions only, so reactions may call them.
#ifndef MNEMO_SERVER_SERVER_STATE_H_
#define MNEMO_SERVER_SERVER_STATE_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "server/metrics.h"
#include "server/request_log.h"
#include "server/tenants.h"

namespace mnemo::server {

class ServerState {
 public:
  ServerState(Metrics& metrics, RequestLog& request_log)
      : metrics_(metrics), request_log_(request_log) {}

  ServerState(const ServerState&) = delete;
  ServerState& operator=(const ServerState&) = delete;

  Metrics& metrics() { return metrics_; }
  RequestLog& request_log() { return request_log_; }
  Tenants& tenants() { return tenants_; }

  // Publishes the loaded engine; calls admitted from now on use it.
  void SetEngine(engine::Engine* engine) ABSL_LOCKS_EXCLUDED(mu_);
  // From now on BeginCall fails with UNAVAILABLE "server is draining".
  void StartDraining() ABSL_LOCKS_EXCLUDED(mu_);
  bool draining() const ABSL_LOCKS_EXCLUDED(mu_);

  // Admits one call and returns the engine, or UNAVAILABLE while the model is loading or the
  // server is draining. On OK the caller must call EndCall() exactly once, when the call has
  // finished (after its reactor's Finish).
  absl::StatusOr<engine::Engine*> BeginCall() ABSL_LOCKS_EXCLUDED(mu_);
  void EndCall() ABSL_LOCKS_EXCLUDED(mu_);
  int calls_in_flight() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until no admitted call is in flight or `deadline` passes; true when idle.
  bool WaitIdle(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Metrics& metrics_;
  RequestLog& request_log_;
  Tenants tenants_;
  mutable absl::Mutex mu_;
  engine::Engine* engine_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_SERVER_STATE_H_
