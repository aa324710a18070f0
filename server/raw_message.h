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

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/call.h"
#include "server/server_state.h"

namespace mnemo::server {

// Parses `bytes` into `out`. INVALID_ARGUMENT naming the (dotted) field whose string is not
// valid UTF-8, or that arrived with a wire type its type does not take (protobuf would keep it
// as an unknown field and the request would run with the field unset), or saying the bytes are
// not a `out`-typed message; CANCELLED when no message arrived at all (the call died first).
absl::Status ParseRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* out);

// Serialises `message` into `out` (replacing its contents).
void SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out);

// The start every raw unary method shares: admits the call (server/call.h) and parses its
// request. On either failure finishes `reactor` (recording the call) and returns null.
std::shared_ptr<Call> BeginRawUnary(ServerState& state, grpc::CallbackServerContext* context,
                                    absl::string_view rpc, grpc::ServerUnaryReactor* reactor,
                                    const grpc::ByteBuffer& bytes,
                                    google::protobuf::Message* request);

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_RAW_MESSAGE_H_
