#include "server/mnemo_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace mnemo::server {

MnemoServer::MnemoServer(std::unique_ptr<Metrics> metrics)
    : metrics_(std::move(metrics)),
      state_(*metrics_),
      generation_(state_),
      sessions_(state_),
      models_(state_),
      datastores_(state_) {}

absl::StatusOr<std::unique_ptr<MnemoServer>> MnemoServer::Start(const ServerOptions& options) {
  absl::StatusOr<std::unique_ptr<Metrics>> metrics = Metrics::Create(options.metrics_listen);
  if (!metrics.ok()) return metrics.status();
  std::unique_ptr<MnemoServer> server(new MnemoServer(*std::move(metrics)));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &server->port_);
  builder.SetMaxReceiveMessageSize(options.max_request_bytes);
  builder.RegisterService(&server->generation_);
  builder.RegisterService(&server->sessions_);
  builder.RegisterService(&server->models_);
  builder.RegisterService(&server->datastores_);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("listen: cannot serve gRPC on ", options.listen));
  }
  // Probes see the server while the model loads, and see it is not ready.
  server->server_->GetHealthCheckService()->SetServingStatus(kReadinessService, false);
  return server;
}

MnemoServer::~MnemoServer() {
  Drain(absl::ZeroDuration());
  // No call is left, so nothing can reach the engine through a reactor any more.
  metrics_->SetStatsSource(nullptr);
  state_.SetEngine(nullptr);
  engine_.reset();
  server_.reset();
}

absl::Status MnemoServer::LoadEngine(const engine::EngineConfig& config) {
  engine::EngineConfig observed = config;
  Metrics* metrics = metrics_.get();  // outlives the engine (declared first)
  observed.knn_search_observer = [metrics](absl::Duration latency) {
    metrics->ObserveKnnSearch(latency);
  };
  observed.decode_batch_observer = [metrics](int rows) { metrics->ObserveDecodeBatch(rows); };
  observed.session_snapshot_observer = [metrics](absl::Duration latency, int64_t bytes) {
    metrics->ObserveSessionSnapshot(latency, bytes);
  };
  observed.session_restore_observer = [metrics](absl::Duration latency) {
    metrics->ObserveSessionRestore(latency);
  };
  observed.session_log_observer = [metrics](int64_t bytes) { metrics->ObserveSessionLog(bytes); };
  absl::StatusOr<std::unique_ptr<engine::Engine>> engine = engine::Engine::Create(observed);
  if (!engine.ok()) return engine.status();
  ServeEngine(*std::move(engine));
  return absl::OkStatus();
}

void MnemoServer::ServeEngine(std::unique_ptr<engine::Engine> engine) {
  engine_ = std::move(engine);
  engine::Engine* raw = engine_.get();
  metrics_->SetStatsSource([raw] { return raw->Stats(); });
  metrics_->SetDatastores(raw->ListDatastores());
  state_.SetEngine(raw);
  absl::MutexLock lock(&drain_mu_);
  // A drain that began while the model loaded wins: never report SERVING after it.
  if (!drained_ && !state_.draining()) {
    server_->GetHealthCheckService()->SetServingStatus(kReadinessService, true);
  }
}

void MnemoServer::Drain(absl::Duration grace) {
  absl::MutexLock lock(&drain_mu_);
  if (drained_) return;
  state_.StartDraining();
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus(kReadinessService, false);
  health->SetServingStatus("", false);
  state_.WaitIdle(absl::Now() + grace);
  // Cancels whatever is still running (each GenerateReactor cancels its engine stream and
  // finishes once the engine closes it) and waits for every reactor to finish.
  server_->Shutdown(absl::ToChronoTime(absl::Now()));
  drained_ = true;
}

}  // namespace mnemo::server
