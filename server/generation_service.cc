#include "server/generation_service.h"

#include <string>
#include <utility>
#include <vector>

#include "server/generate_reactor.h"
#include "server/proto_convert.h"
#include "server/raw_message.h"

namespace mnemo::server {
namespace {

absl::StatusOr<engine::ScoreOptions> ParseScoreRequest(const grpc::ByteBuffer& bytes) {
  v1::ScoreRequest request;
  if (absl::Status parsed = ParseRequest(bytes, &request); !parsed.ok()) return parsed;
  return ToScoreOptions(request);
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* /*context*/, const grpc::ByteBuffer* request) {
  return GenerateReactor::Start(state_, *request);
}

grpc::ServerUnaryReactor* GenerationService::Score(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<engine::Engine*> engine = state_.BeginCall();
  if (!engine.ok()) {
    FinishUnary(state_, "Score", /*admitted=*/false, reactor, engine.status());
    return reactor;
  }
  absl::StatusOr<engine::ScoreOptions> options = ParseScoreRequest(*request);
  if (!options.ok()) {
    FinishUnary(state_, "Score", /*admitted=*/true, reactor, options.status());
    return reactor;
  }
  ServerState* state = &state_;
  // `response` stays valid until Finish; the callback runs once, on the engine thread.
  (*engine)->Score(*std::move(options),
                   [state, reactor, response](absl::StatusOr<engine::ScoreResult> result) {
                     if (result.ok()) {
                       v1::ScoreResponse reply;
                       ToProto(*result, &reply);
                       SerializeResponse(reply, response);
                     }
                     FinishUnary(*state, "Score", /*admitted=*/true, reactor, result.status());
                   });
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<engine::Engine*> engine = state_.BeginCall();
  if (!engine.ok()) {
    FinishUnary(state_, "Tokenize", /*admitted=*/false, reactor, engine.status());
    return reactor;
  }
  v1::TokenizeRequest parsed;
  absl::Status status = ParseRequest(*request, &parsed);
  if (status.ok()) {
    absl::StatusOr<engine::TokenizeResult> result =
        (*engine)->Tokenize(parsed.text(), parsed.add_special_tokens());
    status = result.status();
    if (result.ok()) {
      v1::TokenizeResponse reply;
      ToProto(*result, &reply);
      SerializeResponse(reply, response);
    }
  }
  FinishUnary(state_, "Tokenize", /*admitted=*/true, reactor, status);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  v1::DetokenizeRequest parsed;
  engine::Engine* engine = BeginRawUnary(state_, "Detokenize", reactor, *request, &parsed);
  if (engine == nullptr) return reactor;
  const std::vector<int> ids(parsed.ids().begin(), parsed.ids().end());
  absl::StatusOr<std::string> text = engine->Detokenize(ids, parsed.skip_special_tokens());
  if (text.ok()) {
    v1::DetokenizeResponse reply;
    reply.set_text(*std::move(text));
    SerializeResponse(reply, response);
  }
  FinishUnary(state_, "Detokenize", /*admitted=*/true, reactor, text.status());
  return reactor;
}

}  // namespace mnemo::server
