// What the shard store does with its mapped segments: shard bytes shared
// with a trainer process, generations reconciled after a torn update, and
// the staged writeback that survives a restart (shard_store.cc,
// shard_store_counters.cc, shard_store_staging.cc). Creating, attaching and
// naming segments is tested in shard_segments_test.cc.
#include "server/store/shard_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/testing/shard_store_fixture.h"

namespace summon::server {
namespace {

// What a trainer does with the Trainer MapShards reply, in a real second
// process: map each described segment by name and use the shards in place.
TEST_F(ShardStoreTest, TrainerProcessMappingSharesBytesBothWays) {
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->EnsureGrads(0).ok());
  for (int unit = 0; unit < 2; ++unit) {
    Fill(store->ParamShard(0, unit), 0, unit, UnitBytes(unit), 1);
  }
  const std::vector<ShardStore::SegmentDescription> segments =
      store->Describe(0);
  ASSERT_EQ(segments.size(), 2u);

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Exit codes: 0 ok, 1 cannot map, 2 bad header, 3 daemon bytes missing.
    int code = 0;
    for (const ShardStore::SegmentDescription& segment : segments) {
      const int fd = shm_open(segment.name.c_str(), O_RDWR, 0);
      void* mapped = fd < 0 ? MAP_FAILED
                            : mmap(nullptr, segment.size,
                                   PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (mapped == MAP_FAILED) _exit(1);
      uint8_t* base = static_cast<uint8_t*>(mapped);
      if (std::memcmp(base, "SUMMONSH", 8) != 0) code = 2;
      for (int unit = 0; unit < 2 && code == 0; ++unit) {
        uint8_t* shard = base + segment.unit_offsets[unit];
        const int64_t bytes = segment.unit_bytes[unit];
        if (!segment.grads) {
          if (FirstMismatch(shard, 0, unit, bytes, 1) != -1) code = 3;
          Fill(shard, 0, unit, bytes, 2);
        } else {
          Fill(shard, 0, unit, bytes, 4);
        }
      }
    }
    _exit(code);
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFEXITED(wait_status));
  ASSERT_EQ(WEXITSTATUS(wait_status), 0);
  for (int unit = 0; unit < 2; ++unit) {
    EXPECT_EQ(
        FirstMismatch(store->ParamShard(0, unit), 0, unit, UnitBytes(unit), 2),
        -1)
        << "unit " << unit;
    EXPECT_EQ(
        FirstMismatch(store->GradShard(0, unit), 0, unit, UnitBytes(unit), 4),
        -1)
        << "unit " << unit;
  }
  EXPECT_TRUE(store->Destroy().ok());
}

// A unit's generation sits at byte 256 (fixed header) + 32 per unit entry
// + 8 (after the unit's offset) of every params segment.
constexpr off_t GenerationOffset(int unit) { return 256 + 32 * unit + 8; }

void PokeGeneration(const std::string& segment, int unit, uint64_t value) {
  const int fd = shm_open(segment.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0) << segment;
  EXPECT_EQ(pwrite(fd, &value, sizeof(value), GenerationOffset(unit)),
            static_cast<ssize_t>(sizeof(value)));
  close(fd);
}

uint64_t PeekGeneration(const std::string& segment, int unit) {
  uint64_t value = ~uint64_t{0};
  const int fd = shm_open(segment.c_str(), O_RDONLY, 0);
  EXPECT_GE(fd, 0) << segment;
  EXPECT_EQ(pread(fd, &value, sizeof(value), GenerationOffset(unit)),
            static_cast<ssize_t>(sizeof(value)));
  close(fd);
  return value;
}

TEST_F(ShardStoreTest, TornGenerationUpdateReattachesAtTheHighest) {
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  store->SetGeneration(1, 3);
  store.reset();
  // Daemons killed inside SetGeneration(0, 2) and SetGeneration(1, 4), one
  // after updating rank 0's header, one after updating rank 1's.
  PokeGeneration(Name(0, SegmentKind::kParams), 0, 2);
  PokeGeneration(Name(1, SegmentKind::kParams), 1, 4);
  store = Open(AttachMode::kAttach);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->Generation(0), 2u);
  EXPECT_EQ(store->Generation(1), 4u);
  // The reconciled values are written back to every rank's header.
  EXPECT_EQ(PeekGeneration(Name(1, SegmentKind::kParams), 0), 2u);
  EXPECT_EQ(PeekGeneration(Name(0, SegmentKind::kParams), 1), 4u);
  EXPECT_EQ(store->BumpGeneration(1), 5u);
  EXPECT_EQ(PeekGeneration(Name(0, SegmentKind::kParams), 1), 5u);
  EXPECT_EQ(PeekGeneration(Name(1, SegmentKind::kParams), 1), 5u);
  EXPECT_TRUE(store->Destroy().ok());
}

TEST_F(ShardStoreTest, StagedWritebackSurvivesRestartAndCommits) {
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  for (int rank : kRanks) {
    Fill(store->ParamShard(rank, 1), rank, 1, UnitBytes(1), 0);
  }
  store->SetGeneration(1, 4);
  for (int rank : kRanks) {
    absl::StatusOr<uint8_t*> staged = store->StagingShard(rank, 1, "s1", 5);
    ASSERT_TRUE(staged.ok()) << staged.status();
    // Staging starts from the current shard, so untouched bytes survive.
    EXPECT_EQ(FirstMismatch(*staged, rank, 1, UnitBytes(1), 0), -1);
    Fill(*staged, rank, 1, UnitBytes(1), 6);
    EXPECT_EQ(*store->StagingShard(rank, 1, "s1", 5), *staged);
  }
  EXPECT_EQ(FirstMismatch(store->ParamShard(0, 1), 0, 1, UnitBytes(1), 0), -1);
  EXPECT_EQ(store->Generation(1), 4u);
  EXPECT_EQ(store->TotalBytes(), 4 * 8192);
  store.reset();  // Killed between PREPARE and COMMIT.

  store = Open(AttachMode::kAttach);
  ASSERT_NE(store, nullptr);
  for (int rank : kRanks) {
    const std::optional<ShardStore::StagedWriteback> staged =
        store->Staged(rank);
    ASSERT_TRUE(staged.has_value()) << "rank " << rank;
    EXPECT_EQ(staged->session_id, "s1");
    EXPECT_EQ(staged->target_generations, (std::map<int, uint64_t>{{1, 5}}));
  }
  EXPECT_EQ(store->CommitStaging("s2").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->CommitStaging("s1").ok());
  for (int rank : kRanks) {
    EXPECT_EQ(
        FirstMismatch(store->ParamShard(rank, 1), rank, 1, UnitBytes(1), 6), -1)
        << "rank " << rank;
    EXPECT_EQ(FirstNonZero(store->ParamShard(rank, 0), UnitBytes(0)), -1);
    EXPECT_FALSE(store->Staged(rank).has_value());
  }
  EXPECT_EQ(store->Generation(1), 5u);
  EXPECT_EQ(store->Generation(0), 0u);
  // The staged segments stay, spare, for the next writeback, then go.
  EXPECT_EQ(ShardStore::ListSegments(instance_).size(), 4u);
  const absl::Time deadline =
      absl::Now() + staging_pool_->options().max_idle + absl::Seconds(5);
  while (ShardStore::ListSegments(instance_).size() > 2 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(ShardStore::ListSegments(instance_).size(), 2u);
  EXPECT_TRUE(store->Destroy().ok());
}

TEST_F(ShardStoreTest, StagingRefusesConflictsAndClearLeavesShards) {
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<uint8_t*> staged = store->StagingShard(0, 0, "s1", 1);
  ASSERT_TRUE(staged.ok()) << staged.status();
  Fill(*staged, 0, 0, UnitBytes(0), 8);
  EXPECT_EQ(store->StagingShard(0, 1, "s2", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->StagingShard(0, 0, "s1", 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->StagingShard(0, 2, "s1", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->StagingShard(0, 0, "", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->StagingShard(0, 0, std::string(129, 's'), 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Another rank's staging is independent.
  EXPECT_TRUE(store->StagingShard(1, 1, "s2", 1).ok());

  ASSERT_TRUE(store->ClearStaging(0).ok());
  EXPECT_FALSE(store->Staged(0).has_value());
  EXPECT_EQ(store->ClearStaging(2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->CommitStaging("s1").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(FirstNonZero(store->ParamShard(0, 0), UnitBytes(0)), -1);
  EXPECT_EQ(store->Generation(0), 0u);
  // After the clear the rank stages for any session, from current params.
  staged = store->StagingShard(0, 0, "s3", 1);
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ(FirstNonZero(*staged, UnitBytes(0)), -1);
  EXPECT_TRUE(store->Destroy().ok());
  EXPECT_TRUE(ShardStore::ListSegments(instance_).empty());
}

}  // namespace
}  // namespace summon::server
