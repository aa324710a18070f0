// MnemoServer: the running gRPC server — services, health, reflection, metrics — and the
// engine it serves. main.cc and the in-process tests drive it the same way:
//   Start() (health NOT_SERVING, RPCs UNAVAILABLE "model is loading")
//   -> LoadEngine() (health SERVING) -> Drain() (NOT_SERVING, UNAVAILABLE "server is draining",
//   in-flight calls finish or are cancelled at the grace deadline) -> destruction.
//
// Owns the grpc::Server, the services, the metrics and the engine. Destruction order is the
// invariant that keeps reactors safe: the gRPC server is shut down (every reactor finished)
// before the engine is destroyed, and the engine before the metrics and state it reports to.
// Thread-safety: Start/LoadEngine/ServeEngine are meant for one controlling thread (main).
// Drain may be called from any thread, any number of times (callers are serialised; the
// first one drains). port(), metrics_port(), engine() and metrics() are safe from any thread.
#ifndef MNEMO_SERVER_MNEMO_SERVER_H_
#define MNEMO_SERVER_MNEMO_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "server/datastores_service.h"
#include "server/generation_service.h"
#include "server/metrics.h"
#include "server/models_service.h"
#include "server/request_log.h"
#include "server/server_state.h"
#include "server/sessions_service.h"
#include "server/tenants.h"

namespace mnemo::server {

// The readiness name probes ask for; "" is SERVING from the start in gRPC 1.51.
inline constexpr char kReadinessService[] = "mnemo.v1.Generation";

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";  // HOST:PORT; port 0 = any free port
  std::string metrics_listen;              // HOST:PORT for /metrics; "" = no endpoint
  // Largest request accepted (gRPC's default is 4 MiB; long documents arrive as prompts).
  int max_request_bytes = 64 << 20;
  // TLS on the gRPC port: PEM files; both empty = plaintext. With tls_client_ca, clients must
  // present a certificate it signed (mutual TLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  bool metrics_tls = false;  // serve /metrics over https with tls_cert_file / tls_key_file
  bool reflection = true;    // gRPC server reflection (grpcurl without .proto files)
  RequestLog::Format log_format = RequestLog::Format::kOff;
  bool log_prompts = false;
  std::FILE* log_out = stderr;
  // Hand freed heap pages back to the kernel every interval once this many more bytes are
  // kept free than after the last trim (util::HeapTrimmer); interval <= 0 = never.
  absl::Duration heap_trim_interval = absl::Seconds(10);
  int64_t heap_trim_min_bytes = int64_t{64} << 20;
};

class MnemoServer {
 public:
  // Starts listening; the model is not loaded yet.
  static absl::StatusOr<std::unique_ptr<MnemoServer>> Start(const ServerOptions& options);
  // Drains with no grace period if Drain was not called, then tears down in the safe order.
  ~MnemoServer();

  MnemoServer(const MnemoServer&) = delete;
  MnemoServer& operator=(const MnemoServer&) = delete;

  // Loads the model and datastores (blocking) and serves them; kNN-LM searches are timed into
  // the metrics. Errors name the file, tensor or flag at fault.
  absl::Status LoadEngine(const engine::EngineConfig& config);
  // Serves an engine created elsewhere.
  void ServeEngine(std::unique_ptr<engine::Engine> engine);
  // Requires API keys from now on (server/tenants.h); may be called again to reload (SIGHUP):
  // calls in flight finish under the tenant they started with. On error nothing changes.
  absl::Status ConfigureTenants(std::vector<TenantConfig> tenants);

  // Health NOT_SERVING (readiness name and ""); new calls get UNAVAILABLE "server is
  // draining"; calls in flight continue until they end or `grace` passes, then are cancelled.
  // Returns once every call has finished and the gRPC server has shut down. Idempotent.
  void Drain(absl::Duration grace);

  int port() const { return port_; }
  int metrics_port() const { return metrics_->port(); }
  // Null until loaded; valid until destruction.
  engine::Engine* engine() const { return engine_.get(); }
  Metrics& metrics() { return *metrics_; }

 private:
  MnemoServer(std::unique_ptr<Metrics> metrics, std::unique_ptr<RequestLog> request_log);

  // Declared in construction order; destroyed in reverse, after the explicit teardown in the
  // destructor.
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<RequestLog> request_log_;
  std::unique_ptr<util::HeapTrimmer> heap_trimmer_;  // reports to metrics_
  ServerState state_;
  GenerationService generation_;
  SessionsService sessions_;
  ModelsService models_;
  DatastoresService datastores_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<engine::Engine> engine_;
  int port_ = 0;

  absl::Mutex drain_mu_;  // serialises Drain callers
  bool drained_ ABSL_GUARDED_BY(drain_mu_) = false;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_MNEMO_SERVER_H_
