#include "clients/cpp/connection_flags.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(bool, tls, false,
          "Connect with TLS, checking the server against the system's CA roots (implied by "
          "--tls_ca / --tls_cert).");
ABSL_FLAG(std::string, tls_ca, "", "TLS: the CA certificate (PEM) that signed the server's.");
ABSL_FLAG(std::string, tls_cert, "", "Mutual TLS: this client's certificate (PEM).");
ABSL_FLAG(std::string, tls_key, "", "Mutual TLS: this client's private key (PEM).");
ABSL_FLAG(std::string, tls_server_name, "",
          "TLS: the name the server's certificate must carry when it differs from the address's "
          "host.");
ABSL_FLAG(std::string, api_key_file, "",
          "A file holding the API key sent as 'authorization: Bearer KEY' (default: the "
          "MNEMO_API_KEY environment variable).");

namespace mnemo::client {

absl::StatusOr<ConnectionOptions> ConnectionOptionsFromFlags() {
  ConnectionOptions o;
  o.tls = absl::GetFlag(FLAGS_tls);
  o.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  o.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  const std::string key_file = absl::GetFlag(FLAGS_api_key_file);
  if (!key_file.empty()) {
    std::ifstream in(key_file, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("--api_key_file: cannot read ", key_file));
    std::stringstream text;
    text << in.rdbuf();
    o.api_key = std::string(absl::StripAsciiWhitespace(text.str()));
    if (o.api_key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--api_key_file: ", key_file, " is empty"));
    }
  } else if (const char* env = std::getenv("MNEMO_API_KEY"); env != nullptr) {
    o.api_key = std::string(absl::StripAsciiWhitespace(env));
  }
  return o;
}

}  // namespace mnemo::client
