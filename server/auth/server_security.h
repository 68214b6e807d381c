#ifndef SUMMON_SERVER_AUTH_SERVER_SECURITY_H_
#define SUMMON_SERVER_AUTH_SERVER_SECURITY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "server/auth/audit_log.h"
#include "server/auth/authorizer.h"
#include "server/auth/security_spec.h"
#include "server/auth/tokens.h"

namespace summon::server::auth {

// Everything a daemon needs to authenticate and authorise, built once at
// start-up from its SecuritySpec: the tokens file, the audit log, the
// Authorizer its services ask, the credentials it listens with and the ones
// it dials its peers with.
class ServerSecurity {
 public:
  // `tcp_listeners`: HOST:PORT the daemon listens on; `nodes`: the cluster's
  // --nodes (empty on a single node). INVALID_ARGUMENT for an unsafe spec
  // (CheckSecuritySpec) or an unreadable file, naming the flag.
  static absl::StatusOr<std::unique_ptr<ServerSecurity>> Create(
      SecuritySpec spec, const std::string& data_dir,
      const std::vector<std::string>& tcp_listeners,
      const std::vector<std::string>& nodes);

  const Authorizer& authorizer() const { return *authorizer_; }
  const std::shared_ptr<grpc::ServerCredentials>& server_credentials() const {
    return server_credentials_;
  }
  const std::shared_ptr<grpc::ChannelCredentials>& peer_credentials() const {
    return peer_credentials_;
  }
  // Re-reads the tokens file (SIGHUP); a bad file keeps the old table.
  absl::Status ReloadTokens();

 private:
  ServerSecurity() = default;

  std::unique_ptr<TokenStore> tokens_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<Authorizer> authorizer_;
  std::shared_ptr<grpc::ServerCredentials> server_credentials_;
  std::shared_ptr<grpc::ChannelCredentials> peer_credentials_;
};

}  // namespace summon::server::auth

#endif  // SUMMON_SERVER_AUTH_SERVER_SECURITY_H_
