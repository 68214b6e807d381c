#ifndef SUMMON_TESTS_SECURITY_SECURE_CLUSTER_H_
#define SUMMON_TESTS_SECURITY_SECURE_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "server/server.h"

namespace summon::tests {

// summond nodes inside the test process, serving TLS with a throwaway PKI
// (tests/security/make_pki.sh) and a tokens file with one token per role:
// tokens().at("viewer") and so on, plus "expired" (an editor whose entry
// expired) and "peer" (the token the nodes present to each other).
class SecureCluster {
 public:
  struct Options {
    int nodes = 1;
    int local_ranks = 1;
    // Require client certificates signed by the test CA (mTLS); peers then
    // present their node certificate as well as the peer token.
    bool require_client_certificates = false;
    // Nodes present the peer token to each other (else, with client
    // certificates required, only their node certificates).
    bool peer_token = true;
    // Extra lines for the tokens file (e.g. "cert alice editor").
    std::vector<std::string> extra_token_lines;
  };

  static absl::StatusOr<std::unique_ptr<SecureCluster>> Start(Options options);
  ~SecureCluster();

  // Where the PKI's files are: pki("ca.crt").
  std::string pki(const std::string& file) const {
    return pki_dir_ + "/" + file;
  }
  const std::map<std::string, std::string>& tokens() const { return tokens_; }
  const std::string& tokens_file() const { return tokens_file_; }
  std::string target(int node = 0) const;
  server::SummonServer& server(int node) { return *servers_[node]; }
  const std::string& data_dir(int node) const { return data_dirs_[node]; }

  // A TLS channel to `node` trusting the test CA, presenting `client_cert`
  // ("alice" -> alice.crt/alice.key) when not empty.
  std::shared_ptr<grpc::Channel> Channel(
      int node, const std::string& client_cert = "",
      const std::string& ca = "ca.crt") const;

 private:
  SecureCluster() = default;

  std::string root_;
  std::string pki_dir_;
  std::string tokens_file_;
  std::map<std::string, std::string> tokens_;
  std::vector<std::string> addresses_;
  std::vector<std::string> data_dirs_;
  std::vector<std::unique_ptr<server::SummonServer>> servers_;
};

// One call of `method` (full name) carrying `request` on `channel`,
// whatever its kind (unary or streaming: one request message, the first
// response is enough), with `token` as bearer token when not empty and
// `metadata` added. The call's final status.
grpc::Status CallAnyMethod(
    grpc::Channel& channel, const std::string& method,
    const google::protobuf::Message& request, const std::string& token,
    const std::vector<std::pair<std::string, std::string>>& metadata = {});

// "" for OK, else "CODE: message", so a failed expectation says why.
std::string ErrorOf(const grpc::Status& status);

}  // namespace summon::tests

#endif  // SUMMON_TESTS_SECURITY_SECURE_CLUSTER_H_
