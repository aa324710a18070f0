// mnemo::client::Client — a small typed wrapper over the mnemo.v1 gRPC stubs.
//
// Owns one channel and the stubs built on it. Every call takes the client's default deadline
// (set at construction) and returns absl::Status / absl::StatusOr; a non-OK gRPC status is
// converted code for code (gRPC and Abseil share the canonical code numbers), so callers can
// print `absl::StatusCodeToString(status.code())` and the server's message.
//
// Thread-safety: the stubs are thread-safe, so one Client may serve concurrent calls.
// Used by the `mnemo` CLI (main.cc); any C++ program can link the `mnemo_client` library.
#ifndef MNEMO_CLIENTS_CPP_MNEMO_CLIENT_H_
#define MNEMO_CLIENTS_CPP_MNEMO_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "clients/cpp/connection.h"
#include "mnemo/v1/generation.grpc.pb.h"
#include "mnemo/v1/models.grpc.pb.h"
#include "mnemo/v1/sessions.grpc.pb.h"

namespace mnemo::client {

// grpc::Status -> absl::Status, keeping the code and the message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// What a finished Generate stream reported in its last chunk.
struct GenerateSummary {
  mnemo::v1::FinishReason finish_reason = mnemo::v1::FINISH_REASON_UNSPECIFIED;
  mnemo::v1::Usage usage;
  int chunks = 0;  // chunks received, the last one included
};

// Called once per chunk, in arrival order, on the calling thread. Returning false cancels the
// stream (the server then finishes with FINISH_REASON_CANCELLED or CANCELLED).
using ChunkCallback = std::function<bool(const mnemo::v1::GenerateResponse&)>;

// Health as reported by grpc.health.v1 ("SERVING", "NOT_SERVING", "SERVICE_UNKNOWN", ...).
struct HealthResult {
  bool serving = false;
  std::string status;
};

class Client {
 public:
  // `address` is any gRPC target ("127.0.0.1:50051", "dns:///mnemo:50051"); the channel is
  // plaintext. `timeout` is the deadline of every call; for Generate it bounds the whole
  // stream.
  Client(const std::string& address, absl::Duration timeout);
  // The same over `connection` (TLS, client certificate, API key); errors name the file or
  // option at fault.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& address,
                                                         absl::Duration timeout,
                                                         const ConnectionOptions& connection);

  // Streams a generation; `on_chunk` sees every chunk. Returns the last chunk's finish reason
  // and usage, or the stream's non-OK status.
  absl::StatusOr<GenerateSummary> Generate(const mnemo::v1::GenerateRequest& request,
                                           const ChunkCallback& on_chunk);

  absl::StatusOr<mnemo::v1::ScoreResponse> Score(const mnemo::v1::ScoreRequest& request);
  // add_special_tokens: the model's BOS first (when it has one).
  absl::StatusOr<mnemo::v1::TokenizeResponse> Tokenize(const std::string& text,
                                                       bool add_special_tokens = false);
  // The text `ids` stand for; skip_special_tokens leaves BOS/EOS/PAD... out.
  absl::StatusOr<std::string> Detokenize(const std::vector<int>& ids, bool skip_special_tokens);

  absl::StatusOr<mnemo::v1::Session> CreateSession(const std::string& session_id);
  absl::StatusOr<mnemo::v1::Session> CreateSession(const mnemo::v1::CreateSessionRequest& request);
  absl::StatusOr<mnemo::v1::Session> GetSession(const std::string& session_id);
  // Follows next_page_token until the server has listed every session.
  absl::StatusOr<std::vector<mnemo::v1::Session>> ListSessions();
  absl::Status DeleteSession(const std::string& session_id);
  // Moving sessions (docs/durability.md): the session's snapshot bytes; a new session from
  // them (`session_id` empty = the exported id); a copy under `new_session_id` (empty =
  // server-generated).
  absl::StatusOr<std::string> ExportSession(const std::string& session_id);
  absl::StatusOr<mnemo::v1::Session> ImportSession(const std::string& snapshot,
                                                   const std::string& session_id);
  absl::StatusOr<mnemo::v1::Session> ForkSession(const std::string& session_id,
                                                 const std::string& new_session_id);

  absl::StatusOr<std::vector<mnemo::v1::Model>> ListModels();

  // grpc.health.v1.Health/Check for `service` ("" = the whole server).
  absl::StatusOr<HealthResult> Health(const std::string& service);

 private:
  // A context carrying the client's deadline and, for a call on a session, its id in the
  // `x-mnemo-session` header (what routers in front of several replicas hash on).
  std::unique_ptr<grpc::ClientContext> NewContext(const std::string& session_id = "") const;

  Client(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout,
         ConnectionOptions connection);

  absl::Duration timeout_;
  ConnectionOptions connection_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<mnemo::v1::Generation::Stub> generation_;
  std::unique_ptr<mnemo::v1::Sessions::Stub> sessions_;
  std::unique_ptr<mnemo::v1::Models::Stub> models_;
};

}  // namespace mnemo::client

#endif  // MNEMO_CLIENTS_CPP_MNEMO_CLIENT_H_
