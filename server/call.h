// Call: one RPC from admission to its end — what every service method shares.
//
// Begin admits the call (UNAVAILABLE while the model loads or the server drains,
// UNAUTHENTICATED without a valid API key, RESOURCE_EXHAUSTED beyond the tenant's
// max_concurrent / tokens_per_minute, or, for calls that run the model, its fair share of the
// running slots while the server is full), and maps between the client's session ids and the
// engine's (server/tenants.h). Finish records the outcome once — request metrics, per-tenant
// metrics and token charge, the request-log line — and returns the status the client sees
// (session ids in its message in the client's terms). Release ends the admission; it must
// come after the reactor's Finish (so that Drain waits for the call) and is idempotent; the
// destructor releases too.
//
// Shared by a method's callbacks (std::shared_ptr). Thread-safety: the setters and Finish may
// run on different threads one after another (gRPC thread, engine loop thread), never
// concurrently for one call; Finish and Release are guarded and safe from any thread.
#ifndef MNEMO_SERVER_CALL_H_
#define MNEMO_SERVER_CALL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "server/server_state.h"
#include "server/tenants.h"

namespace mnemo::server {

class Call {
 public:
  // Never null; check status() before using engine().
  static std::shared_ptr<Call> Begin(ServerState& state, const grpc::CallbackServerContext* context,
                                     absl::string_view rpc);
  ~Call();

  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  const absl::Status& status() const { return admission_; }
  bool ok() const { return admission_.ok(); }
  engine::Engine* engine() const { return engine_; }
  const Tenant* tenant() const { return tenant_.get(); }
  ServerState& state() const { return state_; }

  // The engine's id for the client's `client_id` (validated; recorded for the log). An empty
  // id stays empty (one-shot calls, ids the engine generates) unless `required`, when it is
  // INVALID_ARGUMENT like any other malformed id.
  absl::StatusOr<std::string> EngineSessionId(absl::string_view client_id, bool required = false);
  // The client's id for an engine id (the tenant prefix removed).
  std::string ClientSessionId(absl::string_view engine_id) const;
  bool OwnsSession(absl::string_view engine_id) const;
  // A fresh id in the tenant's namespace, from the OS CSPRNG (for creates with no id).
  std::string NewEngineSessionId();
  // OK when the tenant may use the shared datastore `name` and it is loaded; otherwise the
  // NOT_FOUND an unloaded name gets, listing only the datastores this tenant may use.
  absl::Status CheckDatastore(absl::string_view name) const;
  // RESOURCE_EXHAUSTED `message`, counted as a rejection by the tenant limit `limit`.
  absl::Status LimitError(absl::string_view limit, absl::string_view message) const;

  void set_session(absl::string_view client_id) { session_ = std::string(client_id); }
  void set_prompt(absl::string_view text);  // kept only with --log_prompts
  void set_queue_time(absl::Duration queue) { queue_time_ = queue; }
  void AddTokens(int64_t in, int64_t out) {
    tokens_in_ += in;
    tokens_out_ += out;
  }

  // For the engine's unary model work (Score, AddToSessionDatastore): true once the client
  // cancelled or its deadline passed, so the work stops instead of running to its end. Valid
  // until the call finishes; any thread.
  engine::Engine::CancelCheck CancelCheck() const {
    if (context_ == nullptr) return {};
    return [context = context_] { return context->IsCancelled(); };
  }

  // Records the outcome (first call only; later calls just convert) and returns it as the
  // client sees it. A failure of a call the client has already cancelled is recorded as
  // CANCELLED (a client that cancels before its request arrives leaves an empty request).
  grpc::Status Finish(const absl::Status& status);
  void Release();
  // Finish, reactor->Finish, Release.
  void FinishUnary(grpc::ServerUnaryReactor* reactor, const absl::Status& status);

 private:
  Call(ServerState& state, const grpc::CallbackServerContext* context, absl::string_view rpc);

  ServerState& state_;
  const grpc::CallbackServerContext* const context_;  // null in tests that have none
  const std::string rpc_;
  const std::string peer_;
  const absl::Time start_ = absl::Now();
  absl::Status admission_;
  engine::Engine* engine_ = nullptr;
  std::shared_ptr<Tenant> tenant_;
  bool state_admitted_ = false;   // ServerState::BeginCall succeeded
  bool tenant_admitted_ = false;  // Tenant::Admit succeeded
  bool share_admitted_ = false;   // Tenants::AdmitModelCall succeeded
  std::atomic<bool> finished_{false};
  std::atomic<bool> released_{false};

  std::string session_;
  std::optional<std::string> prompt_;
  std::optional<absl::Duration> queue_time_;
  int64_t tokens_in_ = 0;
  int64_t tokens_out_ = 0;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_CALL_H_
