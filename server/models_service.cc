#include "server/models_service.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "server/proto_convert.h"

namespace mnemo::server {

grpc::ServerUnaryReactor* ModelsService::ListModels(grpc::CallbackServerContext* context,
                                                    const v1::ListModelsRequest* request,
                                                    v1::ListModelsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<engine::Engine*> engine = state_.BeginCall();
  if (!engine.ok()) {
    FinishUnary(state_, "ListModels", /*admitted=*/false, reactor, engine.status());
    return reactor;
  }
  const std::vector<engine::ModelInfo> models = {(*engine)->model_info()};
  FinishUnary(state_, "ListModels", /*admitted=*/true, reactor,
              FillModelsPage(models, *request, response));
  return reactor;
}

grpc::ServerUnaryReactor* ModelsService::GetModel(grpc::CallbackServerContext* context,
                                                  const v1::GetModelRequest* request,
                                                  v1::Model* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<engine::Engine*> engine = state_.BeginCall();
  if (!engine.ok()) {
    FinishUnary(state_, "GetModel", /*admitted=*/false, reactor, engine.status());
    return reactor;
  }
  const engine::ModelInfo& model = (*engine)->model_info();
  absl::Status status;
  if (request->name().empty()) {
    status = absl::InvalidArgumentError("name: must not be empty");
  } else if (request->name() != model.name) {
    status = absl::NotFoundError(absl::StrCat("model \"", request->name(), "\" not found"));
  } else {
    ToProto(model, response);
  }
  FinishUnary(state_, "GetModel", /*admitted=*/true, reactor, status);
  return reactor;
}

}  // namespace mnemo::server
