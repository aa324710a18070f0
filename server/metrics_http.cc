#include "server/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mnemo::server {
namespace {

constexpr size_t kMaxRequestBytes = 8192;
constexpr int kIoTimeoutSeconds = 5;

absl::Status Unavailable(const std::string& listen, absl::string_view why) {
  return absl::UnavailableError(
      absl::StrCat("metrics_listen: cannot serve /metrics on ", listen, ": ", why));
}

// One accepted connection, plain or TLS: reads and writes bytes, nothing else.
class Connection {
 public:
  Connection(int fd, SSL_CTX* ctx) : fd_(fd) {
    if (ctx == nullptr) return;
    ssl_ = SSL_new(ctx);
    if (ssl_ == nullptr || SSL_set_fd(ssl_, fd) != 1 || SSL_accept(ssl_) != 1) {
      ERR_clear_error();
      broken_ = true;  // a failed handshake (plain HTTP to an https port...): just close
    }
  }
  ~Connection() {
    if (ssl_ != nullptr) {
      if (!broken_) SSL_shutdown(ssl_);
      SSL_free(ssl_);
    }
  }
  bool broken() const { return broken_; }

  // Bytes read into `buffer` (at most `size`); <= 0 at the end, on a timeout or an error.
  ssize_t Read(char* buffer, size_t size) {
    while (true) {
      const ssize_t n = ssl_ != nullptr ? SSL_read(ssl_, buffer, static_cast<int>(size))
                                        : recv(fd_, buffer, size, 0);
      if (n < 0 && ssl_ == nullptr && errno == EINTR) continue;
      return n;
    }
  }

  void WriteAll(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n =
          ssl_ != nullptr
              ? SSL_write(ssl_, data.data() + sent, static_cast<int>(data.size() - sent))
              : send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && ssl_ == nullptr && errno == EINTR) continue;
      if (n <= 0) return;  // client gone or timed out
      sent += static_cast<size_t>(n);
    }
  }

 private:
  const int fd_;
  SSL* ssl_ = nullptr;
  bool broken_ = false;
};

absl::StatusOr<SSL_CTX*> NewTlsContext(const MetricsHttpServer::Tls& tls) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return absl::InternalError("metrics TLS: cannot create an SSL_CTX");
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  absl::Status error;
  if (SSL_CTX_use_certificate_chain_file(ctx, tls.cert_file.c_str()) != 1) {
    error = absl::InvalidArgumentError(
        absl::StrCat("metrics TLS: cannot use the certificate chain ", tls.cert_file));
  } else if (SSL_CTX_use_PrivateKey_file(ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    error = absl::InvalidArgumentError(
        absl::StrCat("metrics TLS: cannot use the private key ", tls.key_file));
  } else if (SSL_CTX_check_private_key(ctx) != 1) {
    error = absl::InvalidArgumentError(absl::StrCat(
        "metrics TLS: the key ", tls.key_file, " does not match the certificate ", tls.cert_file));
  }
  if (!error.ok()) {
    ERR_clear_error();
    SSL_CTX_free(ctx);
    return error;
  }
  return ctx;
}

std::string Response(absl::string_view status, absl::string_view content_type,
                     const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, BodyFn body, Tls tls) {
  SSL_CTX* ssl = nullptr;
  if (!tls.cert_file.empty() || !tls.key_file.empty()) {
    absl::StatusOr<SSL_CTX*> ctx = NewTlsContext(tls);
    if (!ctx.ok()) return ctx.status();
    ssl = *ctx;
  }
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server = Listen(listen, std::move(body), ssl);
  if (!server.ok() && ssl != nullptr) SSL_CTX_free(ssl);
  return server;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Listen(
    const std::string& listen, BodyFn body, ssl_ctx_st* ssl) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return Unavailable(listen, "expected HOST:PORT");
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* addresses = nullptr;
  if (const int rc =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &addresses);
      rc != 0) {
    return Unavailable(listen, gai_strerror(rc));
  }
  int fd = -1;
  std::string error = "no address";
  for (addrinfo* a = addresses; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
      error = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(addresses);
  if (fd < 0) return Unavailable(listen, error);

  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port = bound.ss_family == AF_INET6
                             ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return Unavailable(listen, std::strerror(errno));
  }
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(fd, bound_port, wake[0], wake[1], std::move(body), ssl));
  server->thread_ = std::thread([raw = server.get()] { raw->Loop(); });
  return server;
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int port, int wake_read, int wake_write,
                                     BodyFn body, ssl_ctx_st* ssl)
    : listen_fd_(listen_fd),
      port_(port),
      wake_read_(wake_read),
      wake_write_(wake_write),
      body_(std::move(body)),
      ssl_(ssl) {}

MetricsHttpServer::~MetricsHttpServer() {
  const char stop = 'x';
  while (write(wake_write_, &stop, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
  if (ssl_ != nullptr) SSL_CTX_free(ssl_);
}

void MetricsHttpServer::Loop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    Serve(client);
    close(client);
  }
}

void MetricsHttpServer::Serve(int fd) {
  timeval timeout{kIoTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  Connection connection(fd, ssl_);
  if (connection.broken()) return;
  std::string request;
  char buffer[1024];
  while (request.size() < kMaxRequestBytes && !absl::StrContains(request, "\r\n\r\n")) {
    const ssize_t n = connection.Read(buffer, sizeof(buffer));
    if (n <= 0) break;
    request.append(buffer, static_cast<size_t>(n));
  }
  // Request line: METHOD SP TARGET SP VERSION.
  const std::string line = request.substr(0, request.find("\r\n"));
  const std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/")) {
    connection.WriteAll(Response("400 Bad Request", "text/plain", "bad request\n"));
    return;
  }
  const std::string path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    connection.WriteAll(Response("404 Not Found", "text/plain", "try /metrics\n"));
  } else if (parts[0] != "GET") {
    connection.WriteAll(Response("405 Method Not Allowed", "text/plain", "GET only\n"));
  } else {
    connection.WriteAll(Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body_()));
  }
}

}  // namespace mnemo::server
