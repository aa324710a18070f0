// The connection flags the `mnemo` CLI and mnemo-bench share: --tls, --tls_ca, --tls_cert,
// --tls_key, --tls_server_name, --api_key_file (and the MNEMO_API_KEY environment variable;
// keys are not taken on the command line, where `ps` would show them).
#ifndef MNEMO_CLIENTS_CPP_CONNECTION_FLAGS_H_
#define MNEMO_CLIENTS_CPP_CONNECTION_FLAGS_H_

#include "absl/status/statusor.h"
#include "clients/cpp/connection.h"

namespace mnemo::client {

// The options the flags (parsed already) and MNEMO_API_KEY give; errors name the key file.
absl::StatusOr<ConnectionOptions> ConnectionOptionsFromFlags();

}  // namespace mnemo::client

#endif  // MNEMO_CLIENTS_CPP_CONNECTION_FLAGS_H_
