// SessionsService: mnemo.v1.Sessions over the callback API. Every method completes from the
// engine's callback (which runs on the engine thread and only converts and Finishes).
// ListSessions paginates the engine's sorted list here (page_size <= 1000).
// Borrows ServerState (must outlive the grpc::Server). Thread-safe: no state of its own.
#ifndef MNEMO_SERVER_SESSIONS_SERVICE_H_
#define MNEMO_SERVER_SESSIONS_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "mnemo/v1/sessions.grpc.pb.h"
#include "server/server_state.h"

namespace mnemo::server {

class SessionsService final : public v1::Sessions::CallbackService {
 public:
  explicit SessionsService(ServerState& state) : state_(state) {}

  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* context,
                                          const v1::CreateSessionRequest* request,
                                          v1::Session* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const v1::GetSessionRequest* request,
                                       v1::Session* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const v1::ListSessionsRequest* request,
                                         v1::ListSessionsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* context,
                                          const v1::DeleteSessionRequest* request,
                                          v1::DeleteSessionResponse* response) override;

 private:
  ServerState& state_;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_SESSIONS_SERVICE_H_
