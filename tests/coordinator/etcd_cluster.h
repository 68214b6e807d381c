#ifndef SUMMON_TESTS_COORDINATOR_ETCD_CLUSTER_H_
#define SUMMON_TESTS_COORDINATOR_ETCD_CLUSTER_H_

// A 1- or 3-member etcd on loopback, started from Debian's /usr/bin/etcd
// (etcd-server 3.4) on free ports with a data dir per member, for tests of
// the coordinator and of clusters on it. Members can be killed (SIGKILL)
// and restarted with their data; each member's client port can also be
// reached through a TcpProxy that the test cuts (a partition). Everything
// is stopped and every data dir removed when the object goes.
//
// Secured (Options::tls, Options::auth) as a production etcd is: client
// URLs in HTTPS with a throwaway PKI (tests/security/make_pki.sh), client
// certificates required, and etcd's authentication on with a user "summon"
// whose role may read and write /summon/ only.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/coordinator/etcd_client.h"
#include "tests/coordinator/tcp_proxy.h"
#include "tests/faults/child_process.h"

namespace summon::tests {

class EtcdCluster {
 public:
  struct Options {
    int members = 1;
    // Member N logs to <log_dir>/etcd-m<N>.log; empty: the test's
    // undeclared outputs, else the data dir.
    std::string log_dir;
    std::string etcd_binary = "/usr/bin/etcd";
    // HTTPS client URLs with server.crt, clients must present a certificate
    // of ca.crt (--client-cert-auth).
    bool tls = false;
    // etcd's authentication on (through the v3 Auth API once the members
    // serve: users root and summon, AuthEnable).
    bool auth = false;
    // etcd's --auth-token-ttl: seconds an unused simple token lives; 0:
    // etcd's default (300).
    int auth_token_ttl_s = 0;
  };

  // etcd's user for summon and its role's key prefix.
  static constexpr char kUser[] = "summon";
  static constexpr char kUserPrefix[] = "/summon/";

  // Starts every member and waits until the cluster answers a linearizable
  // read through each of them.
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(Options options);
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;
  ~EtcdCluster();

  int members() const { return static_cast<int>(members_.size()); }
  // The directory holding every member's data dir (removed at the end).
  const std::string& data_root() const { return root_; }
  // 127.0.0.1:PORT of member `member`'s client port.
  std::string client_address(int member) const;
  std::vector<std::string> client_addresses() const;
  // What a client of this etcd needs: its endpoints, the TLS credentials
  // with the client certificate alice.crt, and user summon's password.
  server::EtcdClient::Options client_options(
      absl::Duration call_timeout = absl::Seconds(1)) const;
  // The throwaway PKI's files (tls): pki("ca.crt").
  std::string pki(const std::string& file) const {
    return absl::StrCat(root_, "/pki/", file);
  }
  // A file holding user summon's password (auth).
  std::string password_file() const { return root_ + "/summon.password"; }
  // Changes user summon's password in etcd as root (auth), as an operator
  // rotating it would; password_file() is left as it is. Outdates every
  // token etcd gave ("revision of auth store is old").
  absl::Status ChangePassword(const std::string& password);
  // summond's flags for this etcd's TLS and authentication (empty for a
  // plaintext etcd without auth).
  std::vector<std::string> summond_flags() const;
  // The proxy in front of `member`'s client port (made on first use).
  absl::StatusOr<TcpProxy*> Proxy(int member);

  bool running(int member) const;
  absl::Status Kill(int member);
  // Starts a killed member again with its data dir.
  absl::Status Restart(int member);
  // Until a linearizable read succeeds through every running member.
  absl::Status WaitHealthy(absl::Duration timeout);

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    std::string data_dir;
    ChildProcess process;
    std::unique_ptr<TcpProxy> proxy;
  };

  explicit EtcdCluster(Options options) : options_(std::move(options)) {}
  absl::Status Spawn(int member);
  // Users root and summon, summon's role, then AuthEnable.
  absl::Status EnableAuth();
  std::string Url(int port) const;

  const Options options_;
  std::string root_;  // Parent of the data dirs; removed at the end.
  std::string initial_cluster_;
  std::string password_;  // User summon's (and root's).
  std::vector<Member> members_;
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_COORDINATOR_ETCD_CLUSTER_H_
