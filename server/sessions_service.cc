#include "server/sessions_service.h"

#include <string>
#include <utility>
#include <vector>

#include "server/proto_convert.h"
#include "server/raw_message.h"
#include "server/session_transfer.h"

namespace mnemo::server {
namespace {

// Completion for the methods that answer with one Session.
engine::Engine::SessionDone SessionReply(ServerState* state, const char* rpc,
                                         grpc::ServerUnaryReactor* reactor,
                                         grpc::ByteBuffer* response) {
  return [state, rpc, reactor, response](absl::StatusOr<engine::SessionInfo> info) {
    if (info.ok()) {
      v1::Session reply;
      ToProto(*info, &reply);
      SerializeResponse(reply, response);
    }
    FinishUnary(*state, rpc, /*admitted=*/true, reactor, info.status());
  };
}

}  // namespace

grpc::ServerUnaryReactor* SessionsService::CreateSession(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::CreateSessionRequest parsed;
  engine::Engine* engine = BeginRawUnary(state_, "CreateSession", reactor, *request, &parsed);
  if (engine == nullptr) return reactor;
  engine->CreateSession(ToCreateSessionOptions(parsed),
                        SessionReply(&state_, "CreateSession", reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* SessionsService::GetSession(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetSessionRequest parsed;
  engine::Engine* engine = BeginRawUnary(state_, "GetSession", reactor, *request, &parsed);
  if (engine == nullptr) return reactor;
  engine->GetSession(parsed.session_id(), SessionReply(&state_, "GetSession", reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* SessionsService::ListSessions(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ListSessionsRequest parsed;
  engine::Engine* engine = BeginRawUnary(state_, "ListSessions", reactor, *request, &parsed);
  if (engine == nullptr) return reactor;
  // Reject a bad page request before asking the engine for anything.
  if (absl::StatusOr<PageRequest> page = ParsePageRequest(parsed.page_size(), parsed.page_token());
      !page.ok()) {
    FinishUnary(state_, "ListSessions", /*admitted=*/true, reactor, page.status());
    return reactor;
  }
  ServerState* state = &state_;
  engine->ListSessions([state, reactor, parsed = std::move(parsed),
                        response](absl::StatusOr<std::vector<engine::SessionInfo>> sessions) {
    absl::Status status = sessions.status();
    v1::ListSessionsResponse reply;
    if (status.ok()) status = FillSessionsPage(*sessions, parsed, &reply);
    if (status.ok()) SerializeResponse(reply, response);
    FinishUnary(*state, "ListSessions", /*admitted=*/true, reactor, status);
  });
  return reactor;
}

grpc::ServerUnaryReactor* SessionsService::DeleteSession(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::DeleteSessionRequest parsed;
  engine::Engine* engine = BeginRawUnary(state_, "DeleteSession", reactor, *request, &parsed);
  if (engine == nullptr) return reactor;
  ServerState* state = &state_;
  engine->DeleteSession(parsed.session_id(), [state, reactor, response](absl::Status status) {
    if (status.ok()) SerializeResponse(v1::DeleteSessionResponse(), response);
    FinishUnary(*state, "DeleteSession", /*admitted=*/true, reactor, status);
  });
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* SessionsService::ExportSession(
    grpc::CallbackServerContext*, const grpc::ByteBuffer* request) {
  return StartExportSession(state_, *request);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* SessionsService::ImportSession(
    grpc::CallbackServerContext*, grpc::ByteBuffer* response) {
  return StartImportSession(state_, response);
}

grpc::ServerUnaryReactor* SessionsService::ForkSession(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ForkSessionRequest parsed;
  engine::Engine* engine = BeginRawUnary(state_, "ForkSession", reactor, *request, &parsed);
  if (engine == nullptr) return reactor;
  engine->ForkSession(parsed.session_id(), parsed.new_session_id(),
                      SessionReply(&state_, "ForkSession", reactor, response));
  return reactor;
}

}  // namespace mnemo::server
