// Test helpers: an in-process MnemoServer on 127.0.0.1 (free port) serving a tiny random model,
// stubs for every service (health included), and small client-side helpers.
#ifndef MNEMO_TESTS_SERVER_TEST_SERVER_H_
#define MNEMO_TESTS_SERVER_TEST_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "engine/engine.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mnemo/v1/datastores.grpc.pb.h"
#include "mnemo/v1/generation.grpc.pb.h"
#include "mnemo/v1/models.grpc.pb.h"
#include "mnemo/v1/sessions.grpc.pb.h"
#include "server/mnemo_server.h"

namespace mnemo::server::testing {

inline constexpr char kTinyModelName[] = "tiny-test";

// A tiny random model (2 layers, d_model 64), written once per process; returns its directory.
const std::string& TinyModelDir();

// An engine config for TinyModelDir() with a small cap on max_new_tokens.
engine::EngineConfig TinyEngineConfig();

struct TestServerOptions {
  bool load = true;               // load the engine in the constructor
  bool metrics_endpoint = false;  // serve /metrics on a free port
};

// Owns a started MnemoServer and a channel to it. Use from the test thread.
class TestServer {
 public:
  explicit TestServer(TestServerOptions options = {});

  MnemoServer& server() { return *server_; }
  std::string address() const;
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  std::unique_ptr<v1::Generation::Stub> generation() const;
  std::unique_ptr<v1::Sessions::Stub> sessions() const;
  std::unique_ptr<v1::Models::Stub> models() const;
  std::unique_ptr<v1::Datastores::Stub> datastores() const;
  std::unique_ptr<grpc::health::v1::Health::Stub> health() const;

 private:
  std::unique_ptr<MnemoServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

// Everything a Generate stream delivered.
struct StreamResult {
  grpc::Status status;
  std::vector<v1::GenerateResponse> chunks;
  std::string text;  // concatenated chunk texts
  int tokens = 0;    // tokens over all chunks
};

// Reads a whole Generate stream with the given deadline.
StreamResult GenerateAll(v1::Generation::Stub& stub, const v1::GenerateRequest& request,
                         absl::Duration deadline = absl::Seconds(60));

// "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN" or the gRPC error, e.g. "error 14: ...".
std::string HealthOf(grpc::health::v1::Health::Stub& stub, const std::string& service);

// A client context with a deadline `timeout` from now.
std::unique_ptr<grpc::ClientContext> ContextWithTimeout(absl::Duration timeout);

// Creates a session (id "" = server-generated) and returns it; fails the test on error.
v1::Session CreateSession(v1::Sessions::Stub& stub, const std::string& id);
// Polls GetSession until the session is not busy (its last request is fully accounted).
v1::Session WaitSessionIdle(v1::Sessions::Stub& stub, const std::string& id);

// Runs a shell command; returns its exit status and fills `output` with stdout + stderr.
int RunCommand(const std::string& command, std::string* output);

// GETs http://127.0.0.1:port/path with curl; returns the HTTP status (0 when curl failed) and
// fills `body`.
int HttpGet(int port, const std::string& path, std::string* body,
            const std::string& method = "GET");

}  // namespace mnemo::server::testing

#endif  // MNEMO_TESTS_SERVER_TEST_SERVER_H_
