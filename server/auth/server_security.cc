#include "server/auth/server_security.h"

#include <filesystem>
#include <utility>

#include "server/auth/credentials.h"

namespace summon::server::auth {

absl::StatusOr<std::unique_ptr<ServerSecurity>> ServerSecurity::Create(
    SecuritySpec spec, const std::string& data_dir,
    const std::vector<std::string>& tcp_listeners,
    const std::vector<std::string>& nodes) {
  if (absl::Status safe =
          CheckSecuritySpec(spec, tcp_listeners, nodes.size() > 1);
      !safe.ok()) {
    return safe;
  }
  auto security = absl::WrapUnique(new ServerSecurity());
  if (!spec.tokens_file.empty()) {
    absl::StatusOr<std::unique_ptr<TokenStore>> tokens =
        TokenStore::Open(spec.tokens_file);
    if (!tokens.ok()) {
      return absl::InvalidArgumentError(tokens.status().message());
    }
    security->tokens_ = std::move(*tokens);
  }
  std::string audit_path = spec.audit_log;
  if (audit_path.empty() && !data_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(data_dir, error);
    audit_path = (std::filesystem::path(data_dir) / "audit.log").string();
  }
  absl::StatusOr<std::unique_ptr<AuditLog>> audit = AuditLog::Open(audit_path);
  if (!audit.ok()) return audit.status();
  security->audit_ = std::move(*audit);

  std::vector<std::string> peer_hosts;
  for (const std::string& node : nodes) peer_hosts.push_back(HostOf(node));
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server =
      ServerCredentialsFor(spec, std::make_shared<CredentialProcessor>(
                                     security->tokens_.get(), peer_hosts));
  if (!server.ok()) return server.status();
  security->server_credentials_ = std::move(*server);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> peer =
      PeerChannelCredentials(spec);
  if (!peer.ok()) return peer.status();
  security->peer_credentials_ = std::move(*peer);
  security->authorizer_ = std::make_unique<Authorizer>(
      std::move(spec), security->tokens_.get(), security->audit_.get());
  return security;
}

absl::Status ServerSecurity::ReloadTokens() {
  if (tokens_ == nullptr) {
    return absl::FailedPreconditionError("no tokens file (--tokens)");
  }
  return tokens_->Reload();
}

}  // namespace summon::server::auth
