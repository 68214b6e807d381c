#ifndef SUMMON_SERVER_AUTH_SECURITY_SPEC_H_
#define SUMMON_SERVER_AUTH_SECURITY_SPEC_H_

#include <string>
#include <vector>

namespace summon::server::auth {

// How a daemon authenticates its callers and its peers (docs/operations.md,
// "Securing summon").
struct SecuritySpec {
  // Trust the `summon-principal` header of every caller, with every role.
  // Only on loopback addresses and Unix sockets, and never with TLS. True for
  // embedders (tests, the benchmark); the summond binary sets it only on
  // --insecure-local.
  bool insecure_local = true;
  // PEM files. tls_cert and tls_key together turn TLS on.
  std::string tls_cert;
  std::string tls_key;
  // CA of client certificates: set, every caller must present one (mTLS).
  std::string tls_client_ca;
  // CA that a daemon checks its peers' server certificates with. Empty:
  // tls_client_ca, else the system's roots.
  std::string tls_ca;
  // Bearer tokens: token hash -> principal, roles (server/auth/tokens.h).
  std::string tokens_file;
  // A bearer token (the file's first line) this daemon presents to its
  // peers; its tokens-file entry must grant `peer`.
  std::string peer_token_file;
  // JSON lines of every write, load, save, delete, init and denied call.
  // Empty: <data_dir>/audit.log, or spdlog only without a data dir.
  std::string audit_log;
  // Principals that operate any session (R12) besides those granted admin.
  std::vector<std::string> admins;

  bool tls() const { return !tls_cert.empty() || !tls_key.empty(); }
};

}  // namespace summon::server::auth

#endif  // SUMMON_SERVER_AUTH_SECURITY_SPEC_H_
