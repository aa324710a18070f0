// GenerationService: mnemo.v1.Generation over the callback API. Generate gets its own reactor
// (GenerateReactor); Score completes from the engine's callback; Tokenize and Detokenize are
// synchronous and cheap. Generate, Score and Tokenize are registered raw (ByteBuffer in and
// out) because their requests carry free text: a string protobuf refuses to parse (invalid
// UTF-8) then gets INVALID_ARGUMENT naming the field instead of gRPC's bare UNIMPLEMENTED (see
// raw_message.h); Detokenize is raw too, so that every method shares one start
// (BeginRawUnary) and the service has no synchronous method.
// Borrows ServerState (must outlive the grpc::Server). Thread-safe: holds no state of its own.
#ifndef MNEMO_SERVER_GENERATION_SERVICE_H_
#define MNEMO_SERVER_GENERATION_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "mnemo/v1/generation.grpc.pb.h"
#include "server/server_state.h"

namespace mnemo::server {

using GenerationServiceBase =
    v1::Generation::WithRawCallbackMethod_Generate<v1::Generation::WithRawCallbackMethod_Score<
        v1::Generation::WithRawCallbackMethod_Tokenize<
            v1::Generation::WithRawCallbackMethod_Detokenize<v1::Generation::Service>>>>;

class GenerationService final : public GenerationServiceBase {
 public:
  explicit GenerationService(ServerState& state) : state_(state) {}

  // Each `request` is the serialised request message; `response` receives the serialised reply.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

 private:
  ServerState& state_;
};

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_GENERATION_SERVICE_H_
