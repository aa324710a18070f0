// Metrics: the server's Prometheus metrics (docs/design.md §7) and, optionally, the HTTP endpoint
// that serves them at /metrics.
//
// Owns a prometheus::Registry (prometheus-cpp core) and, when a listen address is given, a
// MetricsHttpServer (see metrics_http.h for why not prometheus::Exposer). Gauges mirror
// Engine::Stats() and are refreshed on every scrape from a stats source installed once the
// engine is loaded. No per-session labels.
//
// Thread-safety: every method may be called from any thread (gRPC threads, the engine loop
// thread, the HTTP thread); prometheus-cpp metrics are internally synchronised and the stats
// source is guarded by a mutex. Observations never block on I/O.
#ifndef MNEMO_SERVER_METRICS_H_
#define MNEMO_SERVER_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/types.h"
#include "engine/util/heap_trimmer.h"
#include "server/metrics_http.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace mnemo::server {

class Metrics {
 public:
  // `listen` is HOST:PORT for the /metrics endpoint (port 0 = any free port); "" = no endpoint
  // (metrics are still recorded and available through TextFormat()).
  // `tls` serves it over https (MetricsHttpServer::Tls).
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(const std::string& listen,
                                                         MetricsHttpServer::Tls tls = {});
  ~Metrics();

  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Called on each scrape to refresh the gauges. The callable must stay valid until it is
  // replaced or cleared (pass nullptr before destroying what it reads).
  void SetStatsSource(std::function<engine::EngineStats()> source);

  // The bound port of the /metrics endpoint, 0 when there is none.
  int port() const { return http_ != nullptr ? http_->port() : 0; }
  // Everything in Prometheus text format, gauges refreshed (tests, debugging).
  std::string TextFormat() const;

  // One finished RPC. `code` is the gRPC status code name, e.g. "OK", "NOT_FOUND".
  void CountRequest(absl::string_view rpc, absl::string_view code);
  // Generate stream observations.
  void ObserveTimeToFirstToken(absl::Duration latency);
  // `count` tokens arrived together `gap` after the previous ones (or the first token).
  void ObserveTokens(int count, absl::Duration gap);
  void ObserveExitLayer(int layer);
  // One batched decode step of `rows` streams (engine loop thread).
  void ObserveDecodeBatch(int rows);
  // One kNN-LM datastore search (engine loop thread).
  void ObserveKnnSearch(absl::Duration latency);
  // Durable sessions (--session_dir): a snapshot written, a session loaded from disk, a log
  // record appended.
  void ObserveSessionSnapshot(absl::Duration latency, int64_t bytes);
  void ObserveSessionRestore(absl::Duration latency);
  void ObserveSessionLog(int64_t bytes);
  // The server's heap, every --heap_trim_interval (util::HeapTrimmer).
  void ObserveHeap(const util::HeapTrimmer::Check& check);
  // The shared datastores' sizes (they never change once loaded).
  void SetDatastores(const std::vector<engine::DatastoreInfo>& datastores);
  void ObserveGenerateFinal(const engine::GenerateFinal& final, absl::Duration e2e);
  // Per tenant (--auth_keys; labels only ever take configured tenant names, so they stay
  // bounded): the tenants to show from the start, one finished call with its model tokens, and
  // a call refused by one of the tenant's limits ("max_concurrent", "tokens_per_minute",
  // "max_sessions", "max_memory_bytes").
  void SetTenants(const std::vector<std::string>& names);
  void CountTenantRequest(absl::string_view tenant, absl::string_view code, int64_t tokens_in,
                          int64_t tokens_out);
  void CountTenantRejection(absl::string_view tenant, absl::string_view limit);

 private:
  Metrics();
  void Refresh() const;

  std::shared_ptr<prometheus::Registry> registry_;

  // Owned by registry_.
  prometheus::Histogram* time_to_first_token_ = nullptr;
  prometheus::Histogram* inter_token_latency_ = nullptr;
  prometheus::Histogram* request_duration_ = nullptr;
  prometheus::Histogram* queue_time_ = nullptr;
  prometheus::Histogram* exit_layer_ = nullptr;
  prometheus::Counter* prompt_tokens_ = nullptr;
  prometheus::Counter* generated_tokens_ = nullptr;
  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  prometheus::Family<prometheus::Counter>* generations_ = nullptr;
  prometheus::Family<prometheus::Counter>* tenant_requests_ = nullptr;
  prometheus::Family<prometheus::Counter>* tenant_tokens_ = nullptr;
  prometheus::Family<prometheus::Counter>* tenant_rejections_ = nullptr;
  prometheus::Counter* sessions_evicted_ = nullptr;
  prometheus::Gauge* running_ = nullptr;
  prometheus::Gauge* waiting_ = nullptr;
  prometheus::Gauge* sessions_ = nullptr;
  prometheus::Gauge* session_memory_bytes_ = nullptr;
  prometheus::Histogram* knn_search_ = nullptr;
  prometheus::Counter* session_snapshots_ = nullptr;
  prometheus::Counter* session_snapshot_bytes_ = nullptr;
  prometheus::Histogram* session_snapshot_seconds_ = nullptr;
  prometheus::Counter* session_restores_ = nullptr;
  prometheus::Histogram* session_restore_seconds_ = nullptr;
  prometheus::Counter* session_log_bytes_ = nullptr;
  prometheus::Gauge* resident_bytes_ = nullptr;
  prometheus::Gauge* heap_in_use_bytes_ = nullptr;
  prometheus::Gauge* heap_free_bytes_ = nullptr;
  prometheus::Counter* heap_trims_ = nullptr;
  prometheus::Counter* heap_released_bytes_ = nullptr;
  prometheus::Histogram* heap_trim_seconds_ = nullptr;
  prometheus::Gauge* sessions_on_disk_ = nullptr;
  prometheus::Histogram* decode_batch_size_ = nullptr;
  prometheus::Family<prometheus::Gauge>* datastore_entries_ = nullptr;
  prometheus::Family<prometheus::Gauge>* datastore_bytes_ = nullptr;
  prometheus::Gauge* session_datastore_entries_ = nullptr;  // datastore="session"
  prometheus::Gauge* session_datastore_bytes_ = nullptr;

  mutable absl::Mutex mu_;
  std::function<engine::EngineStats()> stats_source_ ABSL_GUARDED_BY(mu_);

  // Last: destroyed first, so no scrape runs while the rest goes. Null without an endpoint.
  std::unique_ptr<MetricsHttpServer> http_;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_METRICS_H_
