#include "server/auth/credentials.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace summon::server::auth {

absl::StatusOr<std::string> ReadSecretFile(absl::string_view flag,
                                           const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, ": cannot read the file"));
  }
  std::stringstream text;
  text << file.rdbuf();
  if (text.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, ": the file is empty"));
  }
  return text.str();
}

std::string HostOf(absl::string_view host_port) {
  absl::string_view host = host_port.substr(0, host_port.rfind(':'));
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  return std::string(host);
}

bool IsLoopbackListener(absl::string_view host_port) {
  const std::string host = HostOf(host_port);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::Status CheckSecuritySpec(const SecuritySpec& spec,
                               const std::vector<std::string>& tcp_listeners,
                               bool cluster) {
  if (spec.tls_cert.empty() != spec.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together: give both or neither");
  }
  if (spec.tls() && spec.insecure_local) {
    return absl::InvalidArgumentError(
        "--insecure-local and --tls-cert contradict each other: TLS "
        "authenticates callers, --insecure-local believes their "
        "summon-principal header");
  }
  if (!spec.tls()) {
    const std::pair<const char*, const std::string*> needs_tls[] = {
        {"tls-client-ca", &spec.tls_client_ca},
        {"tls-ca", &spec.tls_ca},
        {"tokens", &spec.tokens_file},
        {"peer-token-file", &spec.peer_token_file}};
    for (const auto& [flag, value] : needs_tls) {
      if (!value->empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag,
                         " needs TLS (--tls-cert and --tls-key): credentials "
                         "must not cross the network in the clear"));
      }
    }
    if (!spec.insecure_local) {
      return absl::InvalidArgumentError(
          "summond needs TLS (--tls-cert and --tls-key, with --tokens or "
          "--tls-client-ca to authenticate callers), or --insecure-local to "
          "serve loopback and Unix-socket clients trusting their "
          "summon-principal header");
    }
    for (const std::string& listener : tcp_listeners) {
      if (!IsLoopbackListener(listener)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--insecure-local trusts every caller's summon-principal header, "
            "so it serves only loopback addresses and Unix sockets; ",
            listener,
            " is reachable from other hosts: use --tls-cert and "
            "--tls-key there"));
      }
    }
    return absl::OkStatus();
  }
  if (cluster && spec.tls_client_ca.empty() && spec.peer_token_file.empty()) {
    return absl::InvalidArgumentError(
        "a TLS cluster needs its peers to prove who they are: "
        "--tls-client-ca (peers present their node certificates) or "
        "--peer-token-file (a token whose --tokens entry grants peer)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const SecuritySpec& spec,
    std::shared_ptr<grpc::AuthMetadataProcessor> processor) {
  if (!spec.tls()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert = ReadSecretFile("tls-cert", spec.tls_cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadSecretFile("tls-key", spec.tls_key);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!spec.tls_client_ca.empty()) {
    absl::StatusOr<std::string> ca =
        ReadSecretFile("tls-client-ca", spec.tls_client_ca);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  options.pem_key_cert_pairs.push_back({*key, *cert});
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::SslServerCredentials(options);
  credentials->SetAuthMetadataProcessor(std::move(processor));
  return credentials;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
PeerChannelCredentials(const SecuritySpec& spec) {
  if (!spec.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  const std::string& ca_path =
      spec.tls_ca.empty() ? spec.tls_client_ca : spec.tls_ca;
  if (!ca_path.empty()) {
    absl::StatusOr<std::string> ca = ReadSecretFile(
        spec.tls_ca.empty() ? "tls-client-ca" : "tls-ca", ca_path);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  if (!spec.tls_client_ca.empty()) {
    // Peers require client certificates: this node's own is its identity.
    absl::StatusOr<std::string> cert =
        ReadSecretFile("tls-cert", spec.tls_cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadSecretFile("tls-key", spec.tls_key);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  std::shared_ptr<grpc::ChannelCredentials> channel =
      grpc::SslCredentials(options);
  if (!spec.peer_token_file.empty()) {
    absl::StatusOr<std::string> token =
        ReadSecretFile("peer-token-file", spec.peer_token_file);
    if (!token.ok()) return token.status();
    const std::string first_line(absl::StripAsciiWhitespace(
        absl::string_view(*token).substr(0, token->find('\n'))));
    channel = grpc::CompositeChannelCredentials(
        channel, grpc::AccessTokenCredentials(first_line));
  }
  return channel;
}

}  // namespace summon::server::auth
