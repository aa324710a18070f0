#include "server/models_service.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "server/proto_convert.h"
#include "server/raw_message.h"

namespace mnemo::server {

grpc::ServerUnaryReactor* ModelsService::ListModels(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ListModelsRequest parsed;
  engine::Engine* engine = BeginRawUnary(state_, "ListModels", reactor, *request, &parsed);
  if (engine == nullptr) return reactor;
  const std::vector<engine::ModelInfo> models = {engine->model_info()};
  v1::ListModelsResponse reply;
  absl::Status status = FillModelsPage(models, parsed, &reply);
  if (status.ok()) SerializeResponse(reply, response);
  FinishUnary(state_, "ListModels", /*admitted=*/true, reactor, status);
  return reactor;
}

grpc::ServerUnaryReactor* ModelsService::GetModel(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetModelRequest parsed;
  engine::Engine* engine = BeginRawUnary(state_, "GetModel", reactor, *request, &parsed);
  if (engine == nullptr) return reactor;
  const engine::ModelInfo& model = engine->model_info();
  absl::Status status;
  if (parsed.name().empty()) {
    status = absl::InvalidArgumentError("name: must not be empty");
  } else if (parsed.name() != model.name) {
    status = absl::NotFoundError(absl::StrCat("model \"", parsed.name(), "\" not found"));
  } else {
    v1::Model reply;
    ToProto(model, &reply);
    SerializeResponse(reply, response);
  }
  FinishUnary(state_, "GetModel", /*admitted=*/true, reactor, status);
  return reactor;
}

}  // namespace mnemo::server
