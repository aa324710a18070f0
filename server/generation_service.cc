#include "server/generation_service.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/call.h"
#include "server/generate_reactor.h"
#include "server/proto_convert.h"
#include "server/raw_message.h"

namespace mnemo::server {
namespace {

// The request in the engine's terms: the caller's session id in the engine's namespace, the
// datastore checked against the tenant's list.
absl::StatusOr<engine::ScoreOptions> ParseScore(Call& call, v1::ScoreRequest& request) {
  absl::StatusOr<std::string> session = call.EngineSessionId(request.session_id());
  if (!session.ok()) return session.status();
  request.set_session_id(*std::move(session));
  if (request.has_knn_lm()) {
    if (absl::Status s = call.CheckDatastore(request.knn_lm().datastore()); !s.ok()) return s;
  }
  call.set_prompt(request.text());
  return ToScoreOptions(request);
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return GenerateReactor::Start(state_, context, *request);
}

grpc::ServerUnaryReactor* GenerationService::Score(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::ScoreRequest parsed;
  std::shared_ptr<Call> call = BeginRawUnary(state_, context, "Score", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  absl::StatusOr<engine::ScoreOptions> options = ParseScore(*call, parsed);
  if (!options.ok()) {
    call->FinishUnary(reactor, options.status());
    return reactor;
  }
  // `response` stays valid until Finish; the callback runs once, on the engine thread.
  call->engine()->Score(*std::move(options),
                        [call, reactor, response](absl::StatusOr<engine::ScoreResult> result) {
                          if (result.ok()) {
                            call->AddTokens(result->token_count, 0);
                            v1::ScoreResponse reply;
                            ToProto(*result, &reply);
                            SerializeResponse(reply, response);
                          }
                          call->FinishUnary(reactor, result.status());
                        },
                        call->CancelCheck());
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::TokenizeRequest parsed;
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "Tokenize", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  absl::StatusOr<engine::TokenizeResult> result =
      call->engine()->Tokenize(parsed.text(), parsed.add_special_tokens());
  if (result.ok()) {
    v1::TokenizeResponse reply;
    ToProto(*result, &reply);
    SerializeResponse(reply, response);
  }
  call->FinishUnary(reactor, result.status());
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::DetokenizeRequest parsed;
  std::shared_ptr<Call> call =
      BeginRawUnary(state_, context, "Detokenize", reactor, *request, &parsed);
  if (call == nullptr) return reactor;
  const std::vector<int> ids(parsed.ids().begin(), parsed.ids().end());
  absl::StatusOr<std::string> text = call->engine()->Detokenize(ids, parsed.skip_special_tokens());
  if (text.ok()) {
    v1::DetokenizeResponse reply;
    reply.set_text(*std::move(text));
    SerializeResponse(reply, response);
  }
  call->FinishUnary(reactor, text.status());
  return reactor;
}

}  // namespace mnemo::server
