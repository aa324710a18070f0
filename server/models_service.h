// ModelsService: mnemo.v1.Models over the callback API. Answers synchronously from the
// engine's immutable ModelInfo (this release serves one model). Borrows ServerState (must
// outlive the grpc::Server). Thread-safe: no state of its own. Registered raw, like the other
// services, so a model name or page token that is not UTF-8 is INVALID_ARGUMENT naming it.
#ifndef MNEMO_SERVER_MODELS_SERVICE_H_
#define MNEMO_SERVER_MODELS_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "mnemo/v1/models.grpc.pb.h"
#include "server/server_state.h"

namespace mnemo::server {

using ModelsServiceBase = v1::Models::WithRawCallbackMethod_ListModels<
    v1::Models::WithRawCallbackMethod_GetModel<v1::Models::Service>>;

class ModelsService final : public ModelsServiceBase {
 public:
  explicit ModelsService(ServerState& state) : state_(state) {}

  // Each `request` is the serialised request message; `response` receives the serialised reply.
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;

 private:
  ServerState& state_;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_MODELS_SERVICE_H_
