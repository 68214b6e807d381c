#ifndef SUMMON_SERVER_AUTH_TOKENS_H_
#define SUMMON_SERVER_AUTH_TOKENS_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/auth/roles.h"

namespace summon::server::auth {

// Who a credential names and what it may do.
struct Grant {
  std::string principal;
  RoleSet roles;
  // Models the grant is limited to; empty: every model.
  std::vector<std::string> models;
  // After this instant a token is refused (absl::InfiniteFuture: never).
  absl::Time expires = absl::InfiniteFuture();
};

// The lowercase hex SHA-256 of `token`: what the tokens file stores, so the
// file (a Kubernetes secret, a backup) never holds a usable credential.
std::string TokenHash(absl::string_view token);

// The parsed tokens file (--tokens). One entry per line, '#' comments:
//   <sha256 hex of the token>  <principal>  <roles>  [expires=RFC3339]
//       [models=m1,m2]
//   cert  <principal>  <roles>  [models=m1,m2]
// A `cert` line grants roles to a verified client certificate whose common
// name or a subject alternative name is <principal>.
class TokenTable {
 public:
  // INVALID_ARGUMENT naming the line; never echoes a token hash.
  static absl::StatusOr<TokenTable> Parse(absl::string_view text);

  enum class Lookup { kFound, kUnknown, kExpired };
  // The grant of a bearer token; `now` decides expiry.
  Lookup FindToken(absl::string_view token, absl::Time now, Grant* grant) const;
  // The grant of a certificate naming `name`; nullopt when no cert line does.
  std::optional<Grant> FindCertificate(absl::string_view name) const;
  // Whether any unexpired entry names `principal` with a set allowing
  // `role`.
  bool Grants(absl::string_view principal, Role role, absl::Time now) const;
  size_t size() const { return tokens_.size() + certificates_.size(); }

 private:
  std::map<std::string, Grant> tokens_;        // by hash
  std::map<std::string, Grant> certificates_;  // by principal
};

// A TokenTable read from a file and re-read on Reload() (SIGHUP): a file
// that no longer parses keeps the table in force and says why.
class TokenStore {
 public:
  static absl::StatusOr<std::unique_ptr<TokenStore>> Open(std::string path);

  absl::Status Reload();
  std::shared_ptr<const TokenTable> table() const;
  const std::string& path() const { return path_; }

 private:
  explicit TokenStore(std::string path) : path_(std::move(path)) {}

  const std::string path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const TokenTable> table_ ABSL_GUARDED_BY(mu_);
};

}  // namespace summon::server::auth

#endif  // SUMMON_SERVER_AUTH_TOKENS_H_
