// How a C++ client reaches a mnemo server: plaintext or TLS (optionally with a client
// certificate for mutual TLS), and the API key every call carries (docs/security.md).
// Shared by the `mnemo` CLI, mnemo::client::Client and mnemo-bench.
//
// Pure functions over ConnectionOptions; thread-safe.
#ifndef MNEMO_CLIENTS_CPP_CONNECTION_H_
#define MNEMO_CLIENTS_CPP_CONNECTION_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace mnemo::client {

struct ConnectionOptions {
  bool tls = false;      // TLS; implied by any tls_* file below
  std::string tls_ca;    // PEM: the CA that signed the server's certificate; "" = system roots
  std::string tls_cert;  // PEM: this client's certificate (mutual TLS), with tls_key
  std::string tls_key;   // PEM: its private key
  std::string tls_server_name;  // the name to check the server's certificate against ("" = host)
  std::string api_key;          // sent as `authorization: Bearer KEY`; "" = none

  bool uses_tls() const { return tls || !tls_ca.empty() || !tls_cert.empty() || !tls_key.empty(); }
};

// Credentials for `options`; errors name the unreadable file or the incomplete pair.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const ConnectionOptions& options);
// `args` plus what `options` needs (the TLS name override).
void AddChannelArguments(const ConnectionOptions& options, grpc::ChannelArguments* args);
// A channel to `target` with `options` applied on top of `args`.
absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const std::string& target,
                                                       const ConnectionOptions& options,
                                                       grpc::ChannelArguments args = {});
// Adds the API key (if any) to one call's metadata.
void AddCallMetadata(const ConnectionOptions& options, grpc::ClientContext* context);

}  // namespace mnemo::client

#endif  // MNEMO_CLIENTS_CPP_CONNECTION_H_
