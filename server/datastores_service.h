// DatastoresService: mnemo.v1.Datastores over the callback API (list and describe kNN-LM
// datastores, fill a session's private one). Methods are registered raw, like Sessions', so a
// name or text that is not UTF-8 gets INVALID_ARGUMENT naming the field (see raw_message.h).
// ListDatastores answers inline (shared datastores are immutable); GetDatastore for
// "session" and AddToSessionDatastore complete from the engine's callback.
// Borrows ServerState (must outlive the grpc::Server). Thread-safe: no state of its own.
#ifndef MNEMO_SERVER_DATASTORES_SERVICE_H_
#define MNEMO_SERVER_DATASTORES_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "mnemo/v1/datastores.grpc.pb.h"
#include "server/server_state.h"

namespace mnemo::server {

using DatastoresServiceBase = v1::Datastores::WithRawCallbackMethod_ListDatastores<
    v1::Datastores::WithRawCallbackMethod_GetDatastore<
        v1::Datastores::WithRawCallbackMethod_AddToSessionDatastore<v1::Datastores::Service>>>;

class DatastoresService final : public DatastoresServiceBase {
 public:
  explicit DatastoresService(ServerState& state) : state_(state) {}

  // Each `request` is the serialised request message; `response` receives the serialised reply.
  grpc::ServerUnaryReactor* ListDatastores(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetDatastore(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* AddToSessionDatastore(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) override;

 private:
  ServerState& state_;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_DATASTORES_SERVICE_H_
