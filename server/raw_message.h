// Request parsing and response serialisation for methods registered as raw (ByteBuffer)
// callbacks. Why raw: protobuf refuses to parse a proto3 `string` field holding invalid UTF-8,
// and gRPC then answers with a bare UNIMPLEMENTED before any of our code runs. Parsing here
// lets a bad request get INVALID_ARGUMENT naming the field, e.g. "prompt is not valid UTF-8".
//
// Pure functions; thread-safe.
#ifndef MNEMO_SERVER_RAW_MESSAGE_H_
#define MNEMO_SERVER_RAW_MESSAGE_H_

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/engine.h"
#include "server/server_state.h"

namespace mnemo::server {

// Parses `bytes` into `out`. INVALID_ARGUMENT naming the (dotted) field whose string is not
// valid UTF-8, or saying the bytes are not a `out`-typed message.
absl::Status ParseRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* out);

// Serialises `message` into `out` (replacing its contents).
void SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out);

// The start every raw unary method shares: admits the call and parses its request. On either
// failure finishes `reactor` (recording the call) and returns null.
engine::Engine* BeginRawUnary(ServerState& state, absl::string_view rpc,
                              grpc::ServerUnaryReactor* reactor, const grpc::ByteBuffer& bytes,
                              google::protobuf::Message* request);

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_RAW_MESSAGE_H_
