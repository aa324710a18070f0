#include "server/status_convert.h"

#include <string>

namespace mnemo::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  // Both enums follow google.rpc.Code; anything outside it is a bug upstream -> UNKNOWN.
  const grpc::StatusCode grpc_code =
      (code > 0 && code <= static_cast<int>(grpc::StatusCode::UNAUTHENTICATED))
          ? static_cast<grpc::StatusCode>(code)
          : grpc::StatusCode::UNKNOWN;
  return grpc::Status(grpc_code, std::string(status.message()));
}

}  // namespace mnemo::server
