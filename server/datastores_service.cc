#include "server/datastores_service.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/proto_convert.h"
#include "server/raw_message.h"

namespace mnemo::server {

grpc::ServerUnaryReactor* DatastoresService::ListDatastores(grpc::CallbackServerContext* context,
                                                            const grpc::ByteBuffer* request,
                                                            grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ListDatastoresRequest parsed;
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "ListDatastores", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  // Only the shared datastores this tenant may use (the list is sorted; filtering keeps it so).
  std::vector<engine::DatastoreInfo> visible;
  for (engine::DatastoreInfo& d : call->engine()->ListDatastores()) {
    if (call->CheckDatastore(d.name).ok()) visible.push_back(std::move(d));
  }
  v1::ListDatastoresResponse reply;
  absl::Status status = FillDatastoresPage(visible, parsed, &reply);
  if (status.ok()) SerializeResponse(reply, response);
  call->FinishUnary(reactor, status);
  return reactor;
}

grpc::ServerUnaryReactor* DatastoresService::GetDatastore(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::GetDatastoreRequest parsed;
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "GetDatastore", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  absl::StatusOr<std::string> session = call->EngineSessionId(parsed.session_id());
  absl::Status allowed = session.ok() ? call->CheckDatastore(parsed.name()) : session.status();
  if (!allowed.ok()) {
    call->FinishUnary(reactor, allowed);
    return reactor;
  }
  call->engine()->GetDatastore(
      parsed.name(), *std::move(session),
      [call, reactor, response](absl::StatusOr<engine::DatastoreInfo> info) {
        if (info.ok()) {
          v1::Datastore reply;
          ToProto(*info, &reply);
          if (info->session_private) {
            reply.set_session_id(call->ClientSessionId(info->session_id));
          }
          SerializeResponse(reply, response);
        }
        call->FinishUnary(reactor, info.status());
      });
  return reactor;
}

grpc::ServerUnaryReactor* DatastoresService::AddToSessionDatastore(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::AddToSessionDatastoreRequest parsed;
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "AddToSessionDatastore", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  absl::StatusOr<std::string> session =
      call->EngineSessionId(parsed.session_id(), /*required=*/true);
  if (!session.ok()) {
    call->FinishUnary(reactor, session.status());
    return reactor;
  }
  parsed.set_session_id(*std::move(session));
  call->set_prompt(parsed.text());
  call->engine()->AddToSessionDatastore(
      ToAddToDatastoreOptions(parsed),
      [call, reactor, response](absl::StatusOr<engine::AddToDatastoreResult> result) {
        if (result.ok()) {
          call->AddTokens(result->entries_added, 0);
          v1::AddToSessionDatastoreResponse reply;
          reply.set_entries_added(result->entries_added);
          ToProto(result->datastore, reply.mutable_datastore());
          reply.mutable_datastore()->set_session_id(
              call->ClientSessionId(result->datastore.session_id));
          SerializeResponse(reply, response);
        }
        call->FinishUnary(reactor, result.status());
      },
      call->CancelCheck());
  return reactor;
}

}  // namespace mnemo::server
