#include "server/models_service.h"

#include <memory>
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
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "ListModels", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  engine::Engine* engine = call->engine();
  const std::vector<engine::ModelInfo> models = {engine->model_info()};
  v1::ListModelsResponse reply;
  absl::Status status = FillModelsPage(models, parsed, &reply);
  if (status.ok()) SerializeResponse(reply, response);
  call->FinishUnary(reactor, status);
  return reactor;
}

grpc::ServerUnaryReactor* ModelsService::GetModel(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetModelRequest parsed;
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "GetModel", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  engine::Engine* engine = call->engine();
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
  call->FinishUnary(reactor, status);
  return reactor;
}

}  // namespace mnemo::server
