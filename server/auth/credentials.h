#ifndef SUMMON_SERVER_AUTH_CREDENTIALS_H_
#define SUMMON_SERVER_AUTH_CREDENTIALS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "server/auth/authorizer.h"
#include "server/auth/security_spec.h"
#include "server/auth/tokens.h"

namespace summon::server::auth {

// The whole of a PEM (or token, or password) file named by flag --`flag`:
// INVALID_ARGUMENT naming the flag and the path, never the contents, when
// it cannot be read or is empty.
absl::StatusOr<std::string> ReadSecretFile(absl::string_view flag,
                                           const std::string& path);

// Refuses a spec that would expose the daemon: no TLS and no
// --insecure-local; --insecure-local on an address other than loopback
// (`tcp_listeners`: HOST:PORT); TLS with --insecure-local; a tokens file or
// client CA without TLS; a TLS cluster (`cluster`) whose peers could not
// prove who they are (neither --tls-client-ca nor --peer-token-file).
absl::Status CheckSecuritySpec(const SecuritySpec& spec,
                               const std::vector<std::string>& tcp_listeners,
                               bool cluster);

// Whether HOST:PORT's host is a loopback address or name.
bool IsLoopbackListener(absl::string_view host_port);

// The host part of HOST:PORT ("[::1]:7" -> "::1").
std::string HostOf(absl::string_view host_port);

// TLS server credentials (requiring a client certificate when
// spec.tls_client_ca is set) with `processor` deciding principals, or
// insecure ones in insecure-local mode.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const SecuritySpec& spec,
    std::shared_ptr<grpc::AuthMetadataProcessor> processor);

// What a daemon dials its peers with: TLS checking their server
// certificates (with its own certificate as client certificate when peers
// require one) plus its peer token when it has one; insecure in
// insecure-local mode.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
PeerChannelCredentials(const SecuritySpec& spec);

}  // namespace summon::server::auth

#endif  // SUMMON_SERVER_AUTH_CREDENTIALS_H_
