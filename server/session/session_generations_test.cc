// A new leader takes its units' generations from the nodes (issue 31): the
// highest any node holds, nodes behind are moved to it, and writebacks
// gathered afterwards pass R7 instead of being ABORTED forever.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/model/model_registry.h"
#include "server/session/session_manager.h"
#include "server/testing/session_manager_fixture.h"

namespace summon::server {
namespace {

class AdoptGenerationsTest : public SessionManagerTest {
 protected:
  int Unit(const std::string& fqn) const {
    for (size_t u = 0; u < model_->spec.units.size(); ++u) {
      if (model_->spec.units[u].fqn == fqn) return static_cast<int>(u);
    }
    ADD_FAILURE() << "no unit " << fqn;
    return -1;
  }

  uint64_t LeaderGeneration(int unit) const {
    absl::MutexLock lock(&model_->runtime_mu);
    return model_->runtime.units[unit].generation;
  }

  // Every unit at `generation` on this node's store: what the previous
  // leader's writebacks and steps left behind.
  std::map<int, uint64_t> HeldAt(uint64_t generation) {
    std::map<int, uint64_t> held;
    for (size_t u = 0; u < model_->spec.units.size(); ++u) {
      model_->store->SetGeneration(static_cast<int>(u), generation);
      held[static_cast<int>(u)] = generation;
    }
    return held;
  }

  absl::Status WriteBack() {
    SessionInfo info = Open(Scoped("layers.0"));
    WriteAll(info.id, "layers.0.w", Doubled(Seeded("layers.0.w", 25)));
    absl::StatusOr<CloseResult> closed =
        sessions_->Close(info.id, false, false, "alice");
    if (!closed.ok()) {
      sessions_->Close(info.id, true, false, "alice").IgnoreError();
      return closed.status();
    }
    written_generation_ = closed->generations.at("layers.0");
    return absl::OkStatus();
  }

  uint64_t written_generation_ = 0;
};

TEST_F(AdoptGenerationsTest, LeaderTakesTheNodesGenerations) {
  Start(2, core::Strategy::kFullShard);
  const int layer0 = Unit("layers.0");
  const std::map<int, uint64_t> held = HeldAt(4);
  // The leader's record still says 0: R7 refuses the writeback ("moved from
  // generation 0 to 4").
  EXPECT_EQ(WriteBack().code(), absl::StatusCode::kAborted);

  ASSERT_TRUE(sessions_->AdoptGenerations("m", {held, held}).ok());
  EXPECT_EQ(LeaderGeneration(layer0), 4u);
  EXPECT_EQ(LeaderGeneration(Unit("layers.1")), 4u);
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo check = Open(read_only);
  EXPECT_EQ(check.gathered_generations.at("layers.0"), 4u);
  ASSERT_TRUE(sessions_->Close(check.id, false, false, "alice").ok());
  const absl::Status written = WriteBack();
  ASSERT_TRUE(written.ok()) << written;
  EXPECT_EQ(written_generation_, 5u);
  EXPECT_EQ(model_->store->Generation(layer0), 5u);
}

TEST_F(AdoptGenerationsTest, NodesBehindAreMovedToTheHighest) {
  Start(2, core::Strategy::kFullShard);
  const int layer0 = Unit("layers.0");
  // This node missed the old leader's last move (4 -> 6) that another node
  // took: the leader takes 6, and this node is moved to 6 too.
  const std::map<int, uint64_t> behind = HeldAt(4);
  std::map<int, uint64_t> ahead = behind;
  ahead[layer0] = 6;
  ASSERT_TRUE(sessions_->AdoptGenerations("m", {behind, ahead}).ok());
  EXPECT_EQ(LeaderGeneration(layer0), 6u);
  EXPECT_EQ(LeaderGeneration(Unit("layers.1")), 4u);
  EXPECT_EQ(model_->store->Generation(layer0), 6u);
  const absl::Status written = WriteBack();
  ASSERT_TRUE(written.ok()) << written;
  EXPECT_EQ(written_generation_, 7u);
}

TEST_F(AdoptGenerationsTest, NeverBelowWhatTheLeaderHandedOut) {
  Start(2, core::Strategy::kFullShard);
  const int layer0 = Unit("layers.0");
  ASSERT_TRUE(WriteBack().ok());
  ASSERT_EQ(LeaderGeneration(layer0), 1u);
  // A node answering with an older value (restored from an old data dir)
  // never takes a generation back.
  ASSERT_TRUE(sessions_->AdoptGenerations("m", {{{layer0, 0}}}).ok());
  EXPECT_EQ(LeaderGeneration(layer0), 1u);
  EXPECT_EQ(model_->store->Generation(layer0), 1u);
  EXPECT_EQ(sessions_->AdoptGenerations("gone", {}).code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace summon::server
