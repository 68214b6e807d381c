// The etcd coordinator against real etcd members (Debian's /usr/bin/etcd):
// the election, hand-overs, the validity bound, epoch fencing and the
// records, on a 1-member etcd. Faults of etcd itself (members killed, a
// partition) are in etcd_faults_test.cc.

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/etcd_client.h"
#include "tests/coordinator/coordinator_testing.h"
#include "tests/coordinator/etcd_cluster.h"

namespace summon::tests {
namespace {

using server::Coordinator;
using server::EtcdCoordinator;
using ::testing::ElementsAre;
using ::testing::Pair;

constexpr absl::Duration kElectionTimeout = absl::Seconds(15);

class EtcdCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
        EtcdCluster::Start(EtcdCluster::Options());
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(*etcd);
    cluster_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  // Starts `count` coordinators one after another, each once its
  // predecessor's candidate key is in etcd, so node i has the i-th lowest
  // create-revision.
  void StartInOrder(int count) {
    for (int node = 0; node < count; ++node) {
      nodes_.push_back(
          MakeCoordinator(node, etcd_->client_addresses(), cluster_));
      ASSERT_TRUE(nodes_.back()->Start().ok());
      WaitForCandidates(node + 1);
    }
  }

  void WaitForCandidates(size_t count) {
    const absl::Time deadline = absl::Now() + kElectionTimeout;
    while (true) {
      absl::StatusOr<std::vector<int>> candidates =
          CandidatesInOrder(etcd_->client_addresses(), cluster_);
      if (candidates.ok() && candidates->size() == count) return;
      ASSERT_LT(absl::Now(), deadline) << "candidates never reached " << count;
      absl::SleepFor(absl::Milliseconds(10));
    }
  }

  std::vector<EtcdCoordinator*> Raw() {
    std::vector<EtcdCoordinator*> raw;
    for (auto& node : nodes_) raw.push_back(node.get());
    return raw;
  }

  std::unique_ptr<EtcdCluster> etcd_;
  std::string cluster_;
  std::vector<std::unique_ptr<EtcdCoordinator>> nodes_;
};

TEST_F(EtcdCoordinatorTest, ExactlyOneLeadsTheLowestCreateRevision) {
  // All three campaign at once: whoever etcd ordered first leads.
  for (int node = 0; node < 3; ++node) {
    nodes_.push_back(
        MakeCoordinator(node, etcd_->client_addresses(), cluster_));
  }
  for (auto& node : nodes_) ASSERT_TRUE(node->Start().ok());
  WaitForCandidates(3);
  absl::StatusOr<std::vector<int>> order =
      CandidatesInOrder(etcd_->client_addresses(), cluster_);
  ASSERT_TRUE(order.ok()) << order.status();
  const int first = (*order)[0];
  ASSERT_TRUE(nodes_[first]->AwaitLeadership(kElectionTimeout).ok());
  // Over two full TTLs, nobody else ever leads.
  LeadershipRecorder recorder(Raw());
  absl::SleepFor(2 * kTestTtl);
  for (int node = 0; node < 3; ++node) {
    EXPECT_EQ(nodes_[node]->IsLeader(), node == first) << node;
    EXPECT_EQ(recorder.Of(node).began != absl::InfiniteFuture(), node == first);
  }
  EXPECT_FALSE(recorder.two_leaders_seen());
  absl::StatusOr<Coordinator::Leadership> leader = nodes_[1]->CurrentLeader();
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->node, first);
  EXPECT_EQ(leader->epoch, *nodes_[first]->LeaderEpoch());
  absl::StatusOr<std::vector<Coordinator::Member>> members =
      nodes_[2]->Members();
  ASSERT_TRUE(members.ok()) << members.status();
  EXPECT_THAT(*members, ElementsAre(Coordinator::Member{0, "node-0:7000"},
                                    Coordinator::Member{1, "node-1:7000"},
                                    Coordinator::Member{2, "node-2:7000"}));
}

TEST_F(EtcdCoordinatorTest, RevokedLeaseHandsOverToTheNextWithAHigherEpoch) {
  StartInOrder(3);
  ASSERT_TRUE(nodes_[0]->AwaitLeadership(kElectionTimeout).ok());
  const uint64_t first_epoch = *nodes_[0]->LeaderEpoch();
  server::EtcdClient admin({etcd_->client_addresses(), absl::Seconds(2), {}});
  ASSERT_TRUE(admin.LeaseRevoke(nodes_[0]->lease()).ok());

  ASSERT_TRUE(nodes_[1]->AwaitLeadership(kElectionTimeout).ok());
  const uint64_t second_epoch = *nodes_[1]->LeaderEpoch();
  EXPECT_GT(second_epoch, first_epoch);
  EXPECT_FALSE(nodes_[2]->IsLeader());
  // A lease revoked by someone else ends it before its time: node 0 learns
  // from its watch on its own key (until then the epoch fence below keeps
  // its writes out).
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (nodes_[0]->IsLeader()) {
    ASSERT_LT(absl::Now(), deadline) << "node 0 never stepped down";
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::StatusOr<Coordinator::Leadership> leader = nodes_[2]->CurrentLeader();
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->node, 1);
  EXPECT_EQ(leader->epoch, second_epoch);
  // Node 0 campaigns again behind the others.
  WaitForCandidates(3);
  EXPECT_THAT(*CandidatesInOrder(etcd_->client_addresses(), cluster_),
              ElementsAre(1, 2, 0));

  // The deposed epoch's writes are refused, whoever sends them; the
  // current one's land.
  const absl::Status stale =
      nodes_[0]->Put("models/m", "old", {first_epoch, false},
                     Coordinator::PutMode::kOverwrite);
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(
      stale.message(),
      absl::StrCat("epoch ", first_epoch,
                   " was deposed: the cluster is at epoch ", second_epoch));
  EXPECT_EQ(nodes_[1]
                ->Put("models/m", "old", {first_epoch, true},
                      Coordinator::PutMode::kOverwrite)
                .code(),
            absl::StatusCode::kAborted);
  ASSERT_TRUE(nodes_[1]
                  ->Put("models/m", "new", {second_epoch, true},
                        Coordinator::PutMode::kOverwrite)
                  .ok());
  EXPECT_EQ(**nodes_[0]->Get("models/m"), "new");
}

TEST_F(EtcdCoordinatorTest, PausedLeaderStopsActingBeforeItsLeaseExpires) {
  StartInOrder(2);
  ASSERT_TRUE(nodes_[0]->AwaitLeadership(kElectionTimeout).ok());
  const uint64_t epoch = *nodes_[0]->LeaderEpoch();
  LeadershipRecorder recorder(Raw());
  // A paused leader: no keepalive leaves any more.
  nodes_[0]->PauseKeepalivesForTesting(true);
  const absl::Time paused = absl::Now();
  EXPECT_LE(nodes_[0]->LeadershipValidFor(), kTestTtl - kTestMargin);

  ASSERT_TRUE(nodes_[1]->AwaitLeadership(kElectionTimeout).ok());
  const LeadershipRecorder::Record old_leader = recorder.Of(0);
  const LeadershipRecorder::Record new_leader = recorder.Of(1);
  // Node 0 stopped within TTL - margin of its last renewal, which was
  // before the pause; node 1 led only after etcd expired the lease, at
  // least TTL after that renewal: the margin lies between them.
  EXPECT_LT(old_leader.ended, paused + kTestTtl - kTestMargin);
  EXPECT_LT(old_leader.ended, new_leader.began);
  EXPECT_GE(new_leader.began - old_leader.ended, kTestMargin / 2);
  EXPECT_FALSE(recorder.two_leaders_seen());

  // Woken up, node 0 acts on nothing: its leader writes are refused locally
  // and its epoch's by etcd.
  const absl::Status as_leader = nodes_[0]->Put(
      "commits/s", "commit", {epoch, true}, Coordinator::PutMode::kCreate);
  EXPECT_EQ(as_leader.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(as_leader.message(), "node 0 does not lead");
  const absl::Status fenced = nodes_[0]->Put("rdzv/x", "y", {epoch, false},
                                             Coordinator::PutMode::kOverwrite);
  EXPECT_EQ(fenced.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(*nodes_[0]->Get("commits/s"), std::nullopt);
  nodes_[0]->PauseKeepalivesForTesting(false);
  absl::SleepFor(kTestTtl);
  EXPECT_TRUE(nodes_[1]->IsLeader());
  EXPECT_FALSE(nodes_[0]->IsLeader());
}

TEST_F(EtcdCoordinatorTest, ResigningOnStopHandsOverAtOnce) {
  StartInOrder(2);
  ASSERT_TRUE(nodes_[0]->AwaitLeadership(kElectionTimeout).ok());
  const absl::Time stopped = absl::Now();
  nodes_[0]->Stop();
  ASSERT_TRUE(nodes_[1]->AwaitLeadership(kElectionTimeout).ok());
  // No lease to wait out: the election key went with the revoke.
  EXPECT_LT(absl::Now() - stopped, kTestTtl);
}

TEST_F(EtcdCoordinatorTest, CommitDecisionsRendezvousAndModelsRoundTrip) {
  StartInOrder(2);
  ASSERT_TRUE(nodes_[0]->AwaitLeadership(kElectionTimeout).ok());
  const uint64_t epoch = *nodes_[0]->LeaderEpoch();
  Coordinator& leader = *nodes_[0];
  Coordinator& follower = *nodes_[1];

  ASSERT_TRUE(
      server::RecordCommitDecision(leader, "s-1", "commit", epoch).ok());
  const absl::Status again =
      server::RecordCommitDecision(leader, "s-1", "abort", epoch);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(again.message(), "commits/s-1 is already set");
  EXPECT_EQ(**server::CommitDecision(follower, "s-1"), "commit");
  EXPECT_EQ(*server::CommitDecision(follower, "s-2"), std::nullopt);
  // A follower cannot decide.
  EXPECT_EQ(
      server::RecordCommitDecision(follower, "s-2", "commit", epoch).code(),
      absl::StatusCode::kUnavailable);

  // Rendezvous: the follower waits for a key the leader sets later.
  absl::StatusOr<std::string> seen;
  std::thread waiter([&] {
    seen = follower.AwaitKey(server::coordinator_keys::Rendezvous(epoch, "a"),
                             absl::Seconds(10));
  });
  absl::SleepFor(absl::Milliseconds(300));
  const std::string address("\x00\x01gloo", 6);
  ASSERT_TRUE(leader
                  .Put(server::coordinator_keys::Rendezvous(epoch, "a"),
                       address, {epoch, false},
                       Coordinator::PutMode::kOverwrite)
                  .ok());
  waiter.join();
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, address);
  EXPECT_EQ(follower.AwaitKey("rdzv/0/never", absl::Milliseconds(300))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);

  ASSERT_TRUE(leader
                  .Put(server::coordinator_keys::Model("m1"), "{\"w\":4}",
                       {epoch, true}, Coordinator::PutMode::kOverwrite)
                  .ok());
  ASSERT_TRUE(leader
                  .Put(server::coordinator_keys::Model("m2"), "{}",
                       {epoch, true}, Coordinator::PutMode::kOverwrite)
                  .ok());
  EXPECT_THAT(
      *follower.List(server::coordinator_keys::kModelsPrefix),
      ElementsAre(Pair("models/m1", "{\"w\":4}"), Pair("models/m2", "{}")));
  ASSERT_TRUE(leader.Delete("models/m1", {epoch, true}).ok());
  EXPECT_THAT(*follower.List("models/"), ElementsAre(Pair("models/m2", "{}")));
}

}  // namespace
}  // namespace summon::tests
