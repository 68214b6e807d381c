// The shard store's segments: their names and format, creating a model's
// segments and attaching the ones a previous daemon left (refused when they
// do not match the model), removing them, and the naming rules
// (segment_names.cc, shard_segments.cc). The bytes, counters and staging of
// mapped segments are tested in shard_store_test.cc.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "server/store/segment_names.h"
#include "server/store/shard_store.h"
#include "server/testing/shard_store_fixture.h"

namespace summon::server {
namespace {

using core::ModelSpec;
using core::Topology;

TEST_F(ShardStoreTest, SegmentFormatPlacesUnitsAfterA4KiBHeader) {
  ASSERT_EQ(UnitBytes(0), 88);
  ASSERT_EQ(UnitBytes(1), 32);
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  const std::vector<ShardStore::SegmentDescription> segments =
      store->Describe(1);
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].name,
            absl::StrCat("/summon-", instance_, "-gpt-r1-params"));
  EXPECT_EQ(segments[0].rank, 1);
  EXPECT_FALSE(segments[0].grads);
  // 88 bytes round up to the next 64-byte boundary; the end to 4 KiB.
  EXPECT_EQ(segments[0].unit_offsets, (std::vector<int64_t>{4096, 4224}));
  EXPECT_EQ(segments[0].unit_bytes, (std::vector<int64_t>{88, 32}));
  EXPECT_EQ(segments[0].size, 8192);
  EXPECT_EQ(store->TotalBytes(), 2 * 8192);
  EXPECT_EQ(store->ParamShard(1, 1) - store->ParamShard(1, 0), 128);
  EXPECT_EQ(store->ParamShard(2, 0), nullptr);
  EXPECT_EQ(store->ParamShard(0, 2), nullptr);
  EXPECT_TRUE(store->Destroy().ok());
}

TEST_F(ShardStoreTest, HeaderGrowsPast4KiBForManyUnits) {
  std::vector<std::string> units;
  for (int unit = 0; unit < 200; ++unit) {
    units.push_back(absl::StrCat(
        R"({"fqn": "u)", unit, R"(", "params": [)", R"({"fqn": "u)", unit,
        R"(.w", "shape": [2], "dtype": "float32"}]})"));
  }
  const ModelSpec many = Spec(absl::StrCat(
      R"({"strategy": "FULL_SHARD", "units": [{"fqn": "", "params": []},)",
      absl::StrJoin(units, ","), "]}"));
  ASSERT_EQ(many.units.size(), 201u);
  absl::StatusOr<std::unique_ptr<ShardStore>> store =
      ShardStore::CreateOrAttach(instance_, kModel, many, kRanks,
                                 AttachMode::kCreate);
  ASSERT_TRUE(store.ok()) << store.status();
  // 256 fixed bytes + 201 entries of 32 bytes = 6688: two 4 KiB pages.
  EXPECT_EQ((*store)->Describe(0)[0].unit_offsets[0], 8192);
  EXPECT_TRUE((*store)->Destroy().ok());
}

TEST_F(ShardStoreTest, RestartedDaemonReattachesBytesAndGenerations) {
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->attached());
  for (int rank : kRanks) {
    for (int unit = 0; unit < 2; ++unit) {
      EXPECT_EQ(FirstNonZero(store->ParamShard(rank, unit), UnitBytes(unit)),
                -1)
          << "rank " << rank << " unit " << unit;
      Fill(store->ParamShard(rank, unit), rank, unit, UnitBytes(unit), 0);
    }
  }
  EXPECT_EQ(store->BumpGeneration(0), 1u);
  EXPECT_EQ(store->BumpGeneration(0), 2u);
  store->SetGeneration(1, 7);
  store.reset();  // The daemon exits: nothing is unlinked.
  EXPECT_EQ(ShardStore::ListSegments(instance_).size(), 2u);

  store = Open(AttachMode::kAttach);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->attached());
  for (int rank : kRanks) {
    for (int unit = 0; unit < 2; ++unit) {
      EXPECT_EQ(FirstMismatch(store->ParamShard(rank, unit), rank, unit,
                              UnitBytes(unit), 0),
                -1)
          << "rank " << rank << " unit " << unit;
    }
  }
  EXPECT_EQ(store->Generation(0), 2u);
  EXPECT_EQ(store->Generation(1), 7u);
  EXPECT_TRUE(store->Destroy().ok());
  EXPECT_EQ(store->ParamShard(0, 0), nullptr);
  EXPECT_TRUE(ShardStore::ListSegments(instance_).empty());
}

TEST_F(ShardStoreTest, CreateOrAttachCreatesWhenAbsentAndAttachesWhenPresent) {
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreateOrAttach);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->attached());
  Fill(store->ParamShard(0, 0), 0, 0, UnitBytes(0), 3);
  store.reset();
  store = Open(AttachMode::kCreateOrAttach);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->attached());
  EXPECT_EQ(FirstMismatch(store->ParamShard(0, 0), 0, 0, UnitBytes(0), 3), -1);
  EXPECT_TRUE(store->Destroy().ok());
}

TEST_F(ShardStoreTest, AttachingAMissingModelIsNotFoundAndCreatesNothing) {
  absl::StatusOr<std::unique_ptr<ShardStore>> store =
      ShardStore::CreateOrAttach(instance_, kModel, spec_, kRanks,
                                 AttachMode::kAttach);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Mentions(store.status(), Name(0, SegmentKind::kParams)));
  EXPECT_TRUE(ShardStore::ListSegments(instance_).empty());
}

TEST_F(ShardStoreTest, CreatingAnExistingModelIsAlreadyExists) {
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  Fill(store->ParamShard(1, 1), 1, 1, UnitBytes(1), 0);
  absl::StatusOr<std::unique_ptr<ShardStore>> again =
      ShardStore::CreateOrAttach(instance_, kModel, spec_, kRanks,
                                 AttachMode::kCreate);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(Mentions(again.status(), Name(0, SegmentKind::kParams)));
  EXPECT_EQ(FirstMismatch(store->ParamShard(1, 1), 1, 1, UnitBytes(1), 0), -1);
  EXPECT_TRUE(store->Destroy().ok());
}

TEST_F(ShardStoreTest, AttachWithAnotherLayoutIsRefusedAndLeavesShards) {
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  Fill(store->ParamShard(0, 0), 0, 0, UnitBytes(0), 5);
  store.reset();

  const std::vector<std::pair<std::string, ModelSpec>> others = {
      // Same sizes everywhere: only the fingerprint tells them apart.
      {"renamed parameter",
       Spec(absl::StrReplaceAll(kLayout, {{"embed.w", "embed.v"}}))},
      {"other shape",
       Spec(absl::StrReplaceAll(kLayout, {{"[4, 4]", "[4, 5]"}}))},
      // Ranks 0 and 1 of a 4-rank world: G = 4 changes every chunk.
      {"other topology", Spec(kLayout, Topology{1, 4})},
  };
  for (const auto& [what, other] : others) {
    for (AttachMode mode : {AttachMode::kAttach, AttachMode::kCreateOrAttach}) {
      absl::StatusOr<std::unique_ptr<ShardStore>> refused =
          ShardStore::CreateOrAttach(instance_, kModel, other, kRanks, mode);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
          << what << ": " << refused.status();
      EXPECT_TRUE(Mentions(refused.status(), Name(0, SegmentKind::kParams)))
          << what;
    }
  }
  store = Open(AttachMode::kAttach);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(FirstMismatch(store->ParamShard(0, 0), 0, 0, UnitBytes(0), 5), -1);
  EXPECT_TRUE(store->Destroy().ok());
}

TEST_F(ShardStoreTest, ParamsForOnlySomeRanksAreRefusedUntilRemoved) {
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  store.reset();
  ASSERT_EQ(shm_unlink(Name(1, SegmentKind::kParams).c_str()), 0);
  absl::StatusOr<std::unique_ptr<ShardStore>> partial =
      ShardStore::CreateOrAttach(instance_, kModel, spec_, kRanks,
                                 AttachMode::kCreateOrAttach);
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Mentions(partial.status(), Name(1, SegmentKind::kParams)));

  // Rank 1 created on its own is another incarnation of the model.
  store = Open(AttachMode::kCreate, {1});
  ASSERT_NE(store, nullptr);
  store.reset();
  partial = ShardStore::CreateOrAttach(instance_, kModel, spec_, kRanks,
                                       AttachMode::kAttach);
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Mentions(partial.status(), "another incarnation"));
  EXPECT_TRUE(Mentions(partial.status(), Name(1, SegmentKind::kParams)));

  EXPECT_TRUE(ShardStore::RemoveSegments(instance_, kModel).ok());
  EXPECT_TRUE(ShardStore::ListSegments(instance_).empty());
  store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->Destroy().ok());
}

TEST_F(ShardStoreTest, RemoveSegmentsSparesModelsWithLongerNames) {
  const std::string other_model = "gpt-r0";
  absl::StatusOr<std::unique_ptr<ShardStore>> other =
      ShardStore::CreateOrAttach(instance_, other_model, spec_, kRanks,
                                 AttachMode::kCreate);
  ASSERT_TRUE(other.ok()) << other.status();
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(ShardStore::RemoveSegments(instance_, kModel).ok());
  EXPECT_EQ(ShardStore::ListSegments(instance_),
            (std::vector<std::string>{
                ShardStore::SegmentName(instance_, other_model, 0,
                                        SegmentKind::kParams),
                ShardStore::SegmentName(instance_, other_model, 1,
                                        SegmentKind::kParams)}));
  EXPECT_TRUE((*other)->Destroy().ok());
}

TEST_F(ShardStoreTest, GradsOfSomeRanksAreReattachedAfterRestart) {
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->HasGrads(1));
  EXPECT_EQ(store->GradShard(1, 0), nullptr);
  ASSERT_TRUE(store->EnsureGrads(1).ok());
  ASSERT_TRUE(store->EnsureGrads(1).ok());  // Idempotent.
  EXPECT_EQ(store->EnsureGrads(2).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store->HasGrads(1));
  for (int unit = 0; unit < 2; ++unit) {
    EXPECT_EQ(FirstNonZero(store->GradShard(1, unit), UnitBytes(unit)), -1);
    Fill(store->GradShard(1, unit), 1, unit, UnitBytes(unit), 9);
  }
  EXPECT_EQ(store->TotalBytes(), 3 * 8192);
  store.reset();

  store = Open(AttachMode::kAttach);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->HasGrads(0));
  EXPECT_EQ(store->GradShard(0, 0), nullptr);
  ASSERT_TRUE(store->HasGrads(1));
  for (int unit = 0; unit < 2; ++unit) {
    EXPECT_EQ(
        FirstMismatch(store->GradShard(1, unit), 1, unit, UnitBytes(unit), 9),
        -1)
        << "unit " << unit;
    // Grads and params are separate memory.
    EXPECT_EQ(FirstNonZero(store->ParamShard(1, unit), UnitBytes(unit)), -1);
  }
  EXPECT_EQ(store->Describe(0).size(), 1u);
  const std::vector<ShardStore::SegmentDescription> rank1 = store->Describe(1);
  ASSERT_EQ(rank1.size(), 2u);
  EXPECT_EQ(rank1[1].name, Name(1, SegmentKind::kGrads));
  EXPECT_TRUE(rank1[1].grads);
  EXPECT_TRUE(store->Destroy().ok());
  EXPECT_TRUE(ShardStore::ListSegments(instance_).empty());
}

TEST_F(ShardStoreTest, SegmentsLeftByAnInterruptedCreateAreDetected) {
  // Created by name but never sized or given a header.
  const std::string grads = Name(0, SegmentKind::kGrads);
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  store.reset();
  const int fd = shm_open(grads.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  // Grads that never held data are removed on attach.
  store = Open(AttachMode::kAttach);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->HasGrads(0));
  EXPECT_EQ(ShardStore::ListSegments(instance_).size(), 2u);
  EXPECT_TRUE(store->Destroy().ok());

  // Unfinished params are refused: the model's values are not known.
  for (int rank : kRanks) {
    const int params = shm_open(Name(rank, SegmentKind::kParams).c_str(),
                                O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(params, 0);
    ASSERT_EQ(ftruncate(params, 8192), 0);
    close(params);
  }
  absl::StatusOr<std::unique_ptr<ShardStore>> refused =
      ShardStore::CreateOrAttach(instance_, kModel, spec_, kRanks,
                                 AttachMode::kCreateOrAttach);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Mentions(refused.status(), "never finished"));
}

TEST_F(ShardStoreTest, ListSegmentsShowsEveryKindUntilDestroy) {
  std::unique_ptr<ShardStore> store = Open(AttachMode::kCreate);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->EnsureGrads(1).ok());
  ASSERT_TRUE(store->StagingShard(0, 1, "s", 1).ok());
  EXPECT_EQ(ShardStore::ListSegments(instance_),
            (std::vector<std::string>{
                Name(0, SegmentKind::kParams), Name(0, SegmentKind::kStaged),
                Name(1, SegmentKind::kGrads), Name(1, SegmentKind::kParams)}));
  EXPECT_TRUE(store->Destroy().ok());
  EXPECT_TRUE(ShardStore::ListSegments(instance_).empty());
  EXPECT_EQ(store->TotalBytes(), 0);
}

TEST(ValidateModelNameTest, AcceptsTheDocumentedAlphabetOnly) {
  for (const std::string& good : {std::string("gpt2"), std::string("a.b_c-D9"),
                                  std::string("..."), std::string(128, 'x')}) {
    EXPECT_TRUE(ValidateModelName(good).ok()) << good;
  }
  for (const std::string& bad :
       {std::string(""), std::string(129, 'x'), std::string("a/b"),
        std::string("a b"), std::string("."), std::string(".."),
        std::string("caf\xc3\xa9"), std::string("a\0b", 3)}) {
    const absl::Status status = ValidateModelName(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(ShardStoreTest, BadNamesInstancesAndRanksAreInvalidArguments) {
  const std::vector<std::tuple<std::string, std::string, std::vector<int>>>
      bad = {{instance_, "a/b", kRanks},  {"a-b", kModel, kRanks},
             {"", kModel, kRanks},        {instance_, kModel, {}},
             {instance_, kModel, {0, 0}}, {instance_, kModel, {2}},
             {instance_, kModel, {-1}}};
  for (const auto& [instance, model, ranks] : bad) {
    EXPECT_EQ(ShardStore::CreateOrAttach(instance, model, spec_, ranks,
                                         AttachMode::kCreateOrAttach)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << instance << " " << model << " [" << absl::StrJoin(ranks, ",") << "]";
  }
  EXPECT_TRUE(ShardStore::ListSegments(instance_).empty());
}

TEST_F(ShardStoreTest, RunningOutOfSharedMemoryIsResourceExhausted) {
  struct statvfs shm;
  ASSERT_EQ(statvfs("/dev/shm", &shm), 0);
  if (shm.f_blocks == 0) GTEST_SKIP() << "/dev/shm has no size limit";
  // One float32 parameter of twice the file system's size, on one rank.
  const int64_t elements = 2 * static_cast<int64_t>(shm.f_blocks) *
                           static_cast<int64_t>(shm.f_frsize) / 4;
  const ModelSpec huge = Spec(
      absl::StrCat(R"({"units": [{"fqn": "", "params": [{"fqn": "w", )",
                   R"("shape": [)", elements, R"(], "dtype": "float32"}]}]})"),
      Topology{1, 1});
  absl::StatusOr<std::unique_ptr<ShardStore>> store =
      ShardStore::CreateOrAttach(instance_, kModel, huge, {0},
                                 AttachMode::kCreate);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kResourceExhausted)
      << store.status();
  EXPECT_TRUE(Mentions(store.status(), Name(0, SegmentKind::kParams)));
  EXPECT_TRUE(ShardStore::ListSegments(instance_).empty());
}

}  // namespace
}  // namespace summon::server
