#ifndef SUMMON_SERVER_COORDINATOR_ETCD_ACCESS_H_
#define SUMMON_SERVER_COORDINATOR_ETCD_ACCESS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"

namespace summon::server {

// How summond reaches etcd, as --coordinator-ca, --coordinator-cert,
// --coordinator-key, --coordinator-user and --coordinator-password-file
// name it (file paths; empty: not given).
struct EtcdAccessFlags {
  std::string ca;
  std::string cert;
  std::string key;
  std::string user;
  std::string password_file;
};

// What EtcdClient is given.
struct EtcdAccess {
  // TLS (checking etcd's certificate with the CA, else the system's roots,
  // and presenting the client certificate when given); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string user;           // Empty: no etcd authentication.
  std::string password;       // The password file's first line. Never logged.
  std::string password_file;  // Read again for a rotated password.
};

// Reads the files. INVALID_ARGUMENT naming the flag (and the path, never a
// file's contents) for: any of them without an etcd coordinator (`etcd`
// false), a certificate without its key or a key without its certificate,
// a user without a password file or the reverse, a file that cannot be
// read or holds no PEM block of its kind, an empty password.
absl::StatusOr<EtcdAccess> LoadEtcdAccess(const EtcdAccessFlags& flags,
                                          bool etcd);

// The first line of --coordinator-password-file `path`, without its line
// end; INVALID_ARGUMENT naming the path (never the contents) when it cannot
// be read or the line is empty.
absl::StatusOr<std::string> ReadEtcdPassword(const std::string& path);

}  // namespace summon::server

#endif  // SUMMON_SERVER_COORDINATOR_ETCD_ACCESS_H_
