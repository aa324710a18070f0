#include "server/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
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

void SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // client gone or timed out
    sent += static_cast<size_t>(n);
  }
}

std::string Response(absl::string_view status, absl::string_view content_type,
                     const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& listen, BodyFn body) {
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
      new MetricsHttpServer(fd, bound_port, wake[0], wake[1], std::move(body)));
  server->thread_ = std::thread([raw = server.get()] { raw->Loop(); });
  return server;
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int port, int wake_read, int wake_write,
                                     BodyFn body)
    : listen_fd_(listen_fd),
      port_(port),
      wake_read_(wake_read),
      wake_write_(wake_write),
      body_(std::move(body)) {}

MetricsHttpServer::~MetricsHttpServer() {
  const char stop = 'x';
  while (write(wake_write_, &stop, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
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
  std::string request;
  char buffer[1024];
  while (request.size() < kMaxRequestBytes && !absl::StrContains(request, "\r\n\r\n")) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    request.append(buffer, static_cast<size_t>(n));
  }
  // Request line: METHOD SP TARGET SP VERSION.
  const std::string line = request.substr(0, request.find("\r\n"));
  const std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/")) {
    SendAll(fd, Response("400 Bad Request", "text/plain", "bad request\n"));
    return;
  }
  const std::string path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    SendAll(fd, Response("404 Not Found", "text/plain", "try /metrics\n"));
  } else if (parts[0] != "GET") {
    SendAll(fd, Response("405 Method Not Allowed", "text/plain", "GET only\n"));
  } else {
    SendAll(fd, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body_()));
  }
}

}  // namespace mnemo::server
