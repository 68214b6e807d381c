// The etcd test harness itself: members start healthy on free ports, can be
// killed and restarted with their data, a proxy can cut a member's client
// port, and nothing is left behind.

#include "tests/coordinator/etcd_cluster.h"

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/coordinator/etcd_client.h"

namespace summon::tests {
namespace {

using server::EtcdClient;

absl::Status PutThrough(const std::string& endpoint, absl::Duration timeout,
                        const std::string& key) {
  EtcdClient client({{endpoint}, timeout, nullptr});
  etcdserverpb::TxnRequest txn;
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value("v");
  return client.Txn(txn).status();
}

TEST(EtcdClusterTest, ThreeMembersSurviveOneKillAndRestart) {
  EtcdCluster::Options options;
  options.members = 3;
  absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
      EtcdCluster::Start(options);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  const std::string root = (*etcd)->data_root();
  ASSERT_TRUE(std::filesystem::exists(root + "/m2"));
  for (int member = 0; member < 3; ++member) {
    EXPECT_TRUE(
        PutThrough((*etcd)->client_address(member), absl::Seconds(2), "a")
            .ok());
  }
  ASSERT_TRUE((*etcd)->Kill(1).ok());
  EXPECT_FALSE((*etcd)->running(1));
  EXPECT_TRUE((*etcd)->WaitHealthy(absl::Seconds(10)).ok());
  EXPECT_TRUE(
      PutThrough((*etcd)->client_address(2), absl::Seconds(2), "b").ok());
  ASSERT_TRUE((*etcd)->Restart(1).ok());
  ASSERT_TRUE((*etcd)->WaitHealthy(absl::Seconds(30)).ok());
  // The restarted member kept its data and caught up.
  EtcdClient client({{(*etcd)->client_address(1)}, absl::Seconds(2), nullptr});
  etcdserverpb::RangeRequest read;
  read.set_key("b");
  absl::StatusOr<etcdserverpb::RangeResponse> got = client.Range(read);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs_size(), 1);
  EXPECT_EQ(got->kvs(0).value(), "v");
  etcd->reset();
  EXPECT_FALSE(std::filesystem::exists(root));
}

TEST(EtcdClusterTest, ProxyCutsAndRestoresAMembersClientPort) {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
      EtcdCluster::Start(EtcdCluster::Options());
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  absl::StatusOr<TcpProxy*> proxy = (*etcd)->Proxy(0);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  const std::string through = (*proxy)->address();
  ASSERT_TRUE(PutThrough(through, absl::Seconds(2), "k").ok());

  (*proxy)->Cut();
  const absl::Time start = absl::Now();
  const absl::Status cut = PutThrough(through, absl::Milliseconds(500), "k");
  // Silence, not a refusal: the call waits out its deadline.
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(450));
  EXPECT_EQ(cut.code(), absl::StatusCode::kUnavailable) << cut;
  EXPECT_TRUE(absl::StartsWith(cut.message(), "coordinator has no quorum: "));
  // The member itself is fine.
  EXPECT_TRUE(
      PutThrough((*etcd)->client_address(0), absl::Seconds(2), "k").ok());

  (*proxy)->Restore();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::Status healed;
  do {
    healed = PutThrough(through, absl::Seconds(1), "k");
  } while (!healed.ok() && absl::Now() < deadline);
  EXPECT_TRUE(healed.ok()) << healed;
}

}  // namespace
}  // namespace summon::tests
