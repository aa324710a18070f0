#include "server/datastores_service.h"

#include <utility>

#include "server/proto_convert.h"
#include "server/raw_message.h"

namespace mnemo::server {

grpc::ServerUnaryReactor* DatastoresService::ListDatastores(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ListDatastoresRequest parsed;
  engine::Engine* engine = BeginRawUnary(state_, "ListDatastores", reactor, *request, &parsed);
  if (engine == nullptr) return reactor;
  v1::ListDatastoresResponse reply;
  absl::Status status = FillDatastoresPage(engine->ListDatastores(), parsed, &reply);
  if (status.ok()) SerializeResponse(reply, response);
  FinishUnary(state_, "ListDatastores", /*admitted=*/true, reactor, status);
  return reactor;
}

grpc::ServerUnaryReactor* DatastoresService::GetDatastore(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetDatastoreRequest parsed;
  engine::Engine* engine = BeginRawUnary(state_, "GetDatastore", reactor, *request, &parsed);
  if (engine == nullptr) return reactor;
  ServerState* state = &state_;
  engine->GetDatastore(parsed.name(), parsed.session_id(),
                       [state, reactor, response](absl::StatusOr<engine::DatastoreInfo> info) {
                         if (info.ok()) {
                           v1::Datastore reply;
                           ToProto(*info, &reply);
                           SerializeResponse(reply, response);
                         }
                         FinishUnary(*state, "GetDatastore", /*admitted=*/true, reactor,
                                     info.status());
                       });
  return reactor;
}

grpc::ServerUnaryReactor* DatastoresService::AddToSessionDatastore(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::AddToSessionDatastoreRequest parsed;
  engine::Engine* engine =
      BeginRawUnary(state_, "AddToSessionDatastore", reactor, *request, &parsed);
  if (engine == nullptr) return reactor;
  ServerState* state = &state_;
  engine->AddToSessionDatastore(
      ToAddToDatastoreOptions(parsed),
      [state, reactor, response](absl::StatusOr<engine::AddToDatastoreResult> result) {
        if (result.ok()) {
          v1::AddToSessionDatastoreResponse reply;
          reply.set_entries_added(result->entries_added);
          ToProto(result->datastore, reply.mutable_datastore());
          SerializeResponse(reply, response);
        }
        FinishUnary(*state, "AddToSessionDatastore", /*admitted=*/true, reactor, result.status());
      });
  return reactor;
}

}  // namespace mnemo::server
