// Gloo's rendezvous through etcd: RendezvousStore over CoordinatorKvStore
// carries raw bytes between nodes, forms a real Gloo communicator between
// two ranks that allgathers exact bytes, and refuses a deposed epoch's keys.

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gloo/common/error.h"
#include "gtest/gtest.h"
#include "server/cluster/coordinator_kv_store.h"
#include "server/cluster/rendezvous_store.h"
#include "server/comm/gloo_communicator.h"
#include "tests/coordinator/coordinator_testing.h"
#include "tests/coordinator/etcd_cluster.h"

namespace summon::tests {
namespace {

using server::CoordinatorKvStore;
using server::EtcdCoordinator;
using server::GlooCommunicator;
using server::RendezvousStore;

constexpr absl::Duration kTimeout = absl::Seconds(20);

class CoordinatorRendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd =
        EtcdCluster::Start(EtcdCluster::Options());
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(*etcd);
    const std::string cluster =
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (int node = 0; node < 2; ++node) {
      nodes_.push_back(
          MakeCoordinator(node, etcd_->client_addresses(), cluster));
      ASSERT_TRUE(nodes_.back()->Start().ok());
    }
    // Node 0 started first, but either may lead: the epoch is the leader's.
    const absl::Time deadline = absl::Now() + kTimeout;
    while (!nodes_[0]->IsLeader() && !nodes_[1]->IsLeader()) {
      ASSERT_LT(absl::Now(), deadline);
      absl::SleepFor(absl::Milliseconds(10));
    }
    absl::StatusOr<server::Coordinator::Leadership> leader =
        nodes_[0]->CurrentLeader();
    ASSERT_TRUE(leader.ok()) << leader.status();
    epoch_ = leader->epoch;
  }

  std::unique_ptr<EtcdCluster> etcd_;
  std::vector<std::unique_ptr<EtcdCoordinator>> nodes_;
  uint64_t epoch_ = 0;
};

TEST_F(CoordinatorRendezvousTest, RawBytesCrossNodesUnderTheEpoch) {
  CoordinatorKvStore kv0(*nodes_[0], epoch_);
  CoordinatorKvStore kv1(*nodes_[1], epoch_);
  RendezvousStore writer(kv0, "gloo/", absl::Seconds(5));
  RendezvousStore reader(kv1, "gloo/", absl::Seconds(5));
  std::vector<char> id(128);
  for (int i = 0; i < 128; ++i) id[i] = static_cast<char>(255 - 2 * i);
  id[0] = '\0';
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(100));
    writer.set("nccl_unique_id", id);
  });
  EXPECT_EQ(reader.get("nccl_unique_id"), id);
  later.join();
  EXPECT_NO_THROW(reader.wait({"nccl_unique_id"}));
  EXPECT_EQ(*nodes_[1]->Get(server::coordinator_keys::Rendezvous(
                epoch_, "gloo/nccl_unique_id")),
            std::string(id.begin(), id.end()));
  EXPECT_EQ(kv1.Get("gloo/absent", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  const absl::Status missing =
      kv1.Wait({"gloo/nccl_unique_id", "gloo/x"}, absl::Milliseconds(200));
  EXPECT_EQ(missing.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::EndsWith(missing.message(), ": gloo/x")) << missing;
}

TEST_F(CoordinatorRendezvousTest, GlooFormsThroughEtcdAndAllGathers) {
  std::unique_ptr<GlooCommunicator> comms[2];
  absl::Status created[2];
  std::thread ranks[2];
  for (int rank = 0; rank < 2; ++rank) {
    ranks[rank] = std::thread([&, rank] {
      CoordinatorKvStore kv(*nodes_[rank], epoch_);
      RendezvousStore store(kv, "gloo/", kTimeout);
      absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
          GlooCommunicator::Create({rank, 2, "127.0.0.1", kTimeout}, store);
      created[rank] = comm.status();
      if (comm.ok()) comms[rank] = *std::move(comm);
    });
  }
  for (std::thread& rank : ranks) rank.join();
  ASSERT_TRUE(created[0].ok()) << created[0];
  ASSERT_TRUE(created[1].ok()) << created[1];
  std::string out[2] = {std::string(7, '.'), std::string(7, '.')};
  const std::string send[2] = {"abc", "defg"};
  for (int rank = 0; rank < 2; ++rank) {
    ranks[rank] = std::thread([&, rank] {
      created[rank] = comms[rank]->AllGatherV(
          send[rank].data(), static_cast<int64_t>(send[rank].size()),
          out[rank].data(), {3, 4}, server::CollectiveOptions{});
    });
  }
  for (std::thread& rank : ranks) rank.join();
  ASSERT_TRUE(created[0].ok()) << created[0];
  ASSERT_TRUE(created[1].ok()) << created[1];
  EXPECT_EQ(out[0], "abcdefg");
  EXPECT_EQ(out[1], "abcdefg");
}

TEST_F(CoordinatorRendezvousTest, ADeposedEpochCannotPublish) {
  EtcdCoordinator& leader = nodes_[0]->IsLeader() ? *nodes_[0] : *nodes_[1];
  EtcdCoordinator& next = nodes_[0]->IsLeader() ? *nodes_[1] : *nodes_[0];
  leader.Stop();  // Resigns: the other leads under a new epoch.
  ASSERT_TRUE(next.AwaitLeadership(kTimeout).ok());
  ASSERT_GT(*next.LeaderEpoch(), epoch_);
  CoordinatorKvStore stale(next, epoch_);
  RendezvousStore store(stale, "gloo/", absl::Seconds(1));
  try {
    store.set("0", {'a'});
    ADD_FAILURE() << "a deposed epoch published a rendezvous key";
  } catch (const gloo::IoException& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "was deposed")) << e.what();
  }
  EXPECT_EQ(*next.Get(server::coordinator_keys::Rendezvous(epoch_, "gloo/0")),
            std::nullopt);
}

}  // namespace
}  // namespace summon::tests
