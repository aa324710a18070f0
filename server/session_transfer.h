// Reactors of the two streaming Sessions methods that move a session between servers
// (docs/durability.md): ExportSession (the session's snapshot as a stream of chunks) and
// ImportSession (a new session from a client stream of chunks).
//
// Both are registered raw, like every mnemo method (raw_message.h), and both have one engine
// round trip: the engine answers on its loop thread exactly once (UNAVAILABLE at shutdown
// included), and the reactor lives until then. Export: the engine's bytes are written chunk
// after chunk (one write in flight); a failed write (client gone) finishes with CANCELLED.
// Import: chunks are read and appended until the client half-closes (at most
// kMaxImportBytes), then the engine imports. Each reactor deletes itself in OnDone.
// Thread-safety: gRPC runs one reaction at a time per reactor; the engine's callback starts the
// first write (Export) or the Finish (Import) when no gRPC operation is in flight.
#ifndef MNEMO_SERVER_SESSION_TRANSFER_H_
#define MNEMO_SERVER_SESSION_TRANSFER_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "server/call.h"
#include "server/server_state.h"

namespace mnemo::server {

// The largest snapshot ImportSession accepts.
inline constexpr int64_t kMaxImportBytes = int64_t{16} << 30;

// `request` is a serialised mnemo.v1.ExportSessionRequest.
grpc::ServerWriteReactor<grpc::ByteBuffer>* StartExportSession(
    ServerState& state, grpc::CallbackServerContext* context, const grpc::ByteBuffer& request);
// `response` receives the serialised mnemo.v1.Session. With tenants, an import without a
// session_id keeps the exported id's own part (any tenant prefix replaced by the caller's).
grpc::ServerReadReactor<grpc::ByteBuffer>* StartImportSession(ServerState& state,
                                                              grpc::CallbackServerContext* context,
                                                              grpc::ByteBuffer* response);

// Calls `then` with OK when the call's tenant may add one more session (max_sessions,
// max_memory_bytes over its live sessions), else with RESOURCE_EXHAUSTED naming the limit.
// Immediate when the tenant has neither limit; else after one engine round trip.
void CheckSessionQuota(std::shared_ptr<Call> call, std::function<void(absl::Status)> then);

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_SESSION_TRANSFER_H_
