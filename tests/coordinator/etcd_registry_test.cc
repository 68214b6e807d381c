// The model registry survives the loss of any node's data dir (issue 31):
// three real summond processes on a real etcd (Debian's /usr/bin/etcd), the
// leader publishing each model's record under models/<name> before it
// acknowledges a change. A node killed (SIGKILL), its data dir wiped and
// started again rebuilds its records from etcd when the cluster forms and
// re-attaches its shards, which stayed in shared memory: the models are
// listed and described exactly as before (spec, generations) and read the
// exact bytes a writeback left, through that node, on every rank. First a
// follower, then the leader (another node leads meanwhile). A model deleted
// while a node held a stale record of it goes there too (its tombstone), so
// the name can be created again.

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
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

namespace fs = std::filesystem;
namespace v1 = ::summon::v1;

constexpr char kParam[] = "layers.0.attn.w";
constexpr uint64_t kEditSeed = 29;

class EtcdRegistryTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
        EtcdCluster::Start(EtcdCluster::Options{});
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    LocalCluster::Options options =
        ThreeNodesOnEtcd(etcd_->client_address(0), "registry");
    absl::StatusOr<std::unique_ptr<LocalCluster>> started =
        LocalCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = *std::move(started);
  }
  void TearDown() override {
    if (cluster_ != nullptr) {
      const absl::Status stopped = cluster_->Stop();
      EXPECT_TRUE(stopped.ok()) << stopped;
    }
    cluster_.reset();
    etcd_.reset();
  }

  // What a client sees of the models through `node`: the listing, each
  // model described (spec, ranks, generations) and every tensor's bytes.
  struct Seen {
    std::string listing;
    std::string described;
    TensorBytes values;
  };
  Seen SeenThrough(int node, const v1::Model& model) {
    Seen seen;
    absl::StatusOr<v1::ListModelsResponse> listing =
        cluster_->client(node).ListModels();
    EXPECT_TRUE(listing.ok()) << listing.status();
    if (listing.ok()) seen.listing = listing->DebugString();
    absl::StatusOr<v1::Model> described =
        cluster_->client(node).DescribeModel(model.name());
    EXPECT_TRUE(described.ok()) << described.status();
    if (described.ok()) seen.described = described->DebugString();
    const v1::Session session =
        OpenOk(cluster_->client(node), model.name(), ReadOnly());
    for (const auto& [fqn, unused] : SeededModel(model)) {
      seen.values[fqn] = ReadOk(cluster_->client(node), session.id(), fqn);
    }
    CloseOk(cluster_->client(node), session.id());
    return seen;
  }

  // Kills `node`, wipes its data dir (an empty one, as a replaced disk),
  // starts it again and waits until the cluster formed with it.
  v1::ClusterStatus LoseDataDir(int node) {
    EXPECT_TRUE(cluster_->Kill(node).ok());
    const fs::path dir = cluster_->data_dir(node);
    std::error_code error;
    fs::remove_all(dir, error);
    EXPECT_FALSE(error) << error.message();
    fs::create_directories(dir, error);
    EXPECT_FALSE(error) << error.message();
    EXPECT_TRUE(cluster_->StartNode(node).ok());
    absl::StatusOr<v1::ClusterStatus> formed =
        AwaitAgreedLeadership(*cluster_, absl::Seconds(60));
    EXPECT_TRUE(formed.ok()) << formed.status();
    return formed.ok() ? *formed : v1::ClusterStatus();
  }

  std::unique_ptr<EtcdCluster> etcd_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(EtcdRegistryTest, AnyNodeRebuildsItsRegistryAfterLosingItsDataDir) {
  absl::StatusOr<v1::ClusterStatus> first =
      AwaitAgreedLeadership(*cluster_, absl::Seconds(60));
  ASSERT_TRUE(first.ok()) << first.status();
  const int leader = first->leader();
  const int follower = (leader + 1) % cluster_->nodes();
  // FULL_SHARD over the three ranks: every tensor needs every node's rank.
  const v1::Model model =
      CreateSeeded(cluster_->client(leader), "m", kUnevenLayout,
                   v1::SHARDING_STRATEGY_FULL_SHARD);
  const std::string edited = SeededModel(model, kEditSeed).at(kParam);
  const v1::Session session =
      OpenOk(cluster_->client(follower), "m", ParamScope({kParam}));
  WriteOk(cluster_->client(follower), session.id(), kParam, edited);
  CloseOk(cluster_->client(follower), session.id());
  const Seen before = SeenThrough(follower, model);
  ASSERT_EQ(before.values.at(kParam), edited);

  // A follower's data dir.
  LoseDataDir(follower);
  const Seen after_follower = SeenThrough(follower, model);
  EXPECT_EQ(after_follower.listing, before.listing);
  EXPECT_EQ(after_follower.described, before.described);
  EXPECT_EQ(after_follower.values, before.values);
  EXPECT_TRUE(
      fs::exists(fs::path(cluster_->data_dir(follower)) / "models" / "m.json"));

  // The leader's: a survivor leads, the old leader's new process follows
  // with its registry rebuilt.
  const v1::ClusterStatus failed_over = LoseDataDir(leader);
  EXPECT_NE(failed_over.leader(), leader);
  EXPECT_GT(failed_over.epoch(), first->epoch());
  const Seen after_leader = SeenThrough(leader, model);
  EXPECT_EQ(after_leader.listing, before.listing);
  EXPECT_EQ(after_leader.described, before.described);
  EXPECT_EQ(after_leader.values, before.values);
}

TEST_F(EtcdRegistryTest, AStaleRecordOfADeletedModelGoesOnFormation) {
  absl::StatusOr<v1::ClusterStatus> first =
      AwaitAgreedLeadership(*cluster_, absl::Seconds(60));
  ASSERT_TRUE(first.ok()) << first.status();
  const int leader = first->leader();
  const int follower = (leader + 1) % cluster_->nodes();
  CreateSeeded(cluster_->client(leader), "gone", kUnevenLayout,
               v1::SHARDING_STRATEGY_FULL_SHARD);
  // The follower's record as it was before the delete reached it (a node
  // away during the delete keeps its record).
  const fs::path record =
      fs::path(cluster_->data_dir(follower)) / "models" / "gone.json";
  const fs::path kept = fs::path(cluster_->data_dir(follower)) / "kept.json";
  ASSERT_TRUE(fs::copy_file(record, kept));
  absl::StatusOr<v1::DeleteModelResponse> deleted =
      cluster_->client(leader).DeleteModel("gone");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  ASSERT_TRUE(cluster_->Kill(follower).ok());
  fs::rename(kept, record);
  ASSERT_TRUE(cluster_->StartNode(follower).ok());
  ASSERT_TRUE(AwaitAgreedLeadership(*cluster_, absl::Seconds(60)).ok());
  EXPECT_FALSE(fs::exists(record));
  // The name is free on every node: created again (another strategy), it
  // serves its seeded values.
  const v1::Model again =
      CreateSeeded(cluster_->client(follower), "gone", kUnevenLayout,
                   v1::SHARDING_STRATEGY_NO_SHARD);
  const v1::Session session =
      OpenOk(cluster_->client(follower), "gone", ReadOnly());
  EXPECT_EQ(ReadOk(cluster_->client(follower), session.id(), kParam),
            SeededModel(again).at(kParam));
  CloseOk(cluster_->client(follower), session.id());
}

}  // namespace
}  // namespace summon::tests
