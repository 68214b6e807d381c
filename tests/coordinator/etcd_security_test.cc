// summond's connection to a secured etcd (issue 31): HTTPS client URLs with
// client certificates required (--client-cert-auth) and etcd's
// authentication on, as a production etcd runs. A 3-node summond cluster
// given --coordinator-ca/-cert/-key and --coordinator-user/-password-file
// forms and serves; the token etcd gave is renewed when etcd forgets it
// (here after 1 s unused); a wrong password or a missing client
// certificate stops a node at start with UNAUTHENTICATED and a message that
// names the flags to check, and no password ever reaches the log.

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator/etcd_client.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/daemon_testing.h"
#include "tests/cluster/local_cluster.h"
#include "tests/coordinator/etcd_cluster.h"
#include "tests/coordinator/failover_trial.h"
#include "tests/faults/child_process.h"

namespace summon::tests {
namespace {

namespace v1 = ::summon::v1;

constexpr char kParam[] = "layers.0.attn.w";

std::string ReadAll(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

class EtcdSecurityTest : public testing::Test {
 protected:
  void SetUp() override {
    EtcdCluster::Options options;
    options.tls = true;
    options.auth = true;
    // Tokens expire within the tests (etcd's default: 5 minutes unused):
    // summond renews them as it runs.
    options.auth_token_ttl_s = 1;
    absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
        EtcdCluster::Start(options);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
  }

  std::string Coordinator(const std::string& cluster) const {
    return absl::StrCat("etcd://", etcd_->client_address(0), "/", cluster);
  }

  // Node 0 of a two-node cluster on the etcd with `flags` added, left to
  // exit by itself; its exit and its whole log (at debug level).
  struct Refusal {
    ExitStatus exit;
    std::string log;
  };
  Refusal StartRefusedNode(const std::string& name,
                           const std::vector<std::string>& flags) {
    absl::StatusOr<std::vector<int>> ports = PickFreePorts(2);
    EXPECT_TRUE(ports.ok()) << ports.status();
    ChildProcess::Spec spec;
    spec.argv = {RunfilePath("server/summond"),
                 "--insecure-local",
                 absl::StrCat("--nodes=127.0.0.1:", (*ports)[0],
                              ",127.0.0.1:", (*ports)[1]),
                 "--node-rank=0",
                 "--coordinator=" + Coordinator(name),
                 "--log-level=debug"};
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.log_path = absl::StrCat(etcd_->data_root(), "/", name, ".log");
    absl::StatusOr<ChildProcess> daemon = ChildProcess::Spawn(spec);
    EXPECT_TRUE(daemon.ok()) << daemon.status();
    absl::StatusOr<ExitStatus> exit = daemon->WaitExit(absl::Seconds(30));
    EXPECT_TRUE(exit.ok()) << exit.status();
    return Refusal{exit.value_or(ExitStatus{}), ReadAll(spec.log_path)};
  }

  std::unique_ptr<EtcdCluster> etcd_;
};

TEST_F(EtcdSecurityTest, AnExpiredTokenIsRenewed) {
  server::EtcdClient client(etcd_->client_options(absl::Seconds(5)));
  etcdserverpb::TxnRequest put;
  etcdserverpb::PutRequest* request = put.add_success()->mutable_request_put();
  request->set_key("/summon/renewed");
  request->set_value("before");
  absl::StatusOr<etcdserverpb::TxnResponse> written = client.Txn(put);
  ASSERT_TRUE(written.ok()) << written.status();

  // Unused past etcd's token TTL (1 s here), the client's token is gone:
  // etcd answers it "invalid auth token".
  absl::SleepFor(absl::Seconds(4));
  etcdserverpb::RangeRequest read;
  read.set_key("/summon/renewed");
  absl::StatusOr<etcdserverpb::RangeResponse> found = client.Range(read);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->kvs_size(), 1);
  EXPECT_EQ(found->kvs(0).value(), "before");

  // A watch is cancelled for such a token ("invalid auth token").
  absl::SleepFor(absl::Seconds(4));
  absl::StatusOr<mvccpb::Event> event =
      client.AwaitEvent("/summon/renewed", written->header().revision(),
                        mvccpb::Event::PUT, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->kv().value(), "before");
}

// A rotated password is taken without a restart, in either order of the
// file and etcd's user changing: the file first (the new password refused,
// the last accepted one still taken), then etcd (every token outdated; the
// file's password accepted); and a file that cannot be read keeps the last
// accepted password.
TEST_F(EtcdSecurityTest, ARotatedPasswordIsTakenWithoutARestart) {
  server::EtcdClient::Options options = etcd_->client_options(absl::Seconds(5));
  const std::string file = etcd_->password_file();
  options.read_password = [file]() -> absl::StatusOr<std::string> {
    std::ifstream in(file);
    std::string line;
    if (!std::getline(in, line) || line.empty()) {
      return absl::InvalidArgumentError(file + ": no password");
    }
    return line;
  };
  server::EtcdClient client(options);
  const auto put = [&](const std::string& value) {
    etcdserverpb::TxnRequest txn;
    etcdserverpb::PutRequest* request =
        txn.add_success()->mutable_request_put();
    request->set_key("/summon/rotated");
    request->set_value(value);
    return client.Txn(txn).status();
  };
  const auto read = [&]() -> absl::StatusOr<std::string> {
    etcdserverpb::RangeRequest range;
    range.set_key("/summon/rotated");
    absl::StatusOr<etcdserverpb::RangeResponse> found = client.Range(range);
    if (!found.ok()) return found.status();
    if (found->kvs_size() != 1) return absl::NotFoundError("no key");
    return found->kvs(0).value();
  };
  ASSERT_TRUE(put("first").ok());

  // The file holds the next password before etcd does; the token expires
  // (1 s unused) and the next authentication falls back to the old one.
  std::ofstream(file, std::ios::trunc) << "rotated-pw-1\n";
  absl::SleepFor(absl::Seconds(3));
  EXPECT_EQ(read().value_or("refused"), "first");

  // etcd's user changes: the token is outdated, the file's password taken.
  ASSERT_TRUE(etcd_->ChangePassword("rotated-pw-1").ok());
  const absl::Status second = put("second");
  EXPECT_TRUE(second.ok()) << second;
  EXPECT_EQ(read().value_or("refused"), "second");

  // The file unreadable (being rewritten) while etcd changes again first:
  // the last accepted password is kept until the file holds the new one.
  std::filesystem::remove(file);
  absl::SleepFor(absl::Seconds(3));
  EXPECT_EQ(read().value_or("refused"), "second");
  ASSERT_TRUE(etcd_->ChangePassword("rotated-pw-2").ok());
  EXPECT_TRUE(absl::IsUnauthenticated(put("third")));
  std::ofstream(file, std::ios::trunc) << "rotated-pw-2\n";
  const absl::Status third = put("third");
  EXPECT_TRUE(third.ok()) << third;
  EXPECT_EQ(read().value_or("refused"), "third");
}

TEST_F(EtcdSecurityTest, AClusterOnTlsAndAuthFormsAndServes) {
  LocalCluster::Options options;
  options.nodes = 3;
  options.local_ranks = 1;
  options.coordinator = Coordinator("secure");
  options.extra_flags = etcd_->summond_flags();
  absl::StatusOr<std::unique_ptr<LocalCluster>> started =
      LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  absl::StatusOr<v1::ClusterStatus> leadership =
      AwaitAgreedLeadership(cluster, absl::Seconds(30));
  ASSERT_TRUE(leadership.ok()) << leadership.status();

  const v1::Model model = CreateSeeded(cluster.client(1), "m", kUnevenLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const v1::Session session =
      OpenOk(cluster.client(2), "m", ParamScope({kParam}));
  EXPECT_EQ(ReadOk(cluster.client(2), session.id(), kParam),
            SeededModel(model).at(kParam));
  CloseOk(cluster.client(2), session.id());

  // The password rotated as an operator would (the Secret's file, then
  // etcd's user): every node takes it at its next token, without a
  // restart; the leader keeps its lease (same epoch) and a writeback's
  // commit decision goes through etcd.
  std::ofstream(etcd_->password_file(), std::ios::trunc) << "rotated-pw\n";
  ASSERT_TRUE(etcd_->ChangePassword("rotated-pw").ok());
  absl::SleepFor(absl::Seconds(4));
  absl::StatusOr<v1::ClusterStatus> after =
      AwaitAgreedLeadership(cluster, absl::Seconds(10));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->leader(), leadership->leader());
  EXPECT_EQ(after->epoch(), leadership->epoch());
  const std::string edited = SeededModel(model, 31).at(kParam);
  const v1::Session writer =
      OpenOk(cluster.client(0), "m", ParamScope({kParam}));
  WriteOk(cluster.client(0), writer.id(), kParam, edited);
  CloseOk(cluster.client(0), writer.id());
  const v1::Session reader =
      OpenOk(cluster.client(2), "m", ReadOnly(ParamScope({kParam})));
  EXPECT_EQ(ReadOk(cluster.client(2), reader.id(), kParam), edited);
  CloseOk(cluster.client(2), reader.id());

  // Every node registered itself through TLS under user summon.
  server::EtcdClient::Options client_options = etcd_->client_options();
  client_options.password = "rotated-pw";
  server::EtcdClient client(client_options);
  etcdserverpb::RangeRequest members;
  members.set_key("/summon/secure/members/");
  members.set_range_end(server::PrefixEnd("/summon/secure/members/"));
  absl::StatusOr<etcdserverpb::RangeResponse> found = client.Range(members);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->kvs_size(), 3);
  for (int node = 0; node < 3; ++node) {
    EXPECT_EQ(found->kvs(node).key(),
              absl::StrCat("/summon/secure/members/", node));
    EXPECT_EQ(found->kvs(node).value(), cluster.address(node));
  }
  ASSERT_TRUE(cluster.Stop().ok());
}

TEST_F(EtcdSecurityTest, AWrongPasswordStopsTheNodeAtStart) {
  const std::string wrong = etcd_->data_root() + "/wrong.password";
  std::ofstream(wrong) << "not-the-password-4711\n";
  const Refusal refusal = StartRefusedNode(
      "wrong",
      {"--coordinator-ca=" + etcd_->pki("ca.crt"),
       "--coordinator-cert=" + etcd_->pki("alice.crt"),
       "--coordinator-key=" + etcd_->pki("alice.key"),
       "--coordinator-user=summon", "--coordinator-password-file=" + wrong});
  EXPECT_EQ(refusal.exit.code.value_or(-1), 16)  // UNAUTHENTICATED
      << ExitStatusText(refusal.exit);
  EXPECT_NE(refusal.log.find(absl::StrCat(
                "summond failed to start: UNAUTHENTICATED: etcd refuses this "
                "node (check --coordinator-user, --coordinator-password-file "
                "and the user's etcd role): etcd: authenticate as user "
                "'summon' at ",
                etcd_->client_address(0),
                ": etcdserver: authentication failed, invalid user ID or "
                "password")),
            std::string::npos)
      << refusal.log;
  EXPECT_EQ(refusal.log.find("not-the-password-4711"), std::string::npos);
}

TEST_F(EtcdSecurityTest, AMissingClientCertificateStopsTheNodeAtStart) {
  const Refusal refusal = StartRefusedNode(
      "nocert",
      {"--coordinator-ca=" + etcd_->pki("ca.crt"), "--coordinator-user=summon",
       "--coordinator-password-file=" + etcd_->password_file()});
  EXPECT_EQ(refusal.exit.code.value_or(-1), 16)  // UNAUTHENTICATED
      << ExitStatusText(refusal.exit);
  EXPECT_NE(refusal.log.find(absl::StrCat(
                "summond failed to start: UNAUTHENTICATED: etcd refuses this "
                "node (the TLS handshake failed: check --coordinator-ca, "
                "--coordinator-cert and --coordinator-key): authenticate as "
                "user 'summon' at ",
                etcd_->client_address(0),
                ": failed to connect to all "
                "addresses; last error: UNAVAILABLE: ipv4:",
                etcd_->client_address(0), ": ")),
            std::string::npos)
      << refusal.log;
  // The right password, which must not be logged either.
  EXPECT_EQ(refusal.log.find(ReadAll(etcd_->password_file()).substr(0, 12)),
            std::string::npos);
}

}  // namespace
}  // namespace summon::tests
