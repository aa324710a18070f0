#include "clients/cpp/connection.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mnemo::client {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const ConnectionOptions& options) {
  if (!options.uses_tls()) return grpc::InsecureChannelCredentials();
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs both --tls_cert and --tls_key (PEM files)");
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.tls_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadFile(options.tls_ca, "--tls_ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!options.tls_cert.empty()) {
    absl::StatusOr<std::string> cert = ReadFile(options.tls_cert, "--tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(options.tls_key, "--tls_key");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

void AddChannelArguments(const ConnectionOptions& options, grpc::ChannelArguments* args) {
  if (options.uses_tls() && !options.tls_server_name.empty()) {
    args->SetSslTargetNameOverride(options.tls_server_name);
  }
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const std::string& target,
                                                       const ConnectionOptions& options,
                                                       grpc::ChannelArguments args) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentials(options);
  if (!credentials.ok()) return credentials.status();
  AddChannelArguments(options, &args);
  return grpc::CreateCustomChannel(target, *credentials, args);
}

void AddCallMetadata(const ConnectionOptions& options, grpc::ClientContext* context) {
  if (!options.api_key.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options.api_key));
  }
}

}  // namespace mnemo::client
