#include "server/coordinator/static_coordinator.h"

#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

TEST(StaticCoordinatorTest, NodeZeroLeadsUnderOneEpoch) {
  StaticCoordinator leader(0, {"a:1", "b:2"});
  StaticCoordinator follower(1, {"a:1", "b:2"});
  ASSERT_TRUE(leader.Start().ok());
  ASSERT_TRUE(follower.Start().ok());
  EXPECT_TRUE(leader.IsLeader());
  EXPECT_FALSE(follower.IsLeader());
  EXPECT_EQ(*leader.LeaderEpoch(), StaticCoordinator::kEpoch);
  EXPECT_EQ(follower.LeaderEpoch().status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(leader.AwaitLeadership(absl::ZeroDuration()).ok());
  EXPECT_EQ(follower.AwaitLeadership(absl::Seconds(10)).code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Coordinator::Leadership> current = follower.CurrentLeader();
  ASSERT_TRUE(current.ok());
  EXPECT_EQ(current->node, 0);
  EXPECT_EQ(current->epoch, 1u);
  absl::StatusOr<std::vector<Coordinator::Member>> members = follower.Members();
  ASSERT_TRUE(members.ok());
  EXPECT_THAT(*members, ElementsAre(Coordinator::Member{0, "a:1"},
                                    Coordinator::Member{1, "b:2"}));
}

TEST(StaticCoordinatorTest, RefusesANodeOutsideItsList) {
  StaticCoordinator stray(2, {"a:1", "b:2"});
  EXPECT_EQ(stray.Start().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StaticCoordinatorTest, FencesAndDecisions) {
  StaticCoordinator leader(0, {"a:1"});
  ASSERT_TRUE(leader.Start().ok());
  EXPECT_TRUE(RecordCommitDecision(leader, "s1", "commit", 1).ok());
  EXPECT_EQ(RecordCommitDecision(leader, "s1", "abort", 1).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(**CommitDecision(leader, "s1"), "commit");
  EXPECT_EQ(*CommitDecision(leader, "s2"), std::nullopt);
  const absl::Status stale =
      leader.Put("models/m", "x", {2, false}, Coordinator::PutMode::kOverwrite);
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(stale.message(), "epoch 2 was deposed: the cluster is at epoch 1");
  ASSERT_TRUE(leader
                  .Put(coordinator_keys::Model("m"), "{}", {1, true},
                       Coordinator::PutMode::kOverwrite)
                  .ok());
  EXPECT_THAT(*leader.List(coordinator_keys::kModelsPrefix),
              ElementsAre(Pair("models/m", "{}")));
  ASSERT_TRUE(leader.Delete("models/m", {1, true}).ok());
  EXPECT_TRUE(leader.List("models/")->empty());

  StaticCoordinator follower(1, {"a:1", "b:2"});
  EXPECT_EQ(
      follower.Put("commits/s", "c", {1, true}, Coordinator::PutMode::kCreate)
          .code(),
      absl::StatusCode::kAborted);
}

TEST(StaticCoordinatorTest, AwaitKeyWakesOnPut) {
  StaticCoordinator node(0, {"a:1"});
  EXPECT_EQ(node.AwaitKey("rdzv/1/k", absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(node.Put(coordinator_keys::Rendezvous(1, "k"), "v", {1, false},
                         Coordinator::PutMode::kOverwrite)
                    .ok());
  });
  absl::StatusOr<std::string> value =
      node.AwaitKey("rdzv/1/k", absl::Seconds(10));
  writer.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "v");
}

}  // namespace
}  // namespace summon::server
