#include "tests/server/test_server.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/model/model.h"

namespace mnemo::server::testing {

// A random tiny model written once per test process and removed when the process exits.
class TinyModel {
 public:
  TinyModel() {
    std::string path = ::testing::TempDir() + "mnemo_server_test_XXXXXX";
    if (mkdtemp(path.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << path;
      return;
    }
    root_ = path;
    model::ModelConfig config;
    config.name = kTinyModelName;
    config.n_layers = 2;
    config.d_model = 64;
    config.n_heads = 2;
    config.d_head = 32;
    config.d_ff = 128;
    config.seg_len = 16;
    config.mem_len = 32;
    config.cmem_len = 8;
    config.cmem_rate = 4;
    config.clamp_len = 256;
    absl::Status saved = model::Model::Random(config, /*seed=*/7)->Save(root_ + "/model");
    if (!saved.ok()) ADD_FAILURE() << saved;
    dir_ = root_ + "/model";
  }
  ~TinyModel() {
    std::error_code ignored;
    if (!root_.empty()) std::filesystem::remove_all(root_, ignored);
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string root_;
  std::string dir_;
};

const std::string& TinyModelDir() {
  static const TinyModel model;
  return model.dir();
}

engine::EngineConfig TinyEngineConfig() {
  engine::EngineConfig config;
  config.model_dir = TinyModelDir();
  config.threads = 1;
  config.max_new_tokens_cap = 4096;
  config.default_max_new_tokens = 16;
  return config;
}

TestServer::TestServer(TestServerOptions options) {
  ServerOptions server_options;
  server_options.listen = "127.0.0.1:0";
  if (options.metrics_endpoint) server_options.metrics_listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<MnemoServer>> server = MnemoServer::Start(server_options);
  if (!server.ok()) {
    ADD_FAILURE() << server.status();
    std::abort();  // every test needs the server
  }
  server_ = *std::move(server);
  if (options.load) {
    absl::Status loaded = server_->LoadEngine(TinyEngineConfig());
    EXPECT_TRUE(loaded.ok()) << loaded;
  }
  channel_ = grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
}

std::string TestServer::address() const { return absl::StrCat("127.0.0.1:", server_->port()); }

std::unique_ptr<v1::Generation::Stub> TestServer::generation() const {
  return v1::Generation::NewStub(channel_);
}
std::unique_ptr<v1::Sessions::Stub> TestServer::sessions() const {
  return v1::Sessions::NewStub(channel_);
}
std::unique_ptr<v1::Models::Stub> TestServer::models() const {
  return v1::Models::NewStub(channel_);
}
std::unique_ptr<v1::Datastores::Stub> TestServer::datastores() const {
  return v1::Datastores::NewStub(channel_);
}
std::unique_ptr<grpc::health::v1::Health::Stub> TestServer::health() const {
  return grpc::health::v1::Health::NewStub(channel_);
}

std::unique_ptr<grpc::ClientContext> ContextWithTimeout(absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

StreamResult GenerateAll(v1::Generation::Stub& stub, const v1::GenerateRequest& request,
                         absl::Duration deadline) {
  std::unique_ptr<grpc::ClientContext> context = ContextWithTimeout(deadline);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub.Generate(context.get(), request);
  StreamResult result;
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    result.text += chunk.text();
    result.tokens += chunk.tokens_size();
    result.chunks.push_back(chunk);
  }
  result.status = reader->Finish();
  return result;
}

std::string HealthOf(grpc::health::v1::Health::Stub& stub, const std::string& service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  std::unique_ptr<grpc::ClientContext> context = ContextWithTimeout(absl::Seconds(10));
  grpc::Status status = stub.Check(context.get(), request, &response);
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) return "SERVICE_UNKNOWN";
  if (!status.ok())
    return absl::StrCat("error ", status.error_code(), ": ", status.error_message());
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

v1::Session CreateSession(v1::Sessions::Stub& stub, const std::string& id) {
  v1::CreateSessionRequest request;
  request.set_session_id(id);
  v1::Session session;
  std::unique_ptr<grpc::ClientContext> context = ContextWithTimeout(absl::Seconds(30));
  grpc::Status status = stub.CreateSession(context.get(), request, &session);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return session;
}

v1::Session WaitSessionIdle(v1::Sessions::Stub& stub, const std::string& id) {
  v1::Session session;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    v1::GetSessionRequest request;
    request.set_session_id(id);
    session.Clear();
    std::unique_ptr<grpc::ClientContext> context = ContextWithTimeout(absl::Seconds(10));
    grpc::Status status = stub.GetSession(context.get(), request, &session);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok() || !session.busy()) return session;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "session " << id << " still busy after 30s";
  return session;
}

int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  output->clear();
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int HttpGet(int port, const std::string& path, std::string* body, const std::string& method) {
  // curl appends the status code after the body.
  std::string output;
  RunCommand(
      absl::StrCat("curl -s -X ", method, " -w '\\n%{http_code}' http://127.0.0.1:", port, path),
      &output);
  const size_t newline = output.rfind('\n');
  if (newline == std::string::npos) return 0;
  *body = output.substr(0, newline);
  return std::atoi(output.c_str() + newline + 1);
}

}  // namespace mnemo::server::testing
