// The one place where an absl::Status becomes a grpc::Status (STYLE.md: errors cross the
// engine/server boundary as absl::Status and are converted exactly once, here).
#ifndef MNEMO_SERVER_STATUS_CONVERT_H_
#define MNEMO_SERVER_STATUS_CONVERT_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace mnemo::server {

// Same code (absl and gRPC share the canonical code numbering) and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace mnemo::server

#endif  // MNEMO_SERVER_STATUS_CONVERT_H_
