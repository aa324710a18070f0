#include "server/sessions_service.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/call.h"
#include "server/proto_convert.h"
#include "server/raw_message.h"
#include "server/session_transfer.h"

namespace mnemo::server {
namespace {

// Completion for the methods that answer with one Session (in the client's id terms).
engine::Engine::SessionDone SessionReply(std::shared_ptr<Call> call,
                                         grpc::ServerUnaryReactor* reactor,
                                         grpc::ByteBuffer* response) {
  return [call = std::move(call), reactor, response](absl::StatusOr<engine::SessionInfo> info) {
    if (info.ok()) {
      v1::Session reply;
      ToProto(*info, &reply);
      reply.set_session_id(call->ClientSessionId(info->session_id));
      call->set_session(reply.session_id());
      SerializeResponse(reply, response);
    }
    call->FinishUnary(reactor, info.status());
  };
}

}  // namespace

grpc::ServerUnaryReactor* SessionsService::CreateSession(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::CreateSessionRequest parsed;
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "CreateSession", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  engine::CreateSessionOptions options = ToCreateSessionOptions(parsed);
  if (parsed.session_id().empty()) {
    // Without tenants the engine picks an id; with them it must carry the tenant's prefix.
    if (call->tenant() != nullptr) options.session_id = call->NewEngineSessionId();
  } else {
    absl::StatusOr<std::string> id = call->EngineSessionId(parsed.session_id(), /*required=*/true);
    if (!id.ok()) {
      call->FinishUnary(reactor, id.status());
      return reactor;
    }
    options.session_id = *std::move(id);
  }
  CheckSessionQuota(
      call, [call, reactor, response, options = std::move(options)](absl::Status quota) mutable {
        if (!quota.ok()) return call->FinishUnary(reactor, quota);
        call->engine()->CreateSession(std::move(options), SessionReply(call, reactor, response));
      });
  return reactor;
}

grpc::ServerUnaryReactor* SessionsService::GetSession(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetSessionRequest parsed;
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "GetSession", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  absl::StatusOr<std::string> id = call->EngineSessionId(parsed.session_id(), /*required=*/true);
  if (!id.ok()) {
    call->FinishUnary(reactor, id.status());
    return reactor;
  }
  call->engine()->GetSession(*std::move(id), SessionReply(call, reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* SessionsService::ListSessions(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ListSessionsRequest parsed;
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "ListSessions", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  // Reject a bad page request before asking the engine for anything.
  if (absl::StatusOr<PageRequest> page = ParsePageRequest(parsed.page_size(), parsed.page_token());
      !page.ok()) {
    call->FinishUnary(reactor, page.status());
    return reactor;
  }
  call->engine()->ListSessions([call, reactor, parsed = std::move(parsed), response](
                                   absl::StatusOr<std::vector<engine::SessionInfo>> sessions) {
    absl::Status status = sessions.status();
    v1::ListSessionsResponse reply;
    if (status.ok()) {
      // Only the caller's own sessions, under the ids it knows them by (still sorted: one
      // prefix removed from ids that all carry it keeps their order).
      std::vector<engine::SessionInfo> own;
      for (engine::SessionInfo& s : *sessions) {
        if (!call->OwnsSession(s.session_id)) continue;
        s.session_id = call->ClientSessionId(s.session_id);
        own.push_back(std::move(s));
      }
      status = FillSessionsPage(own, parsed, &reply);
    }
    if (status.ok()) SerializeResponse(reply, response);
    call->FinishUnary(reactor, status);
  });
  return reactor;
}

grpc::ServerUnaryReactor* SessionsService::DeleteSession(grpc::CallbackServerContext* context,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::DeleteSessionRequest parsed;
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "DeleteSession", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  absl::StatusOr<std::string> id = call->EngineSessionId(parsed.session_id(), /*required=*/true);
  if (!id.ok()) {
    call->FinishUnary(reactor, id.status());
    return reactor;
  }
  call->engine()->DeleteSession(*std::move(id), [call, reactor, response](absl::Status status) {
    if (status.ok()) SerializeResponse(v1::DeleteSessionResponse(), response);
    call->FinishUnary(reactor, status);
  });
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* SessionsService::ExportSession(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return StartExportSession(state_, context, *request);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* SessionsService::ImportSession(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  return StartImportSession(state_, context, response);
}

grpc::ServerUnaryReactor* SessionsService::ForkSession(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ForkSessionRequest parsed;
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "ForkSession", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  absl::StatusOr<std::string> source =
      call->EngineSessionId(parsed.session_id(), /*required=*/true);
  absl::StatusOr<std::string> fork =
      parsed.new_session_id().empty()
          ? absl::StatusOr<std::string>(call->tenant() != nullptr ? call->NewEngineSessionId()
                                                                  : std::string())
          : server::EngineSessionId(call->tenant(), parsed.new_session_id());
  if (!source.ok() || !fork.ok()) {
    absl::Status bad = !source.ok() ? source.status() : fork.status();
    if (!fork.ok()) bad = absl::InvalidArgumentError(absl::StrCat("new_", bad.message()));
    call->FinishUnary(reactor, bad);
    return reactor;
  }
  call->set_session(parsed.session_id());
  CheckSessionQuota(call, [call, reactor, response, source = *std::move(source),
                           fork = *std::move(fork)](absl::Status quota) mutable {
    if (!quota.ok()) return call->FinishUnary(reactor, quota);
    call->engine()->ForkSession(std::move(source), std::move(fork),
                                SessionReply(call, reactor, response));
  });
  return reactor;
}

}  // namespace mnemo::server
