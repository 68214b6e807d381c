// Copy-on-write versions (version_store.h): a published version refers to
// the live shards; a unit is copied only when a writer announces a change
// (a writeback's COMMIT, an optimizer step's moved generations), and then
// read from its copy with the published bytes exactly.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "gtest/gtest.h"
#include "server/testing/session_manager_fixture.h"
#include "server/weight_sync/version_nodes.h"
#include "server/weight_sync/version_store.h"
#include "server/weight_sync/weight_sync.h"

namespace summon::server {
namespace {

using Box = std::vector<std::pair<int64_t, int64_t>>;

class VersionStoreTest : public SessionManagerTest {
 protected:
  void StartSync() {
    Start(2, core::Strategy::kFullShard);
    store_ = std::make_unique<VersionStore>(registry_.get(), 2);
    nodes_ = std::make_unique<LocalVersionNodes>(store_.get());
    sync_ = std::make_unique<WeightSync>(registry_.get(), sessions_.get(),
                                         store_.get(), nodes_.get(),
                                         WeightSync::Options{});
  }

  void TearDown() override {
    sync_.reset();
    nodes_.reset();
    store_.reset();
    SessionManagerTest::TearDown();
  }

  absl::StatusOr<std::vector<float>> ReadVersion(int64_t version,
                                                 const std::string& fqn,
                                                 Box box) {
    absl::StatusOr<PlannedRead> read = sync_->Plan(
        "m", version, {SliceRequest{fqn, std::move(box), core::DType::kFloat32}});
    if (!read.ok()) return read.status();
    std::vector<float> values(read->entries[0].numel);
    int64_t peer_bytes = 0;
    absl::Status filled = sync_->FillAll(
        *read, reinterpret_cast<uint8_t*>(values.data()), &peer_bytes);
    if (!filled.ok()) return filled;
    return values;
  }

  int64_t UnitBytes(int unit) const {
    return model_->spec.units[unit].layout.shard_bytes();
  }

  std::unique_ptr<VersionStore> store_;
  std::unique_ptr<LocalVersionNodes> nodes_;
  std::unique_ptr<WeightSync> sync_;
};

TEST_F(VersionStoreTest, UnchangedUnitsReadLiveAChangedOneFromItsCopy) {
  StartSync();
  ASSERT_TRUE(sync_->Publish("m", 1).ok());
  const VersionCounters& counters = store_->counters();
  // Nothing copied at publish, nor by reading while nothing changes.
  EXPECT_EQ(counters.unit_copies.load(), 0);
  EXPECT_EQ(counters.bytes.load(), 0);
  EXPECT_EQ(ReadVersion(1, "layers.0.w", {{0, 5}, {0, 5}}).value_or(std::vector<float>{}),
            Seeded("layers.0.w", 25));
  EXPECT_EQ(ReadVersion(1, "layers.1.w", {{0, 7}, {0, 5}}).value_or(std::vector<float>{}),
            Seeded("layers.1.w", 35));
  EXPECT_EQ(counters.unit_copies.load(), 0);

  // A writeback into layers.0 (unit #1): its COMMIT copies that unit of
  // both ranks into version 1 first, and nothing else.
  SessionInfo info = Open(Scoped("layers.0"));
  WriteAll(info.id, "layers.0.w", Doubled(Seeded("layers.0.w", 25)));
  ASSERT_TRUE(sessions_->Close(info.id, false, false, "alice").ok());
  EXPECT_EQ(counters.unit_copies.load(), 1);
  EXPECT_EQ(counters.bytes.load(), 2 * UnitBytes(1));
  EXPECT_EQ(ReadVersion(1, "layers.0.w", {{0, 5}, {0, 5}}).value_or(std::vector<float>{}),
            Seeded("layers.0.w", 25));
  const std::vector<float> bias = Seeded("layers.0.b", 5);
  EXPECT_EQ(ReadVersion(1, "layers.0.b", {{1, 3}}).value_or(std::vector<float>{}),
            std::vector<float>(bias.begin() + 1, bias.begin() + 4));
  EXPECT_EQ(ReadVersion(1, "layers.1.w", {{0, 7}, {0, 5}}).value_or(std::vector<float>{}),
            Seeded("layers.1.w", 35));

  // Version 2 sees the edit, live; version 1 still its copy.
  ASSERT_TRUE(sync_->Publish("m", 2).ok());
  EXPECT_EQ(ReadVersion(2, "layers.0.w", {{0, 5}, {0, 5}}).value_or(std::vector<float>{}),
            Doubled(Seeded("layers.0.w", 25)));
  EXPECT_EQ(counters.unit_copies.load(), 1);
}

TEST_F(VersionStoreTest, AnOptimizerStepCopiesEveryUnitBeforeTheTrainerWrites) {
  StartSync();
  ASSERT_TRUE(sync_->Publish("m", 1).ok());
  for (auto phase :
       {core::TrainingPhase::kForward, core::TrainingPhase::kBetween,
        core::TrainingPhase::kBackward, core::TrainingPhase::kOptimizer}) {
    ASSERT_TRUE(sessions_->ReportPhase("m", 0, phase, 1, std::nullopt).ok());
  }
  // The step's moved generations reached this node: every unit of every
  // local rank was copied before they moved.
  EXPECT_EQ(store_->counters().unit_copies.load(), 3);
  // The trainer writes its new values into rank 0's shard of layers.1.
  const std::vector<float> stepped(UnitBytes(2) / 4, 42.0f);
  ASSERT_TRUE(model_->store
                  ->WriteShard(0, 2, /*grads=*/false, 0, stepped.data(),
                               UnitBytes(2))
                  .ok());
  EXPECT_EQ(ReadVersion(1, "layers.1.w", {{0, 7}, {0, 5}}).value_or(std::vector<float>{}),
            Seeded("layers.1.w", 35));
}

TEST_F(VersionStoreTest, AChangeNobodyAnnouncedIsRefusedNotMixed) {
  StartSync();
  ASSERT_TRUE(sync_->Publish("m", 1).ok());
  model_->store->BumpGeneration(2);  // A writer that skipped the hook.
  const absl::StatusOr<std::vector<float>> read =
      ReadVersion(1, "layers.1.w", {{0, 7}, {0, 5}});
  EXPECT_EQ(read.status().code(), absl::StatusCode::kAborted) << read.status();
  // Units whose generation did not move still read.
  EXPECT_EQ(ReadVersion(1, "layers.0.w", {{0, 5}, {0, 5}}).value_or(std::vector<float>{}),
            Seeded("layers.0.w", 25));
}

}  // namespace
}  // namespace summon::server
