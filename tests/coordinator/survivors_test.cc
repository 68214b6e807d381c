// The survivors keep serving (issue 31): three real summond processes
// (3 nodes x 1 rank) on a real etcd from Debian's /usr/bin/etcd. A follower
// killed (SIGKILL): the cluster re-forms on the two survivors under a new
// epoch; a replicated model (HYBRID_SHARD, a replica of every shard on each
// node) still reads its exact seeded values and takes a writeback through
// them, while a FULL_SHARD model answers UNAVAILABLE naming the node. The
// node started again catches up before it serves: its rank holds exactly
// the bytes written while it was away (checksums of every rank), and the
// FULL_SHARD model serves again. The leader killed and not restarted: the
// two survivors elect one of them and serve the replicated model.

#include <iostream>
#include <memory>
#include <string>

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
// A lost node is found within the failure timeout, its etcd key expires
// with its 2 s lease; a new leader is elected within about the lease.
constexpr absl::Duration kServeAgain = absl::Seconds(40);

class SurvivorsTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
        EtcdCluster::Start(EtcdCluster::Options{});
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    LocalCluster::Options options =
        ThreeNodesOnEtcd(etcd_->client_address(0), "survivors");
    absl::StatusOr<std::unique_ptr<LocalCluster>> started =
        LocalCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
    absl::StatusOr<v1::ClusterStatus> first =
        AwaitAgreedLeadership(*cluster_, absl::Seconds(30));
    ASSERT_TRUE(first.ok()) << first.status();
    leader_ = first->leader();
    epoch_ = first->epoch();
    replicated_ = CreateSeeded(cluster_->client(leader_), "r", kUnevenLayout,
                               v1::SHARDING_STRATEGY_HYBRID_SHARD);
    sharded_ = CreateSeeded(cluster_->client(leader_), "f", kUnevenLayout,
                            v1::SHARDING_STRATEGY_FULL_SHARD);
  }
  void TearDown() override {
    if (cluster_ != nullptr) {
      const absl::Status stopped = cluster_->Stop();
      EXPECT_TRUE(stopped.ok()) << stopped;
    }
    cluster_.reset();
    etcd_.reset();
  }

  // An open of `model` (read-only, `fqn`) through `node` and its read,
  // tried until it answers or `kServeAgain` passes: the read's bytes, or the
  // last refusal.
  absl::StatusOr<std::string> ReadWhenServed(int node, const std::string& model,
                                             const std::string& fqn) {
    const absl::Time give_up = absl::Now() + kServeAgain;
    absl::Status last;
    while (absl::Now() < give_up) {
      absl::StatusOr<v1::Session> session = cluster_->client(node).OpenSession(
          model, ReadOnly(ParamScope({fqn})));
      if (session.ok()) {
        client::ReadTensorParams read;
        read.tensor = {session->id(), fqn, false};
        absl::StatusOr<client::TensorData> data =
            cluster_->client(node).ReadTensor(read);
        cluster_->client(node).CloseSession(session->id()).IgnoreError();
        if (data.ok()) return data->data;
        last = data.status();
      } else {
        last = session.status();
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return last;
  }

  // The cluster status as `node` reports it once it is READY.
  absl::StatusOr<v1::ClusterStatus> ReadyStatus(int node) {
    const absl::Time give_up = absl::Now() + kServeAgain;
    absl::StatusOr<v1::ClusterStatus> status;
    while (absl::Now() < give_up) {
      status = cluster_->client(node).GetClusterStatus();
      if (status.ok() && status->ready()) return status;
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (!status.ok()) return status.status();
    return absl::DeadlineExceededError(status->detail());
  }

  std::unique_ptr<EtcdCluster> etcd_;
  std::unique_ptr<LocalCluster> cluster_;
  int leader_ = 0;
  uint64_t epoch_ = 0;
  v1::Model replicated_;
  v1::Model sharded_;
};

TEST_F(SurvivorsTest, AFollowerLostThenBackCatchesUpBeforeItServes) {
  const int lost = (leader_ + 1) % cluster_->nodes();
  const int via = (leader_ + 2) % cluster_->nodes();
  TensorBytes expected = SeededModel(replicated_);
  ASSERT_TRUE(cluster_->Kill(lost).ok());
  const absl::Time killed = absl::Now();

  // The replicated model serves its exact values through the survivors.
  absl::StatusOr<std::string> read = ReadWhenServed(via, "r", kParam);
  ASSERT_TRUE(read.ok()) << read.status();
  std::cout << "follower " << lost
            << " killed: the survivors serve again after "
            << absl::FormatDuration(absl::Now() - killed) << "\n";
  EXPECT_EQ(*read, expected.at(kParam));
  absl::StatusOr<v1::ClusterStatus> survivors = ReadyStatus(via);
  ASSERT_TRUE(survivors.ok()) << survivors.status();
  EXPECT_EQ(survivors->leader(), leader_);
  EXPECT_GT(survivors->epoch(), epoch_);

  // A writeback through the survivors.
  expected[kParam] = SeededModel(replicated_, kEditSeed).at(kParam);
  const v1::Session session =
      OpenOk(cluster_->client(via), "r", ParamScope({kParam}));
  WriteOk(cluster_->client(via), session.id(), kParam, expected.at(kParam));
  CloseOk(cluster_->client(via), session.id());
  const v1::Session check =
      OpenOk(cluster_->client(leader_), "r", ReadOnly(ParamScope({kParam})));
  EXPECT_EQ(ReadOk(cluster_->client(leader_), check.id(), kParam),
            expected.at(kParam));
  CloseOk(cluster_->client(leader_), check.id());

  // The FULL_SHARD model needs the lost node's rank (the whole model: a
  // single parameter may lie in other ranks' chunks only).
  absl::StatusOr<v1::Session> refused =
      cluster_->client(via).OpenSession("f", ModuleScope(""));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message(),
            absl::StrCat("model 'f' is unavailable: it needs rank ", lost,
                         " on node ", lost,
                         ", which is not in the cluster (no node in the "
                         "cluster holds a replica of its shard); it serves "
                         "again once that node is back"));

  // Back: it joins without restarting the others and catches up first.
  const absl::Time restarted = absl::Now();
  ASSERT_TRUE(cluster_->StartNode(lost).ok());
  absl::StatusOr<v1::ClusterStatus> back =
      AwaitAgreedLeadership(*cluster_, kServeAgain);
  ASSERT_TRUE(back.ok()) << back.status();
  std::cout << "follower " << lost << " started again: caught up and every "
            << "node READY after "
            << absl::FormatDuration(absl::Now() - restarted) << "\n";
  EXPECT_EQ(back->leader(), leader_);
  EXPECT_GT(back->epoch(), survivors->epoch());
  // Every rank, the returned node's included, holds the edit.
  EXPECT_EQ(ParamChecksums(ChecksumOk(cluster_->client(lost), "r")),
            ExpectedChecksums(replicated_, expected));
  const v1::Session on_lost =
      OpenOk(cluster_->client(lost), "r", ReadOnly(ParamScope({kParam})));
  EXPECT_EQ(ReadOk(cluster_->client(lost), on_lost.id(), kParam),
            expected.at(kParam));
  CloseOk(cluster_->client(lost), on_lost.id());
  // The FULL_SHARD model serves its seeded values again, on every rank.
  EXPECT_EQ(ParamChecksums(ChecksumOk(cluster_->client(lost), "f")),
            ExpectedChecksums(sharded_, SeededModel(sharded_)));
  absl::StatusOr<std::string> sharded = ReadWhenServed(lost, "f", kParam);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_EQ(*sharded, SeededModel(sharded_).at(kParam));
}

TEST_F(SurvivorsTest, TheLeaderLostTheSurvivorsElectOneAndServe) {
  const int survivor = (leader_ + 1) % cluster_->nodes();
  const int other = (leader_ + 2) % cluster_->nodes();
  const TensorBytes expected = SeededModel(replicated_);
  ASSERT_TRUE(cluster_->Kill(leader_).ok());
  const absl::Time killed = absl::Now();

  // Without the old leader coming back: a survivor leads and serves.
  absl::StatusOr<std::string> read = ReadWhenServed(survivor, "r", kParam);
  ASSERT_TRUE(read.ok()) << read.status();
  std::cout << "leader " << leader_
            << " killed: the survivors serve again after "
            << absl::FormatDuration(absl::Now() - killed) << "\n";
  EXPECT_EQ(*read, expected.at(kParam));
  absl::StatusOr<v1::ClusterStatus> status = ReadyStatus(survivor);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_NE(status->leader(), leader_);
  EXPECT_GT(status->epoch(), epoch_);
  absl::StatusOr<v1::ClusterStatus> other_status = ReadyStatus(other);
  ASSERT_TRUE(other_status.ok()) << other_status.status();
  EXPECT_EQ(other_status->leader(), status->leader());
  EXPECT_EQ(other_status->epoch(), status->epoch());
  // A writeback through the survivors, read back through the other one.
  const std::string edited = SeededModel(replicated_, kEditSeed).at(kParam);
  const v1::Session session =
      OpenOk(cluster_->client(survivor), "r", ParamScope({kParam}));
  WriteOk(cluster_->client(survivor), session.id(), kParam, edited);
  CloseOk(cluster_->client(survivor), session.id());
  absl::StatusOr<std::string> again = ReadWhenServed(other, "r", kParam);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, edited);

  // The old leader comes back as a follower and catches up too.
  ASSERT_TRUE(cluster_->StartNode(leader_).ok());
  absl::StatusOr<v1::ClusterStatus> back =
      AwaitAgreedLeadership(*cluster_, kServeAgain);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->leader(), status->leader());
  TensorBytes written = expected;
  written[kParam] = edited;
  EXPECT_EQ(ParamChecksums(ChecksumOk(cluster_->client(leader_), "r")),
            ExpectedChecksums(replicated_, written));
}

}  // namespace
}  // namespace summon::tests
