// Copy-on-write versions (version_store.h): a published version refers to
// the live shards; a unit is copied only when a writer announces a change
// (a writeback's COMMIT, an optimizer step's moved generations), and then
// read from its copy with the published bytes exactly. A version the
// trainers published at a step's end (ReportPhaseAndPublish) is copied
// ahead in the background, so the next step's move into OPTIMIZER copies
// nothing, and its reads are still the step's bytes exactly.

#include "server/weight_sync/version_store.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "gtest/gtest.h"
#include "server/testing/loopback_version_nodes.h"
#include "server/testing/session_manager_fixture.h"
#include "server/weight_sync/version_nodes.h"
#include "server/weight_sync/weight_sync.h"

namespace summon::server {
namespace {

using Box = std::vector<std::pair<int64_t, int64_t>>;

class VersionStoreTest : public SessionManagerTest {
 protected:
  void StartSync(WeightSync::Options options = {}) {
    Start(2, core::Strategy::kFullShard);
    store_ = std::make_unique<VersionStore>(registry_.get(), 2);
    nodes_ = std::make_unique<LocalVersionNodes>(store_.get());
    sync_ = std::make_unique<WeightSync>(registry_.get(), sessions_.get(),
                                         store_.get(), nodes_.get(), options);
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
    absl::StatusOr<PlannedRead> read =
        sync_->Plan("m", version,
                    {SliceRequest{fqn, std::move(box), core::DType::kFloat32}});
    if (!read.ok()) return read.status();
    std::vector<float> values(read->entries[0].numel);
    int64_t peer_bytes = 0;
    absl::Status filled = sync_->FillAll(
        *read, reinterpret_cast<uint8_t*>(values.data()), &peer_bytes);
    if (!filled.ok()) return filled;
    return values;
  }

  // Three entries of a read, packed at 0, 160 and 176: rows of a weight,
  // part of a bias (a 4-byte gap after it), a float64 box.
  static std::vector<SliceRequest> ThreeEntries() {
    return {
        SliceRequest{"embed.w", {{0, 10}, {0, 4}}, core::DType::kFloat32},
        SliceRequest{"layers.0.b", {{1, 3}}, core::DType::kFloat32},
        SliceRequest{"layers.1.w", {{2, 5}, {1, 3}}, core::DType::kFloat64}};
  }

  // ThreeEntries' bytes exactly, the gap zero.
  void ExpectThreeEntries(const std::vector<uint8_t>& packed) {
    std::vector<float> embed(40);
    std::memcpy(embed.data(), packed.data(), 160);
    EXPECT_EQ(embed, Seeded("embed.w", 40));
    std::vector<float> bias(3);
    std::memcpy(bias.data(), packed.data() + 160, 12);
    const std::vector<float> seeded_bias = Seeded("layers.0.b", 5);
    EXPECT_EQ(bias, std::vector<float>(seeded_bias.begin() + 1,
                                       seeded_bias.begin() + 4));
    EXPECT_EQ(std::vector<uint8_t>(packed.begin() + 172, packed.begin() + 176),
              std::vector<uint8_t>(4, 0));  // The gap.
    std::vector<double> w(15);
    std::memcpy(w.data(), packed.data() + 176, 120);
    const std::vector<float> seeded_w = Seeded("layers.1.w", 35);
    std::vector<double> expected_w;
    for (int row = 2; row < 7; ++row) {
      for (int col = 1; col < 4; ++col) {
        expected_w.push_back(seeded_w[row * 5 + col]);
      }
    }
    EXPECT_EQ(w, expected_w);
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
  EXPECT_EQ(ReadVersion(1, "layers.0.w", {{0, 5}, {0, 5}})
                .value_or(std::vector<float>{}),
            Seeded("layers.0.w", 25));
  EXPECT_EQ(ReadVersion(1, "layers.1.w", {{0, 7}, {0, 5}})
                .value_or(std::vector<float>{}),
            Seeded("layers.1.w", 35));
  EXPECT_EQ(counters.unit_copies.load(), 0);

  // A writeback into layers.0 (unit #1): its COMMIT copies that unit of
  // both ranks into version 1 first, and nothing else.
  SessionInfo info = Open(Scoped("layers.0"));
  WriteAll(info.id, "layers.0.w", Doubled(Seeded("layers.0.w", 25)));
  ASSERT_TRUE(sessions_->Close(info.id, false, false, "alice").ok());
  EXPECT_EQ(counters.unit_copies.load(), 1);
  EXPECT_EQ(counters.bytes.load(), 2 * UnitBytes(1));
  EXPECT_EQ(ReadVersion(1, "layers.0.w", {{0, 5}, {0, 5}})
                .value_or(std::vector<float>{}),
            Seeded("layers.0.w", 25));
  const std::vector<float> bias = Seeded("layers.0.b", 5);
  EXPECT_EQ(
      ReadVersion(1, "layers.0.b", {{1, 3}}).value_or(std::vector<float>{}),
      std::vector<float>(bias.begin() + 1, bias.begin() + 4));
  EXPECT_EQ(ReadVersion(1, "layers.1.w", {{0, 7}, {0, 5}})
                .value_or(std::vector<float>{}),
            Seeded("layers.1.w", 35));

  // Version 2 sees the edit, live; version 1 still its copy.
  ASSERT_TRUE(sync_->Publish("m", 2).ok());
  EXPECT_EQ(ReadVersion(2, "layers.0.w", {{0, 5}, {0, 5}})
                .value_or(std::vector<float>{}),
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
  ASSERT_TRUE(
      model_->store
          ->WriteShard(0, 2, /*grads=*/false, 0, stepped.data(), UnitBytes(2))
          .ok());
  EXPECT_EQ(ReadVersion(1, "layers.1.w", {{0, 7}, {0, 5}})
                .value_or(std::vector<float>{}),
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
  EXPECT_EQ(ReadVersion(1, "layers.0.w", {{0, 5}, {0, 5}})
                .value_or(std::vector<float>{}),
            Seeded("layers.0.w", 25));
}

TEST_F(VersionStoreTest, ACopiedUnitIsViewedInPlaceAndKeepsItsBytes) {
  StartSync();
  ASSERT_TRUE(sync_->Publish("m", 1).ok());
  absl::StatusOr<std::shared_ptr<const VersionSnapshot>> snapshot =
      store_->Acquire("m", 1);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  const int64_t numel = UnitBytes(2) / 4;
  std::vector<float> published(numel);
  ASSERT_TRUE(
      model_->store
          ->ReadShard(0, 2, /*grads=*/false, 0, published.data(), UnitBytes(2))
          .ok());
  const VersionPiece tail{0, 2, 3, numel - 3, 0};
  // Live: no view (the trainer may still write it).
  absl::StatusOr<std::optional<absl::string_view>> view =
      (*snapshot)->CopiedBytes(tail, core::DType::kFloat32);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_FALSE(view->has_value());

  for (auto phase :
       {core::TrainingPhase::kForward, core::TrainingPhase::kBetween,
        core::TrainingPhase::kBackward, core::TrainingPhase::kOptimizer}) {
    ASSERT_TRUE(sessions_->ReportPhase("m", 0, phase, 1, std::nullopt).ok());
  }
  view = (*snapshot)->CopiedBytes(tail, core::DType::kFloat32);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_TRUE(view->has_value());
  const absl::string_view bytes = **view;
  ASSERT_EQ(bytes.size(), static_cast<size_t>((numel - 3) * 4));
  // The trainer's write reaches the live shard, not the viewed copy.
  const std::vector<float> stepped(numel, 42.0f);
  ASSERT_TRUE(
      model_->store
          ->WriteShard(0, 2, /*grads=*/false, 0, stepped.data(), UnitBytes(2))
          .ok());
  std::vector<float> seen(numel - 3);
  std::memcpy(seen.data(), bytes.data(), bytes.size());
  EXPECT_EQ(seen, std::vector<float>(published.begin() + 3, published.end()));

  // A conversion has no view; a piece not held here is refused.
  view = (*snapshot)->CopiedBytes(tail, core::DType::kBFloat16);
  ASSERT_TRUE(view.ok());
  EXPECT_FALSE(view->has_value());
  view = (*snapshot)->CopiedBytes(VersionPiece{0, 2, 4, numel - 3, 0},
                                  core::DType::kFloat32);
  EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      view.status().message(),
      absl::StrCat("elements [4, +", numel - 3,
                   ") lie outside unit #2's shard (", numel, " elements)"));
  view = (*snapshot)->CopiedBytes(VersionPiece{7, 2, 0, 1, 0},
                                  core::DType::kFloat32);
  EXPECT_EQ(view.status().message(),
            "version 1 of model 'm' has no unit #2 of rank 7 on this node");
}

// Every rank of one step, up to OPTIMIZER (the fixture's 2 ranks).
void StepToOptimizer(SessionManager& sessions, int64_t step) {
  for (int rank = 0; rank < 2; ++rank) {
    for (auto phase :
         {core::TrainingPhase::kForward, core::TrainingPhase::kBetween,
          core::TrainingPhase::kBackward, core::TrainingPhase::kOptimizer}) {
      ASSERT_TRUE(
          sessions.ReportPhase("m", rank, phase, step, std::nullopt).ok());
    }
  }
}

TEST_F(VersionStoreTest, TheLastRankEndingTheStepPublishesItsStepExactly) {
  StartSync();
  StepToOptimizer(*sessions_, 1);
  std::optional<SessionManager::ShardWriteGuard> hold;
  // Rank 0 ends step 1 asking for version 1: rank 1 is still in OPTIMIZER.
  absl::StatusOr<PhaseReport> first = sessions_->ReportPhaseAndPublish(
      "m", 0, core::TrainingPhase::kIdle, 1, std::nullopt, false, 1, &hold);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->publish, std::nullopt);
  EXPECT_FALSE(hold.has_value());
  // The last rank's end of the step: version 1 is due, under the hold.
  absl::StatusOr<PhaseReport> last = sessions_->ReportPhaseAndPublish(
      "m", 1, core::TrainingPhase::kIdle, 1, std::nullopt, false, 1, &hold);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->publish, std::optional<int64_t>(1));
  EXPECT_TRUE(last->publish_refused.ok());
  ASSERT_TRUE(hold.has_value());
  // Held: a trainer's move into the next step is refused (no wait asked).
  EXPECT_EQ(
      sessions_
          ->ReportPhase("m", 0, core::TrainingPhase::kForward, 2, std::nullopt)
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->Kept("m"), std::vector<int64_t>{});
  ASSERT_TRUE(sync_->PublishHeld("m", 1, /*copy_ahead=*/false).ok());
  hold.reset();
  EXPECT_EQ(store_->Kept("m"), std::vector<int64_t>{1});
  EXPECT_TRUE(
      sessions_
          ->ReportPhase("m", 0, core::TrainingPhase::kForward, 2, std::nullopt)
          .ok());
}

TEST_F(VersionStoreTest, RanksAskingForDifferentStepsPublishNothing) {
  StartSync();
  StepToOptimizer(*sessions_, 1);
  std::optional<SessionManager::ShardWriteGuard> hold;
  ASSERT_TRUE(sessions_
                  ->ReportPhaseAndPublish("m", 0, core::TrainingPhase::kIdle, 1,
                                          std::nullopt, false, 1, &hold)
                  .ok());
  absl::StatusOr<PhaseReport> last = sessions_->ReportPhaseAndPublish(
      "m", 1, core::TrainingPhase::kIdle, 1, std::nullopt, false, std::nullopt,
      &hold);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->publish, std::nullopt);
  EXPECT_FALSE(hold.has_value());
  EXPECT_EQ(last->publish_refused.message(),
            "not publishing at the end of this step of model 'm': rank 0 "
            "asked for version 1 and rank 1 for none");
  // Only with the move that ends a step.
  absl::StatusOr<PhaseReport> wrong = sessions_->ReportPhaseAndPublish(
      "m", 0, core::TrainingPhase::kForward, 2, std::nullopt, false, 2, &hold);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.status().message(),
            "rank 0 of model 'm': publish_step goes with the move out of "
            "OPTIMIZER into IDLE that ends a step, not with IDLE -> FORWARD");
}

TEST_F(VersionStoreTest,
       ACopyAheadLeavesTheNextStepNothingToCopyAndReadsExact) {
  StartSync();
  ASSERT_TRUE(sync_->PublishHeld("m", 1, /*copy_ahead=*/true).ok());
  store_->WaitCopiedAhead();
  const VersionCounters& counters = store_->counters();
  // Every unit of both ranks, in the background.
  EXPECT_EQ(counters.copied_ahead.load(), 6);
  EXPECT_EQ(counters.unit_copies.load(), 3);
  EXPECT_EQ(counters.bytes.load(),
            2 * (UnitBytes(0) + UnitBytes(1) + UnitBytes(2)));
  // The next step's move into OPTIMIZER finds them copied.
  StepToOptimizer(*sessions_, 2);
  EXPECT_EQ(counters.unit_copies.load(), 3);
  EXPECT_EQ(counters.bytes.load(),
            2 * (UnitBytes(0) + UnitBytes(1) + UnitBytes(2)));
  // The trainer writes step 2's values into both ranks' shards of
  // layers.1; version 1 reads step 1's bytes exactly, from its copies.
  const std::vector<float> stepped(UnitBytes(2) / 4, 42.0f);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(model_->store
                    ->WriteShard(rank, 2, /*grads=*/false, 0, stepped.data(),
                                 UnitBytes(2))
                    .ok());
  }
  EXPECT_EQ(ReadVersion(1, "layers.1.w", {{0, 7}, {0, 5}})
                .value_or(std::vector<float>{}),
            Seeded("layers.1.w", 35));
  EXPECT_EQ(ReadVersion(1, "layers.0.w", {{0, 5}, {0, 5}})
                .value_or(std::vector<float>{}),
            Seeded("layers.0.w", 25));
}

TEST_F(VersionStoreTest, CopiesAheadStayWithinTheKeptVersionsInTheirSpares) {
  StartSync();  // At most 2 versions kept.
  const int64_t version_bytes =
      2 * (UnitBytes(0) + UnitBytes(1) + UnitBytes(2));
  const VersionCounters& counters = store_->counters();
  for (int64_t step = 1; step <= 4; ++step) {
    ASSERT_TRUE(sync_->PublishHeld("m", step, /*copy_ahead=*/true).ok());
    store_->WaitCopiedAhead();
    // The released version's copies were the spares the new one filled.
    EXPECT_EQ(counters.bytes.load(), std::min<int64_t>(step, 2) * version_bytes)
        << "after version " << step;
    EXPECT_EQ(counters.spare_bytes.load(), 0) << "after version " << step;
  }
  EXPECT_EQ(counters.copied_ahead.load(), 4 * 6);
  EXPECT_EQ(store_->Kept("m"), (std::vector<int64_t>{3, 4}));
}

TEST_F(VersionStoreTest, CopiersSharingARunFillEveryEntryExactly) {
  // A few bytes a copier: each of 3 copiers takes part of the read, pieces
  // split between them.
  WeightSync::Options options;
  options.local_copiers = 3;
  options.copier_min_bytes = 8;
  StartSync(options);
  ASSERT_TRUE(sync_->Publish("m", 1).ok());
  absl::StatusOr<PlannedRead> read = sync_->Plan("m", 1, ThreeEntries());
  ASSERT_TRUE(read.ok()) << read.status();
  // Garbage where the gaps are: they must come back zero.
  std::vector<uint8_t> packed(read->total_bytes, 0xAB);
  int64_t peer_bytes = 0;
  ASSERT_TRUE(sync_->FillAll(*read, packed.data(), &peer_bytes).ok());
  EXPECT_EQ(peer_bytes, 0);
  ASSERT_EQ(read->offsets, (std::vector<int64_t>{0, 160, 176}));
  ExpectThreeEntries(packed);
}

// A reader on node 1 of a model whose ranks are all on node 0 (the
// fixture's): every piece is fetched. Small entries share fetches, one
// dtype a fetch, cut at fetch_batch_bytes; the bytes are exactly the local
// read's.
TEST_F(VersionStoreTest, FetchesCarryManyEntriesOfOneDtype) {
  Start(2, core::Strategy::kFullShard);
  store_ = std::make_unique<VersionStore>(registry_.get(), 2);
  LoopbackVersionNodes loopback(store_.get());
  WeightSync::Options options;
  options.node = 1;
  for (int64_t batch_bytes : {int64_t{8} << 20, int64_t{64}}) {
    SCOPED_TRACE(absl::StrCat("batches of ", batch_bytes, " bytes"));
    options.fetch_batch_bytes = batch_bytes;
    WeightSync remote(registry_.get(), sessions_.get(), store_.get(), &loopback,
                      options);
    const int64_t version = batch_bytes > 1000 ? 1 : 2;
    ASSERT_TRUE(remote.Publish("m", version).ok());
    std::vector<SliceRequest> entries = ThreeEntries();
    entries.push_back(
        SliceRequest{"layers.0.b", {{0, 5}}, core::DType::kFloat32});
    absl::StatusOr<PlannedRead> read = remote.Plan("m", version, entries);
    ASSERT_TRUE(read.ok()) << read.status();
    std::vector<uint8_t> packed(read->total_bytes, 0xAB);
    int64_t peer_bytes = 0;
    const size_t calls_before = loopback.calls().size();
    ASSERT_TRUE(remote.FillAll(*read, packed.data(), &peer_bytes).ok());
    EXPECT_EQ(peer_bytes, 160 + 12 + 120 + 20);
    const std::vector<LoopbackVersionNodes::Call> calls = loopback.calls();
    int64_t fp32_calls = 0;
    int64_t fp64_calls = 0;
    for (size_t c = calls_before; c < calls.size(); ++c) {
      EXPECT_EQ(calls[c].node, 0);
      int64_t bytes = 0;
      for (const VersionPiece& piece : calls[c].pieces) {
        bytes += piece.numel * core::ElementSize(calls[c].dtype);
      }
      EXPECT_LE(bytes, batch_bytes);
      (calls[c].dtype == core::DType::kFloat64 ? fp64_calls : fp32_calls)++;
    }
    if (batch_bytes > 1000) {
      // Three float32 entries in one fetch, the float64 one in another.
      EXPECT_EQ(fp32_calls, 1);
      EXPECT_EQ(fp64_calls, 1);
    } else {
      EXPECT_EQ(fp32_calls, (160 + 12 + 20 + 63) / 64);
      EXPECT_EQ(fp64_calls, (120 + 63) / 64);
    }
    ASSERT_EQ(read->offsets, (std::vector<int64_t>{0, 160, 176, 304}));
    ExpectThreeEntries(packed);
    std::vector<float> whole_bias(5);
    std::memcpy(whole_bias.data(), packed.data() + 304, 20);
    EXPECT_EQ(whole_bias, Seeded("layers.0.b", 5));
  }
}

}  // namespace
}  // namespace summon::server
