#include "server/sessions_service.h"

#include <string>
#include <utility>
#include <vector>

#include "server/proto_convert.h"

namespace mnemo::server {
namespace {

// Completion for the methods that answer with one Session.
engine::Engine::SessionDone SessionReply(ServerState* state, const char* rpc,
                                         grpc::ServerUnaryReactor* reactor, v1::Session* response) {
  return [state, rpc, reactor, response](absl::StatusOr<engine::SessionInfo> info) {
    if (info.ok()) ToProto(*info, response);
    FinishUnary(*state, rpc, /*admitted=*/true, reactor, info.status());
  };
}

}  // namespace

grpc::ServerUnaryReactor* SessionsService::CreateSession(grpc::CallbackServerContext* context,
                                                         const v1::CreateSessionRequest* request,
                                                         v1::Session* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<engine::Engine*> engine = state_.BeginCall();
  if (!engine.ok()) {
    FinishUnary(state_, "CreateSession", /*admitted=*/false, reactor, engine.status());
    return reactor;
  }
  (*engine)->CreateSession(ToCreateSessionOptions(*request),
                           SessionReply(&state_, "CreateSession", reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* SessionsService::GetSession(grpc::CallbackServerContext* context,
                                                      const v1::GetSessionRequest* request,
                                                      v1::Session* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<engine::Engine*> engine = state_.BeginCall();
  if (!engine.ok()) {
    FinishUnary(state_, "GetSession", /*admitted=*/false, reactor, engine.status());
    return reactor;
  }
  (*engine)->GetSession(request->session_id(),
                        SessionReply(&state_, "GetSession", reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* SessionsService::ListSessions(grpc::CallbackServerContext* context,
                                                        const v1::ListSessionsRequest* request,
                                                        v1::ListSessionsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<engine::Engine*> engine = state_.BeginCall();
  if (!engine.ok()) {
    FinishUnary(state_, "ListSessions", /*admitted=*/false, reactor, engine.status());
    return reactor;
  }
  // Reject a bad page request before asking the engine for anything.
  if (absl::StatusOr<PageRequest> page =
          ParsePageRequest(request->page_size(), request->page_token());
      !page.ok()) {
    FinishUnary(state_, "ListSessions", /*admitted=*/true, reactor, page.status());
    return reactor;
  }
  ServerState* state = &state_;
  (*engine)->ListSessions([state, reactor, request,
                           response](absl::StatusOr<std::vector<engine::SessionInfo>> sessions) {
    absl::Status status = sessions.status();
    if (status.ok()) status = FillSessionsPage(*sessions, *request, response);
    FinishUnary(*state, "ListSessions", /*admitted=*/true, reactor, status);
  });
  return reactor;
}

grpc::ServerUnaryReactor* SessionsService::DeleteSession(grpc::CallbackServerContext* context,
                                                         const v1::DeleteSessionRequest* request,
                                                         v1::DeleteSessionResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<engine::Engine*> engine = state_.BeginCall();
  if (!engine.ok()) {
    FinishUnary(state_, "DeleteSession", /*admitted=*/false, reactor, engine.status());
    return reactor;
  }
  ServerState* state = &state_;
  (*engine)->DeleteSession(request->session_id(), [state, reactor](absl::Status status) {
    FinishUnary(*state, "DeleteSession", /*admitted=*/true, reactor, status);
  });
  return reactor;
}

}  // namespace mnemo::server
