#include "server/mnemo_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mnemo::server {

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return text.str();
}

// Plaintext, TLS, or mutual TLS, from the options' files.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServerOptions& o) {
  if (o.tls_cert_file.empty() && o.tls_key_file.empty()) {
    if (!o.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (o.tls_cert_file.empty() || o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls_cert and --tls_key");
  }
  absl::StatusOr<std::string> cert = ReadPem(o.tls_cert_file, "--tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(o.tls_key_file, "--tls_key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!o.tls_client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(o.tls_client_ca_file, "--tls_client_ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  ssl.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  return grpc::SslServerCredentials(ssl);
}

// Removes gRPC's reflection plugin from one builder. The plugin registers itself process-wide
// as soon as the reflection library is loaded, so leaving it out takes an option like this.
class WithoutReflection : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                                    return p->name().find("reflection") != std::string::npos;
                                  }),
                   plugins->end());
  }
};

}  // namespace

MnemoServer::MnemoServer(std::unique_ptr<Metrics> metrics,
                         std::unique_ptr<RequestLog> request_log)
    : metrics_(std::move(metrics)),
      request_log_(std::move(request_log)),
      state_(*metrics_, *request_log_),
      generation_(state_),
      sessions_(state_),
      models_(state_),
      datastores_(state_) {}

absl::StatusOr<std::unique_ptr<MnemoServer>> MnemoServer::Start(const ServerOptions& options) {
  MetricsHttpServer::Tls metrics_tls;
  if (options.metrics_tls) {
    if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
      return absl::InvalidArgumentError("--metrics_tls needs --tls_cert and --tls_key");
    }
    metrics_tls = {options.tls_cert_file, options.tls_key_file};
  }
  absl::StatusOr<std::unique_ptr<Metrics>> metrics =
      Metrics::Create(options.metrics_listen, std::move(metrics_tls));
  if (!metrics.ok()) return metrics.status();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  if (options.heap_trim_min_bytes < 0) {
    return absl::InvalidArgumentError("--heap_trim_min_bytes must be >= 0");
  }
  std::unique_ptr<MnemoServer> server(new MnemoServer(
      *std::move(metrics),
      std::make_unique<RequestLog>(options.log_format, options.log_prompts, options.log_out)));
  Metrics* observer = server->metrics_.get();
  server->heap_trimmer_ = std::make_unique<util::HeapTrimmer>(
      util::HeapTrimmer::Options{options.heap_trim_interval, options.heap_trim_min_bytes},
      [observer](const util::HeapTrimmer::Check& check) { observer->ObserveHeap(check); });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!options.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  builder.AddListeningPort(options.listen, *credentials, &server->port_);
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

absl::Status MnemoServer::ConfigureTenants(std::vector<TenantConfig> tenants) {
  if (absl::Status s = state_.tenants().Configure(std::move(tenants)); !s.ok()) return s;
  metrics_->SetTenants(state_.tenants().names());
  return absl::OkStatus();
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
