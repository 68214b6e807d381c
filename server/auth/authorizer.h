#ifndef SUMMON_SERVER_AUTH_AUTHORIZER_H_
#define SUMMON_SERVER_AUTH_AUTHORIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/server_context.h"
#include "server/auth/audit_log.h"
#include "server/auth/roles.h"
#include "server/auth/security_spec.h"
#include "server/auth/tokens.h"

namespace summon::server::auth {

// Metadata a follower adds when it forwards a client's call to the leader;
// the leader believes it only from an authenticated peer (or in
// insecure-local mode, where the principal header is believed anyway).
inline constexpr char kPrincipalHeader[] = "summon-principal";
inline constexpr char kForwardedRolesHeader[] = "summon-forwarded-roles";
inline constexpr char kForwardedModelsHeader[] = "summon-forwarded-models";
// The web view (server/web) calls its own daemon over an in-process channel
// for a viewer it has already identified; the principal and forwarded-roles
// headers are believed only with this header carrying the Authorizer's
// per-process key, which never leaves the process.
inline constexpr char kInProcessKeyHeader[] = "summon-inprocess-key";

// AuthContext properties the CredentialProcessor sets.
inline constexpr char kPrincipalProperty[] = "summon.principal";
inline constexpr char kRolesProperty[] = "summon.roles";
inline constexpr char kModelsProperty[] = "summon.models";

// The model a request concerns ("" for none).
std::string ModelOf(const google::protobuf::Message& request);

// Who a call runs as.
struct Caller {
  std::string principal;
  RoleSet roles;
  std::vector<std::string> models;  // empty: every model
};

// The one place credentials become a principal on a TLS port: a bearer
// token (`authorization: Bearer T`, looked up in the tokens file) or else a
// verified client certificate (a `cert` line of the tokens file names its
// roles; one naming a cluster node is that node's peer identity). An unknown
// or expired token fails the call with UNAUTHENTICATED; a call with no
// credential passes with no principal and is refused by the Authorizer
// unless it is health or reflection.
class CredentialProcessor final : public grpc::AuthMetadataProcessor {
 public:
  // `tokens` may be null (no tokens file). `peer_hosts`: the hosts of the
  // cluster's --nodes entries.
  CredentialProcessor(const TokenStore* tokens,
                      std::vector<std::string> peer_hosts)
      : tokens_(tokens), peer_hosts_(std::move(peer_hosts)) {}

  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata,
                       grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const TokenStore* const tokens_;
  const std::vector<std::string> peer_hosts_;
};

// Decides every summon RPC against the role table (roles.h) and audits
// refusals.
class Authorizer {
 public:
  // `tokens` and `audit` may be null.
  Authorizer(SecuritySpec spec, const TokenStore* tokens, AuditLog* audit)
      : spec_(std::move(spec)), tokens_(tokens), audit_(audit) {}

  // The caller of `context`: the CredentialProcessor's principal (or, from
  // an authenticated peer, the principal it forwards), or in insecure-local
  // mode the summon-principal header ("anonymous" without one) with every
  // role. UNAUTHENTICATED for a TLS call without credentials.
  absl::StatusOr<Caller> Identify(const grpc::ServerContext& context) const;

  // The caller a bearer token names (the HTTP side of the web view):
  // UNAUTHENTICATED for an unknown or expired token, or without --tokens.
  absl::StatusOr<Caller> IdentifyToken(absl::string_view token) const;

  // Whether callers must present credentials (not insecure-local), and
  // whether a tokens file is configured.
  bool insecure_local() const { return spec_.insecure_local; }
  bool has_tokens() const { return tokens_ != nullptr; }

  // The per-process key of kInProcessKeyHeader (random, 32 hex digits).
  const std::string& in_process_key() const { return in_process_key_; }

  // Identify, then the table: the caller when its roles allow `method` for
  // `request` and `request`'s model is one it may touch; else
  // UNAUTHENTICATED or PERMISSION_DENIED naming the role needed (audited).
  absl::StatusOr<Caller> Authorize(
      const grpc::ServerContext& context, absl::string_view method,
      const google::protobuf::Message& request) const;
  // Authorize's decision without its audit line: the audit interceptor asks
  // whether a refused call was refused here (and so already audited) or by
  // the handler past this gate (a checkpoint path outside the roots).
  absl::StatusOr<Caller> Decide(
      const grpc::ServerContext& context, absl::string_view method,
      const google::protobuf::Message& request) const;

  // R12: whether `principal` may operate sessions it does not own: listed
  // in --admins, or granted admin by the tokens file.
  bool IsAdmin(const std::string& principal) const;

  AuditLog* audit() const { return audit_; }
  void Audit(AuditEvent event) const {
    if (audit_ != nullptr) audit_->Record(event);
  }

 private:
  const SecuritySpec spec_;
  const TokenStore* const tokens_;
  AuditLog* const audit_;
  const std::string in_process_key_ = NewInProcessKey();

  static std::string NewInProcessKey();
};

// Authorize as a grpc::Status for handlers: OK, or the refusal. `caller`,
// when not null, receives the caller.
grpc::Status CheckCall(const Authorizer& authorizer,
                       const grpc::ServerContext& context,
                       absl::string_view method,
                       const google::protobuf::Message& request,
                       Caller* caller = nullptr);

// The principal a call runs as (a token, a client certificate, a peer's
// forwarded principal, or in insecure-local mode the summon-principal
// header); "anonymous" when it has none.
std::string PrincipalOf(const Authorizer& authorizer,
                        const grpc::ServerContext& context);

}  // namespace summon::server::auth

#endif  // SUMMON_SERVER_AUTH_AUTHORIZER_H_
