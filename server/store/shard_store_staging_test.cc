// Staging that leaves out the ranges a writeback is about to write
// (ShardStore::StagingShard's `overwritten`), and the spare staged segments
// a commit leaves for the next writeback, kept by the node's StagingPool.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/store/shard_store.h"
#include "server/store/shm_segment.h"

namespace summon::server {
namespace {

// One unit of 64 float32 elements on one rank: a 256-byte shard.
constexpr char kLayout[] = R"({"strategy": "FULL_SHARD", "units": [
  {"fqn": "w", "params": [{"fqn": "w.weight", "shape": [64],
                           "dtype": "float32"}]}]})";
constexpr int64_t kShardBytes = 256;

class StagingTest : public ::testing::Test {
 protected:
  StagingTest() : instance_(absl::StrCat("staging", getpid())) {
    Open(AttachMode::kCreate);
    for (int64_t i = 0; i < kShardBytes; ++i) {
      store_->ParamShard(0, 0)[i] = static_cast<uint8_t>(i);
    }
  }
  // A daemon (re)starting on the same shared memory.
  void Open(AttachMode mode) {
    absl::StatusOr<core::ModelSpec> spec =
        core::ParseModelLayout(kLayout, core::Topology{1, 1});
    ASSERT_TRUE(spec.ok()) << spec.status();
    store_.reset();
    absl::StatusOr<std::unique_ptr<ShardStore>> store =
        ShardStore::CreateOrAttach(instance_, "m", *spec, {0}, mode, nullptr,
                                   pool_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  bool StagedSegmentExists() const {
    return SegmentExists(SegmentKind::kStaged);
  }
  bool SegmentExists(SegmentKind kind) const {
    const std::vector<std::string> names = ShardStore::ListSegments(instance_);
    return std::count(names.begin(), names.end(),
                      ShardStore::SegmentName(instance_, "m", 0, kind)) == 1;
  }
  // Gives rank 0 gradients: byte i of its shard is 255 - i.
  void AddGrads() {
    ASSERT_TRUE(store_->EnsureGrads(0).ok());
    for (int64_t i = 0; i < kShardBytes; ++i) {
      store_->GradShard(0, 0)[i] = static_cast<uint8_t>(255 - i);
    }
  }
  std::string StagedName() const {
    return ShardStore::SegmentName(instance_, "m", 0, SegmentKind::kStaged);
  }
  // Stages the whole shard filled with `value` for `session` and commits.
  void WriteBack(const std::string& session, uint64_t generation,
                 uint8_t value) {
    absl::StatusOr<uint8_t*> staged =
        store_->StagingShard(0, 0, session, generation, {{0, kShardBytes}});
    ASSERT_TRUE(staged.ok()) << staged.status();
    std::memset(*staged, value, kShardBytes);
    ASSERT_TRUE(store_->CommitStaging(session).ok());
  }
  ~StagingTest() override {
    store_->Destroy().IgnoreError();
    for (const std::string& name : ShardStore::ListSegments(instance_)) {
      shm_unlink(name.c_str());
    }
  }

  const std::string instance_;
  // Spares idle for 300 ms are unlinked; tests swap in other pools.
  std::shared_ptr<StagingPool> pool_ = std::make_shared<StagingPool>(
      StagingPool::Options{int64_t{1} << 30, absl::Milliseconds(300)});
  std::unique_ptr<ShardStore> store_;
};

TEST_F(StagingTest, OverwrittenRangesAreLeftOutOfTheCopyAndTheRestIsCurrent) {
  absl::StatusOr<uint8_t*> staged =
      store_->StagingShard(0, 0, "s", 1, {{16, 32}, {100, 300}});
  ASSERT_TRUE(staged.ok()) << staged.status();
  // The caller writes the left-out ranges; everything else is current.
  std::memset(*staged + 16, 0xEE, 16);
  std::memset(*staged + 100, 0xEE, kShardBytes - 100);
  ASSERT_TRUE(store_->CommitStaging("s").ok());
  const uint8_t* shard = store_->ParamShard(0, 0);
  for (int64_t i = 0; i < kShardBytes; ++i) {
    const bool written = (i >= 16 && i < 32) || i >= 100;
    EXPECT_EQ(shard[i], written ? 0xEE : static_cast<uint8_t>(i)) << i;
  }
}

TEST_F(StagingTest, NoRangesCopiesTheWholeShard) {
  absl::StatusOr<uint8_t*> staged = store_->StagingShard(0, 0, "s", 1);
  ASSERT_TRUE(staged.ok()) << staged.status();
  for (int64_t i = 0; i < kShardBytes; ++i) {
    EXPECT_EQ((*staged)[i], static_cast<uint8_t>(i)) << i;
  }
  EXPECT_TRUE(store_->ClearStaging(0).ok());
}

TEST_F(StagingTest, ACommitLeavesASpareThatTheNextWritebackReuses) {
  absl::StatusOr<uint8_t*> first = store_->StagingShard(0, 0, "s1", 1);
  ASSERT_TRUE(first.ok()) << first.status();
  std::memset(*first, 0xAA, kShardBytes);
  ASSERT_TRUE(store_->CommitStaging("s1").ok());
  // Still there, claimed by no session: nothing is staged.
  EXPECT_TRUE(StagedSegmentExists());
  EXPECT_FALSE(store_->Staged(0).has_value());
  EXPECT_TRUE(absl::IsNotFound(store_->CommitStaging("s1")));

  // The same mapping again, and the copy is of the shard as it is now.
  absl::StatusOr<uint8_t*> second =
      store_->StagingShard(0, 0, "s2", 2, {{0, 64}});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, *first);
  ASSERT_TRUE(store_->Staged(0).has_value());
  EXPECT_EQ(store_->Staged(0)->session_id, "s2");
  std::memset(*second, 0xBB, 64);
  ASSERT_TRUE(store_->CommitStaging("s2").ok());
  const uint8_t* shard = store_->ParamShard(0, 0);
  for (int64_t i = 0; i < kShardBytes; ++i) {
    EXPECT_EQ(shard[i], i < 64 ? 0xBB : 0xAA) << i;
  }
  EXPECT_EQ(store_->Generation(0), 2u);
}

TEST_F(StagingTest, ASpareIsUnlinkedOnceTheGracePeriodPasses) {
  WriteBack("s", 1, 0xAA);
  ASSERT_TRUE(StagedSegmentExists());
  const absl::Time deadline =
      absl::Now() + pool_->options().max_idle + absl::Seconds(5);
  while (StagedSegmentExists() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_FALSE(StagedSegmentExists());
  // And a later writeback makes a new one.
  WriteBack("t", 2, 0xCC);
  EXPECT_EQ(store_->ParamShard(0, 0)[kShardBytes - 1], 0xCC);
}

TEST_F(StagingTest, ThePoolCountsASpareUntilItIsReusedOrUnlinked) {
  pool_ = std::make_shared<StagingPool>();  // 10 minutes: nothing expires.
  Open(AttachMode::kAttach);
  EXPECT_EQ(pool_->retained_bytes(), 0);
  WriteBack("s", 1, 0xAA);
  ASSERT_TRUE(StagedSegmentExists());
  const int64_t spare = pool_->retained_bytes();
  // The whole staged segment: its header and the 64-byte aligned shard.
  EXPECT_GT(spare, kShardBytes);
  EXPECT_EQ(pool_->reuses(), 0);
  // The next writeback adopts it: no longer spare, counted as a reuse.
  absl::StatusOr<uint8_t*> staged = store_->StagingShard(0, 0, "t", 2);
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ(pool_->retained_bytes(), 0);
  EXPECT_EQ(pool_->reuses(), 1);
  ASSERT_TRUE(store_->CommitStaging("t").ok());
  EXPECT_EQ(pool_->retained_bytes(), spare);
  // A stopped store unlinks its spares and gives back what they counted.
  store_.reset();
  EXPECT_FALSE(StagedSegmentExists());
  EXPECT_EQ(pool_->retained_bytes(), 0);
  Open(AttachMode::kAttach);
}

TEST_F(StagingTest, APoolWithoutRoomUnlinksTheStagingAtCommit) {
  pool_ = std::make_shared<StagingPool>(
      StagingPool::Options{/*max_bytes=*/kShardBytes, absl::Minutes(10)});
  Open(AttachMode::kAttach);
  WriteBack("s", 1, 0xAA);
  // The segment (header + shard) is larger than the pool: gone at once.
  EXPECT_FALSE(StagedSegmentExists());
  EXPECT_EQ(pool_->retained_bytes(), 0);
  EXPECT_EQ(store_->ParamShard(0, 0)[kShardBytes - 1], 0xAA);
  // The next writeback creates its staging again and commits alike.
  WriteBack("t", 2, 0xCC);
  EXPECT_FALSE(StagedSegmentExists());
  EXPECT_EQ(store_->ParamShard(0, 0)[0], 0xCC);
  EXPECT_EQ(store_->Generation(0), 2u);
}

TEST_F(StagingTest, AStopUnlinksSparesAndARestartCommitsNothingAgain) {
  WriteBack("s", 1, 0xAA);
  ASSERT_TRUE(StagedSegmentExists());
  store_.reset();
  EXPECT_FALSE(StagedSegmentExists());
  Open(AttachMode::kAttach);
  EXPECT_FALSE(StagedSegmentExists());
  EXPECT_FALSE(store_->Staged(0).has_value());
  EXPECT_TRUE(absl::IsNotFound(store_->CommitStaging("s")));
  EXPECT_EQ(store_->ParamShard(0, 0)[0], 0xAA);
  EXPECT_EQ(store_->Generation(0), 1u);
}

TEST_F(StagingTest, ACrashWhileMakingASpareNeverLooksLikeAStagedWriteback) {
  // Stage "s" (the shard filled with 0xEE), then do what a commit that died
  // right after clearing the session id leaves: the unit flag still set.
  absl::StatusOr<uint8_t*> staged = store_->StagingShard(0, 0, "s", 1);
  ASSERT_TRUE(staged.ok()) << staged.status();
  std::memset(*staged, 0xEE, kShardBytes);
  store_.reset();  // Killed: the staged segment stays.
  ASSERT_TRUE(StagedSegmentExists());
  {
    absl::StatusOr<std::unique_ptr<shm::Segment>> segment =
        shm::Segment::Open(StagedName());
    ASSERT_TRUE(segment.ok()) << segment.status();
    shm::StoreShared(&(*segment)->header()->session_id_bytes, uint32_t{0});
    ASSERT_EQ(shm::LoadShared(&(*segment)->units()[0].flags), shm::kUnitStaged);
  }
  Open(AttachMode::kAttach);
  EXPECT_FALSE(StagedSegmentExists());
  EXPECT_TRUE(absl::IsNotFound(store_->CommitStaging("s")));
  for (int64_t i = 0; i < kShardBytes; ++i) {
    ASSERT_EQ(store_->ParamShard(0, 0)[i], static_cast<uint8_t>(i)) << i;
  }
}

// Runs a pre-fault (for a session with gradients: `grads`) to its end.
void Prefault(ShardStore& store, bool grads = false) {
  store.PrefaultStaging(grads);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (store.prefault_running() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_FALSE(store.prefault_running());
}

TEST_F(StagingTest, APrefaultMakesASpareThatTheWritebackAdoptsBitExact) {
  pool_ = std::make_shared<StagingPool>();  // 10 minutes: nothing expires.
  Open(AttachMode::kAttach);
  ASSERT_FALSE(StagedSegmentExists());
  Prefault(*store_);
  // A spare: it exists, the pool counts it, nothing is staged.
  EXPECT_TRUE(StagedSegmentExists());
  const int64_t spare = pool_->retained_bytes();
  EXPECT_GT(spare, kShardBytes);
  EXPECT_EQ(pool_->prefaults(), 1);
  EXPECT_FALSE(store_->Staged(0).has_value());
  // A second pre-fault finds staging there and makes nothing.
  Prefault(*store_);
  EXPECT_EQ(pool_->prefaults(), 1);
  EXPECT_EQ(pool_->retained_bytes(), spare);

  // The writeback adopts it (a reuse) and stages the shard as it is now.
  absl::StatusOr<uint8_t*> staged =
      store_->StagingShard(0, 0, "s", 1, {{0, 64}});
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ(pool_->reuses(), 1);
  EXPECT_EQ(pool_->retained_bytes(), 0);
  std::memset(*staged, 0xBB, 64);
  ASSERT_TRUE(store_->CommitStaging("s").ok());
  for (int64_t i = 0; i < kShardBytes; ++i) {
    ASSERT_EQ(store_->ParamShard(0, 0)[i],
              i < 64 ? 0xBB : static_cast<uint8_t>(i))
        << i;
  }
  EXPECT_EQ(store_->Generation(0), 1u);
  EXPECT_EQ(pool_->retained_bytes(), spare);
}

TEST_F(StagingTest, APrefaultIsSkippedWhenThePoolOrTheBudgetHasNoRoom) {
  for (const StagingPool::Options& options :
       {StagingPool::Options{/*max_bytes=*/kShardBytes, absl::Minutes(10)},
        StagingPool::Options{int64_t{1} << 30, absl::Minutes(10),
                             /*prefault=*/true,
                             /*prefault_limit_bytes=*/kShardBytes}}) {
    pool_ = std::make_shared<StagingPool>(options);
    Open(AttachMode::kAttach);
    Prefault(*store_);
    EXPECT_FALSE(StagedSegmentExists());
    EXPECT_EQ(pool_->retained_bytes(), 0);
    EXPECT_EQ(pool_->prefaults(), 0);
    EXPECT_EQ(pool_->prefault_refusals(), 1);
    // The writeback makes its staging as before.
    WriteBack("s", 1, 0xAA);
    EXPECT_EQ(store_->ParamShard(0, 0)[kShardBytes - 1], 0xAA);
  }
  // Switched off: not even tried.
  pool_ = std::make_shared<StagingPool>(StagingPool::Options{
      int64_t{1} << 30, absl::Minutes(10), /*prefault=*/false});
  Open(AttachMode::kAttach);
  Prefault(*store_);
  EXPECT_FALSE(StagedSegmentExists());
  EXPECT_EQ(pool_->prefault_refusals(), 0);
}

TEST_F(StagingTest, APrefaultedSpareIsReapedWhenIdleAndUnlinkedAtAStop) {
  Prefault(*store_);  // The fixture's pool: 300 ms idle.
  ASSERT_TRUE(StagedSegmentExists());
  // Kept while the writable session is open, however long.
  absl::SleepFor(absl::Seconds(1));
  ASSERT_TRUE(StagedSegmentExists());
  store_->WritableClosed();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (StagedSegmentExists() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_FALSE(StagedSegmentExists());
  EXPECT_EQ(pool_->retained_bytes(), 0);
  Prefault(*store_);
  ASSERT_TRUE(StagedSegmentExists());
  store_.reset();
  EXPECT_FALSE(StagedSegmentExists());
  EXPECT_EQ(pool_->retained_bytes(), 0);
  Open(AttachMode::kAttach);
}

TEST_F(StagingTest, ACrashMidPrefaultLeavesNothingARestartActsOn) {
  // What a daemon killed mid pre-fault leaves: the staged segment created
  // (no session, no unit staged) with its pages partly faulted (here, the
  // first bytes written 0xEE). A restart unlinks it and commits nothing.
  pool_ = std::make_shared<StagingPool>();  // No reaper wakes in the test.
  Open(AttachMode::kAttach);
  Prefault(*store_);
  {
    absl::StatusOr<std::unique_ptr<shm::Segment>> segment =
        shm::Segment::Open(StagedName());
    ASSERT_TRUE(segment.ok()) << segment.status();
    ASSERT_EQ(shm::LoadShared(&(*segment)->header()->session_id_bytes), 0u);
    ASSERT_EQ(shm::LoadShared(&(*segment)->units()[0].flags), 0u);
    std::memset((*segment)->data() + (*segment)->units()[0].offset, 0xEE,
                kShardBytes);
  }
  // Killed: the store is neither stopped nor destroyed, so the segment
  // stays. Its memory is kept reachable from a static (as a killed daemon's
  // is simply gone) so that the leak checker of the ASan run does not count
  // it.
  static auto* const killed = new std::vector<std::unique_ptr<ShardStore>>;
  killed->push_back(std::move(store_));
  ASSERT_TRUE(StagedSegmentExists());
  Open(AttachMode::kAttach);
  EXPECT_FALSE(StagedSegmentExists());
  EXPECT_FALSE(store_->Staged(0).has_value());
  EXPECT_TRUE(absl::IsNotFound(store_->CommitStaging("")));
  for (int64_t i = 0; i < kShardBytes; ++i) {
    ASSERT_EQ(store_->ParamShard(0, 0)[i], static_cast<uint8_t>(i)) << i;
  }
  EXPECT_EQ(store_->Generation(0), 0u);
}

TEST_F(StagingTest,
       AGradsPrefaultMakesBothSparesThatTheWritebackAdoptsBitExact) {
  pool_ = std::make_shared<StagingPool>();  // 10 minutes: nothing expires.
  Open(AttachMode::kAttach);
  AddGrads();
  Prefault(*store_, /*grads=*/true);
  // Two spares, counted alike; nothing staged.
  EXPECT_TRUE(SegmentExists(SegmentKind::kStaged));
  EXPECT_TRUE(SegmentExists(SegmentKind::kStagedGrads));
  EXPECT_EQ(pool_->prefaults(), 2);
  const int64_t spares = pool_->retained_bytes();
  EXPECT_GT(spares, 2 * kShardBytes);
  EXPECT_FALSE(store_->Staged(0).has_value());

  // The writeback of params and grads adopts both (one reuse: the rank's
  // staging) and stages the shards as they are now.
  absl::StatusOr<uint8_t*> params =
      store_->StagingShard(0, 0, "s", 1, {{0, 64}});
  ASSERT_TRUE(params.ok()) << params.status();
  absl::StatusOr<uint8_t*> grads =
      store_->StagingGradShard(0, 0, "s", 1, {{64, 128}});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(pool_->reuses(), 1);
  EXPECT_EQ(pool_->retained_bytes(), 0);
  EXPECT_EQ(pool_->prefaults(), 2);
  std::memset(*params, 0xBB, 64);
  std::memset(*grads + 64, 0xCC, 64);
  ASSERT_TRUE(store_->CommitStaging("s").ok());
  for (int64_t i = 0; i < kShardBytes; ++i) {
    ASSERT_EQ(store_->ParamShard(0, 0)[i],
              i < 64 ? 0xBB : static_cast<uint8_t>(i))
        << i;
    ASSERT_EQ(store_->GradShard(0, 0)[i],
              i >= 64 && i < 128 ? 0xCC : static_cast<uint8_t>(255 - i))
        << i;
  }
  EXPECT_EQ(store_->Generation(0), 1u);
  // Both spare again after the commit.
  EXPECT_EQ(pool_->retained_bytes(), spares);
  store_.reset();
  EXPECT_FALSE(SegmentExists(SegmentKind::kStaged));
  EXPECT_FALSE(SegmentExists(SegmentKind::kStagedGrads));
  EXPECT_EQ(pool_->retained_bytes(), 0);
  Open(AttachMode::kAttach);
}

TEST_F(StagingTest, GradsStagingIsPrefaultedOnlyForASessionAndARankWithGrads) {
  pool_ = std::make_shared<StagingPool>();
  Open(AttachMode::kAttach);
  // The rank holds no gradients: a session with them pre-faults params.
  Prefault(*store_, /*grads=*/true);
  EXPECT_TRUE(SegmentExists(SegmentKind::kStaged));
  EXPECT_FALSE(SegmentExists(SegmentKind::kStagedGrads));
  EXPECT_EQ(pool_->prefaults(), 1);
  const int64_t one = pool_->retained_bytes();
  // It holds some, but the session has none: nothing more.
  AddGrads();
  Prefault(*store_, /*grads=*/false);
  EXPECT_FALSE(SegmentExists(SegmentKind::kStagedGrads));
  EXPECT_EQ(pool_->prefaults(), 1);
  // A session with gradients adds their spare beside the params' one, also
  // when it opens while a pre-fault without them runs (one more pass).
  store_->PrefaultStaging(/*grads=*/false);
  Prefault(*store_, /*grads=*/true);
  EXPECT_TRUE(SegmentExists(SegmentKind::kStagedGrads));
  EXPECT_EQ(pool_->prefaults(), 2);
  EXPECT_EQ(pool_->retained_bytes(), 2 * one);
}

TEST_F(StagingTest, AGradsPrefaultIsSkippedWhenThePoolHasNoRoomForIt) {
  // Room for one segment: the params' spare is made, the grads' refused.
  pool_ = std::make_shared<StagingPool>();
  Open(AttachMode::kAttach);
  Prefault(*store_);
  const int64_t one = pool_->retained_bytes();
  pool_ = std::make_shared<StagingPool>(
      StagingPool::Options{/*max_bytes=*/one, absl::Minutes(10)});
  Open(AttachMode::kAttach);  // The stop unlinked the first spare.
  AddGrads();
  Prefault(*store_, /*grads=*/true);
  EXPECT_TRUE(SegmentExists(SegmentKind::kStaged));
  EXPECT_FALSE(SegmentExists(SegmentKind::kStagedGrads));
  EXPECT_EQ(pool_->prefaults(), 1);
  EXPECT_EQ(pool_->prefault_refusals(), 1);
  EXPECT_EQ(pool_->retained_bytes(), one);
  // The writeback makes its grads staging itself and commits bit-exact.
  absl::StatusOr<uint8_t*> grads = store_->StagingGradShard(0, 0, "s", 1);
  ASSERT_TRUE(grads.ok()) << grads.status();
  absl::StatusOr<uint8_t*> params = store_->StagingShard(0, 0, "s", 1);
  ASSERT_TRUE(params.ok()) << params.status();
  std::memset(*grads, 0xDD, kShardBytes);
  ASSERT_TRUE(store_->CommitStaging("s").ok());
  for (int64_t i = 0; i < kShardBytes; ++i) {
    ASSERT_EQ(store_->GradShard(0, 0)[i], 0xDD) << i;
    ASSERT_EQ(store_->ParamShard(0, 0)[i], static_cast<uint8_t>(i)) << i;
  }
}

}  // namespace
}  // namespace summon::server
