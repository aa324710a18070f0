// MetricsHttpServer: a minimal HTTP/1.1 endpoint that answers GET /metrics for Prometheus.
//
// Why not prometheus::Exposer: Debian's civetweb starts its threads with a fixed 100 KiB stack,
// and a process that links LibTorch + OpenBLAS carries ~106 KiB of static TLS, so every civetweb
// pthread_create fails with EINVAL ("null context when constructing CivetServer"). Scrapes are
// rare and small, so one thread serving one connection at a time is plenty.
//
// Optionally over TLS (OpenSSL; the same certificate and key as the gRPC port): scrapes then
// need https. Owns the listening socket, its TLS context and its thread. Each connection gets 5 s socket timeouts, so a
// stuck client delays scrapes, never the gRPC server. Thread-safety: construction and
// destruction from one thread; `body` is called on the server's thread and must be
// thread-safe with respect to everything else.
#ifndef MNEMO_SERVER_METRICS_HTTP_H_
#define MNEMO_SERVER_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace mnemo::server {

class MetricsHttpServer {
 public:
  using BodyFn = std::function<std::string()>;
  struct Tls {  // PEM files; both empty = plain HTTP
    std::string cert_file;
    std::string key_file;
  };

  // Listens on `listen` (HOST:PORT, [V6HOST]:PORT; port 0 = any free port) and serves
  // `body()` at /metrics in the Prometheus text format. UNAVAILABLE naming the address when it
  // cannot bind; INVALID_ARGUMENT naming the file when the TLS certificate or key is unusable.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& listen,
                                                                  BodyFn body, Tls tls = {});
  ~MetricsHttpServer();  // stops accepting and joins the thread

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer(int listen_fd, int port, int wake_read, int wake_write, BodyFn body,
                    ssl_ctx_st* ssl);
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Listen(const std::string& listen,
                                                                   BodyFn body, ssl_ctx_st* ssl);
  void Loop();
  void Serve(int fd);

  const int listen_fd_;
  const int port_;
  const int wake_read_;  // readable once the destructor asks the loop to stop
  const int wake_write_;
  const BodyFn body_;
  ssl_ctx_st* const ssl_;  // owned (SSL_CTX); null = plain HTTP
  std::thread thread_;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_METRICS_HTTP_H_
