// ModelsService: mnemo.v1.Models over the callback API. Answers synchronously from the
// engine's immutable ModelInfo (this release serves one model). Borrows ServerState (must
// outlive the grpc::Server). Thread-safe: no state of its own.
#ifndef MNEMO_SERVER_MODELS_SERVICE_H_
#define MNEMO_SERVER_MODELS_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "mnemo/v1/models.grpc.pb.h"
#include "server/server_state.h"

namespace mnemo::server {

class ModelsService final : public v1::Models::CallbackService {
 public:
  explicit ModelsService(ServerState& state) : state_(state) {}

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const v1::GetModelRequest* request,
                                     v1::Model* response) override;

 private:
  ServerState& state_;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_MODELS_SERVICE_H_
