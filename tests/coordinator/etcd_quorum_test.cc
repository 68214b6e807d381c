// A summond cluster on an etcd that loses its quorum (issue 31, "etcd's own
// faults"): three real summond on a real 3-member etcd, two of its members
// killed. While etcd has no quorum the leader keeps its formation (no
// other node can be elected meanwhile: etcd expires no lease and writes no
// epoch without a quorum), refuses new sessions, writes, writebacks and
// model operations with UNAVAILABLE "coordinator has no quorum", keeps
// serving reads of the sessions already open (through itself and through
// a follower), and answers a trainer's phase report at once. Once the
// members are back the same formation serves again, under the same epoch,
// without restarting anything: the open sessions still read, a writeback
// refused meanwhile commits when sent again.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/coordinator/etcd_cluster.h"
#include "tests/coordinator/failover_trial.h"

namespace summon::tests {
namespace {

namespace v1 = ::summon::v1;

constexpr char kParam[] = "layers.0.attn.w";
constexpr uint64_t kEditSeed = 29;
constexpr absl::Duration kLeaseTtl = absl::Seconds(2);
// The trainer library's default report_timeout: a phase report answered
// later would hold a training step.
constexpr absl::Duration kReportTimeout = absl::Seconds(2);

std::string NoQuorum(int leader) {
  return absl::StrCat(
      "coordinator has no quorum: node ", leader,
      " (the leader) cannot renew its lease; new sessions, writebacks and "
      "model operations wait until etcd has a quorum again (reads of open "
      "sessions are served)");
}

void ExpectNoQuorum(const absl::Status& status, int leader,
                    absl::string_view what) {
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << what;
  EXPECT_EQ(status.message(), NoQuorum(leader)) << what;
}

TEST(EtcdQuorumTest, LostQuorumRefusesChangesServesOpenReadsAndRecovers) {
  EtcdCluster::Options etcd_options;
  etcd_options.members = 3;
  absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
      EtcdCluster::Start(etcd_options);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  LocalCluster::Options options;
  options.nodes = 3;
  options.local_ranks = 1;
  options.collective_timeout = absl::Seconds(10);
  options.coordinator =
      absl::StrCat("etcd://", (*etcd)->client_address(0), ",",
                   (*etcd)->client_address(1), ",", (*etcd)->client_address(2),
                   "/quorum");
  options.coordinator_lease_ttl = kLeaseTtl;
  absl::StatusOr<std::unique_ptr<LocalCluster>> started =
      LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;

  absl::StatusOr<v1::ClusterStatus> before = AgreedLeadership(cluster);
  ASSERT_TRUE(before.ok()) << before.status();
  const int leader = before->leader();
  const int follower = (leader + 1) % cluster.nodes();
  const v1::Model model =
      CreateSeeded(cluster.client(follower), "m", kUnevenLayout,
                   v1::SHARDING_STRATEGY_FULL_SHARD);
  const std::string original = SeededModel(model).at(kParam);
  const std::string edited = SeededModel(model, kEditSeed).at(kParam);
  const v1::Session reading = OpenOk(cluster.client(follower), "m",
                                     ReadOnly(ParamScope({kParam})));
  const v1::Session writing =
      OpenOk(cluster.client(follower), "m", ParamScope({kParam}));
  WriteOk(cluster.client(follower), writing.id(), kParam, edited);

  ASSERT_TRUE((*etcd)->Kill(1).ok());
  ASSERT_TRUE((*etcd)->Kill(2).ok());
  // The leader stops acting TTL - margin after its last renewal ("electing
  // a leader" until a keepalive finds etcd without a leader), then answers
  // why.
  const absl::Time lost = absl::Now();
  absl::Status open = absl::OkStatus();
  // Opened before the leader stopped acting; closed once etcd is back.
  std::vector<std::string> early;
  while (absl::Now() - lost < absl::Seconds(20)) {
    absl::StatusOr<v1::Session> opened = cluster.client(follower).OpenSession(
        "m", ReadOnly(ParamScope({kParam})));
    if (opened.ok()) early.push_back(opened->id());
    open = opened.status();
    if (open.message() == NoQuorum(leader)) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ExpectNoQuorum(open, leader, "open through a follower");
  // Past twice the lease: nothing gave up meanwhile.
  absl::SleepFor(2 * kLeaseTtl + absl::Seconds(1));
  for (int via : {leader, follower}) {
    const client::SummonClient& node = cluster.client(via);
    SCOPED_TRACE(absl::StrCat("through node ", via));
    ExpectNoQuorum(node.OpenSession("m", ReadOnly(ParamScope({kParam})))
                       .status(),
                   leader, "open");
    client::CreateModelParams create;
    create.name = "n";
    create.layout_json = kUnevenLayout;
    ExpectNoQuorum(node.CreateModel(create).status(), leader, "create");
    ExpectNoQuorum(node.CloseSession(writing.id()).status(), leader,
                   "writeback");
    // An open session's description and lease renewal go on.
    absl::StatusOr<v1::Session> renewed = node.RenewSession(reading.id());
    ASSERT_TRUE(renewed.ok()) << renewed.status();
    EXPECT_EQ(renewed->id(), reading.id());
    absl::StatusOr<v1::Session> described = node.GetSession(writing.id());
    ASSERT_TRUE(described.ok()) << described.status();
    EXPECT_EQ(described->id(), writing.id());
    // Reads of the sessions already open: the bytes as they were.
    EXPECT_EQ(ReadOk(node, reading.id(), kParam), original);
    EXPECT_EQ(ReadOk(node, writing.id(), kParam), edited);
    const absl::Time reported = absl::Now();
    const absl::Status phase =
        node.ReportPhase("m", 0, v1::TRAINING_PHASE_FORWARD).status();
    EXPECT_LT(absl::Now() - reported, kReportTimeout);
    ExpectNoQuorum(phase, leader, "phase report");
  }

  ASSERT_TRUE((*etcd)->Restart(1).ok());
  ASSERT_TRUE((*etcd)->Restart(2).ok());
  ASSERT_TRUE((*etcd)->WaitHealthy(absl::Seconds(30)).ok());
  // Serving again without a restart: the same leader, the same epoch.
  absl::StatusOr<v1::CloseSessionResponse> closed =
      absl::UnavailableError("not sent");
  const absl::Time back = absl::Now();
  while (absl::Now() - back < absl::Seconds(30)) {
    closed = cluster.client(follower).CloseSession(writing.id());
    if (closed.ok()) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_TRUE(closed.ok()) << closed.status();
  absl::StatusOr<v1::ClusterStatus> after = AgreedLeadership(cluster);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->leader(), leader);
  EXPECT_EQ(after->epoch(), before->epoch());
  EXPECT_EQ(ReadOk(cluster.client(leader), reading.id(), kParam), original);
  CloseOk(cluster.client(leader), reading.id());
  for (const std::string& id : early) CloseOk(cluster.client(leader), id);
  const v1::Session again = OpenOk(cluster.client(follower), "m",
                                   ReadOnly(ParamScope({kParam})));
  EXPECT_EQ(ReadOk(cluster.client(follower), again.id(), kParam), edited);
  CloseOk(cluster.client(follower), again.id());
  const absl::Status stopped = cluster.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace summon::tests
