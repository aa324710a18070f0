#include "clients/cpp/mnemo_client.h"

#include <algorithm>
#include <utility>

#include "grpc/health/v1/health.grpc.pb.h"

namespace mnemo::client {
namespace {

using mnemo::v1::GenerateRequest;
using mnemo::v1::GenerateResponse;

// Servers answer ListSessions with at most 1000 per page; ask for the most.
constexpr int kListPageSize = 1000;

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // The canonical codes have the same numbers in gRPC and Abseil.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

Client::Client(const std::string& address, absl::Duration timeout)
    : Client(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), timeout, {}) {}

Client::Client(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout,
               ConnectionOptions connection)
    : timeout_(timeout),
      connection_(std::move(connection)),
      channel_(std::move(channel)),
      generation_(mnemo::v1::Generation::NewStub(channel_)),
      sessions_(mnemo::v1::Sessions::NewStub(channel_)),
      models_(mnemo::v1::Models::NewStub(channel_)) {}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& address,
                                                        absl::Duration timeout,
                                                        const ConnectionOptions& connection) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      client::Connect(address, connection);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<Client>(new Client(*std::move(channel), timeout, connection));
}

std::unique_ptr<grpc::ClientContext> Client::NewContext(const std::string& session_id) const {
  auto context = std::make_unique<grpc::ClientContext>();
  if (timeout_ != absl::InfiniteDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  }
  if (!session_id.empty()) context->AddMetadata("x-mnemo-session", session_id);
  AddCallMetadata(connection_, context.get());
  return context;
}

absl::StatusOr<GenerateSummary> Client::Generate(const GenerateRequest& request,
                                                 const ChunkCallback& on_chunk) {
  std::unique_ptr<grpc::ClientContext> context = NewContext(request.session_id());
  std::unique_ptr<grpc::ClientReader<GenerateResponse>> reader =
      generation_->Generate(context.get(), request);
  GenerateSummary summary;
  GenerateResponse chunk;
  bool cancelled = false;
  while (reader->Read(&chunk)) {
    ++summary.chunks;
    if (chunk.finish_reason() != mnemo::v1::FINISH_REASON_UNSPECIFIED) {
      summary.finish_reason = chunk.finish_reason();
    }
    if (chunk.has_usage()) summary.usage = chunk.usage();
    if (!cancelled && !on_chunk(chunk)) {
      // Keep reading after TryCancel so the stream drains and Finish returns promptly.
      context->TryCancel();
      cancelled = true;
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return summary;
}

absl::StatusOr<mnemo::v1::ScoreResponse> Client::Score(const mnemo::v1::ScoreRequest& request) {
  std::unique_ptr<grpc::ClientContext> context = NewContext(request.session_id());
  mnemo::v1::ScoreResponse response;
  grpc::Status status = generation_->Score(context.get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<mnemo::v1::TokenizeResponse> Client::Tokenize(const std::string& text,
                                                             bool add_special_tokens) {
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  mnemo::v1::TokenizeRequest request;
  request.set_text(text);
  request.set_add_special_tokens(add_special_tokens);
  mnemo::v1::TokenizeResponse response;
  grpc::Status status = generation_->Tokenize(context.get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<std::string> Client::Detokenize(const std::vector<int>& ids,
                                               bool skip_special_tokens) {
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  mnemo::v1::DetokenizeRequest request;
  request.mutable_ids()->Add(ids.begin(), ids.end());
  request.set_skip_special_tokens(skip_special_tokens);
  mnemo::v1::DetokenizeResponse response;
  grpc::Status status = generation_->Detokenize(context.get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::move(*response.mutable_text());
}

absl::StatusOr<mnemo::v1::Session> Client::CreateSession(const std::string& session_id) {
  mnemo::v1::CreateSessionRequest request;
  request.set_session_id(session_id);
  return CreateSession(request);
}

absl::StatusOr<mnemo::v1::Session> Client::CreateSession(
    const mnemo::v1::CreateSessionRequest& request) {
  std::unique_ptr<grpc::ClientContext> context = NewContext(request.session_id());
  mnemo::v1::Session response;
  grpc::Status status = sessions_->CreateSession(context.get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<mnemo::v1::Session> Client::GetSession(const std::string& session_id) {
  std::unique_ptr<grpc::ClientContext> context = NewContext(session_id);
  mnemo::v1::GetSessionRequest request;
  request.set_session_id(session_id);
  mnemo::v1::Session response;
  grpc::Status status = sessions_->GetSession(context.get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<std::vector<mnemo::v1::Session>> Client::ListSessions() {
  std::vector<mnemo::v1::Session> sessions;
  std::string page_token;
  do {
    std::unique_ptr<grpc::ClientContext> context = NewContext();
    mnemo::v1::ListSessionsRequest request;
    request.set_page_size(kListPageSize);
    request.set_page_token(page_token);
    mnemo::v1::ListSessionsResponse response;
    grpc::Status status = sessions_->ListSessions(context.get(), request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    for (mnemo::v1::Session& session : *response.mutable_sessions()) {
      sessions.push_back(std::move(session));
    }
    page_token = response.next_page_token();
  } while (!page_token.empty());
  return sessions;
}

absl::Status Client::DeleteSession(const std::string& session_id) {
  std::unique_ptr<grpc::ClientContext> context = NewContext(session_id);
  mnemo::v1::DeleteSessionRequest request;
  request.set_session_id(session_id);
  mnemo::v1::DeleteSessionResponse response;
  return FromGrpcStatus(sessions_->DeleteSession(context.get(), request, &response));
}

absl::StatusOr<std::string> Client::ExportSession(const std::string& session_id) {
  std::unique_ptr<grpc::ClientContext> context = NewContext(session_id);
  mnemo::v1::ExportSessionRequest request;
  request.set_session_id(session_id);
  std::unique_ptr<grpc::ClientReader<mnemo::v1::SessionSnapshotChunk>> reader =
      sessions_->ExportSession(context.get(), request);
  std::string snapshot;
  mnemo::v1::SessionSnapshotChunk chunk;
  while (reader->Read(&chunk)) {
    if (chunk.total_bytes() > 0) snapshot.reserve(static_cast<size_t>(chunk.total_bytes()));
    snapshot += chunk.data();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return snapshot;
}

absl::StatusOr<mnemo::v1::Session> Client::ImportSession(const std::string& snapshot,
                                                         const std::string& session_id) {
  std::unique_ptr<grpc::ClientContext> context = NewContext(session_id);
  mnemo::v1::Session response;
  std::unique_ptr<grpc::ClientWriter<mnemo::v1::ImportSessionRequest>> writer =
      sessions_->ImportSession(context.get(), &response);
  constexpr size_t kChunk = size_t{1} << 20;
  size_t sent = 0;
  do {  // at least one message, even for empty bytes (the server then says why)
    mnemo::v1::ImportSessionRequest request;
    if (sent == 0) request.set_session_id(session_id);
    const size_t n = std::min(kChunk, snapshot.size() - sent);
    request.set_data(snapshot.substr(sent, n));
    sent += n;
    if (!writer->Write(request)) break;  // the server finished early: Finish says why
  } while (sent < snapshot.size());
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<mnemo::v1::Session> Client::ForkSession(const std::string& session_id,
                                                       const std::string& new_session_id) {
  // Routed to the replica holding the source session.
  std::unique_ptr<grpc::ClientContext> context = NewContext(session_id);
  mnemo::v1::ForkSessionRequest request;
  request.set_session_id(session_id);
  request.set_new_session_id(new_session_id);
  mnemo::v1::Session response;
  grpc::Status status = sessions_->ForkSession(context.get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<std::vector<mnemo::v1::Model>> Client::ListModels() {
  std::vector<mnemo::v1::Model> models;
  std::string page_token;
  do {
    std::unique_ptr<grpc::ClientContext> context = NewContext();
    mnemo::v1::ListModelsRequest request;
    request.set_page_token(page_token);
    mnemo::v1::ListModelsResponse response;
    grpc::Status status = models_->ListModels(context.get(), request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    for (mnemo::v1::Model& model : *response.mutable_models()) {
      models.push_back(std::move(model));
    }
    page_token = response.next_page_token();
  } while (!page_token.empty());
  return models;
}

absl::StatusOr<HealthResult> Client::Health(const std::string& service) {
  std::unique_ptr<grpc::ClientContext> context = NewContext();
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  std::unique_ptr<grpc::health::v1::Health::Stub> stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::Status status = stub->Check(context.get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  HealthResult result;
  result.serving = response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  result.status = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  return result;
}

}  // namespace mnemo::client
