#include "server/coordinator/etcd_access.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/auth/credentials.h"

namespace summon::server {
namespace {

// A PEM file of the expected kind: `marker` is "CERTIFICATE" or
// "PRIVATE KEY" (PKCS#8, EC or RSA alike). Checked here because gRPC takes
// any bytes and fails each handshake later with a message that names no
// flag.
absl::StatusOr<std::string> ReadPem(absl::string_view flag,
                                    const std::string& path,
                                    absl::string_view marker) {
  absl::StatusOr<std::string> pem = auth::ReadSecretFile(flag, path);
  if (!pem.ok()) return pem.status();
  if (!absl::StrContains(*pem, "-----BEGIN ") ||
      !absl::StrContains(*pem, absl::StrCat(marker, "-----"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, " ", path, ": the file holds no PEM ", marker));
  }
  return pem;
}

absl::Status Unpaired(absl::string_view given, absl::string_view missing) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", given, " needs --", missing));
}

}  // namespace

absl::StatusOr<EtcdAccess> LoadEtcdAccess(const EtcdAccessFlags& flags,
                                          bool etcd) {
  const std::pair<absl::string_view, const std::string*> named[] = {
      {"coordinator-ca", &flags.ca},
      {"coordinator-cert", &flags.cert},
      {"coordinator-key", &flags.key},
      {"coordinator-user", &flags.user},
      {"coordinator-password-file", &flags.password_file}};
  if (!etcd) {
    for (const auto& [flag, value] : named) {
      if (!value->empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag,
                         " is for an etcd coordinator: give --coordinator "
                         "etcd://HOST:PORT[,HOST:PORT...]/CLUSTER"));
      }
    }
    return EtcdAccess{};
  }
  if (!flags.cert.empty() && flags.key.empty()) {
    return Unpaired("coordinator-cert", "coordinator-key");
  }
  if (flags.cert.empty() && !flags.key.empty()) {
    return Unpaired("coordinator-key", "coordinator-cert");
  }
  if (!flags.user.empty() && flags.password_file.empty()) {
    return Unpaired("coordinator-user", "coordinator-password-file");
  }
  if (flags.user.empty() && !flags.password_file.empty()) {
    return Unpaired("coordinator-password-file", "coordinator-user");
  }
  EtcdAccess access;
  if (!flags.ca.empty() || !flags.cert.empty()) {
    grpc::SslCredentialsOptions tls;
    if (!flags.ca.empty()) {
      absl::StatusOr<std::string> ca =
          ReadPem("coordinator-ca", flags.ca, "CERTIFICATE");
      if (!ca.ok()) return ca.status();
      tls.pem_root_certs = *std::move(ca);
    }
    if (!flags.cert.empty()) {
      absl::StatusOr<std::string> cert =
          ReadPem("coordinator-cert", flags.cert, "CERTIFICATE");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key =
          ReadPem("coordinator-key", flags.key, "PRIVATE KEY");
      if (!key.ok()) return key.status();
      tls.pem_cert_chain = *std::move(cert);
      tls.pem_private_key = *std::move(key);
    }
    access.credentials = grpc::SslCredentials(tls);
  }
  if (!flags.user.empty()) {
    absl::StatusOr<std::string> password =
        ReadEtcdPassword(flags.password_file);
    if (!password.ok()) return password.status();
    access.user = flags.user;
    access.password = *std::move(password);
    access.password_file = flags.password_file;
  }
  return access;
}

absl::StatusOr<std::string> ReadEtcdPassword(const std::string& path) {
  absl::StatusOr<std::string> file =
      auth::ReadSecretFile("coordinator-password-file", path);
  if (!file.ok()) return file.status();
  // The first line, without its line end: what `echo secret > file` and a
  // Kubernetes Secret's key both give.
  std::string password = file->substr(0, file->find('\n'));
  if (!password.empty() && password.back() == '\r') password.pop_back();
  if (password.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--coordinator-password-file ", path, ": the first line is empty"));
  }
  return password;
}

}  // namespace summon::server
