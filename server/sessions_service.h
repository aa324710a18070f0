// SessionsService: mnemo.v1.Sessions over the callback API. Every method completes from the
// engine's callback (which runs on the engine thread and only converts and Finishes). Methods
// are registered raw, like Generation's, so a session id or page token that is not UTF-8 gets
// INVALID_ARGUMENT naming the field (see raw_message.h).
// ListSessions paginates the engine's sorted list here (page_size <= 1000).
// Borrows ServerState (must outlive the grpc::Server). Thread-safe: no state of its own.
#ifndef MNEMO_SERVER_SESSIONS_SERVICE_H_
#define MNEMO_SERVER_SESSIONS_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "mnemo/v1/sessions.grpc.pb.h"
#include "server/server_state.h"

namespace mnemo::server {

using SessionsServiceBase = v1::Sessions::WithRawCallbackMethod_CreateSession<
    v1::Sessions::WithRawCallbackMethod_GetSession<v1::Sessions::WithRawCallbackMethod_ListSessions<
        v1::Sessions::WithRawCallbackMethod_DeleteSession<
            v1::Sessions::WithRawCallbackMethod_ExportSession<
                v1::Sessions::WithRawCallbackMethod_ImportSession<
                    v1::Sessions::WithRawCallbackMethod_ForkSession<v1::Sessions::Service>>>>>>>;

class SessionsService final : public SessionsServiceBase {
 public:
  explicit SessionsService(ServerState& state) : state_(state) {}

  // Each `request` is the serialised request message; `response` receives the serialised reply.
  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  // Moving sessions (session_transfer.h for the two streaming ones).
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ExportSession(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* ImportSession(grpc::CallbackServerContext* context,
                                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

 private:
  ServerState& state_;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_SESSIONS_SERVICE_H_
