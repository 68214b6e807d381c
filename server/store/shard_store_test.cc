#include "server/store/shard_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

using core::ModelSpec;
using core::Topology;

// Root unit: embed.w (40) + norm.w (3) + alignment/end padding = 44
// elements, 22 per rank at G = 2 (88 bytes); layers.0: 16 elements, 8 per
// rank (32 bytes).
constexpr char kLayout[] = R"({
  "strategy": "FULL_SHARD",
  "units": [
    {"fqn": "", "params": [
      {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"},
      {"fqn": "norm.w", "shape": [3], "dtype": "float32"},
      {"fqn": "head.w", "alias_of": "embed.w"}]},
    {"fqn": "layers.0", "params": [
      {"fqn": "layers.0.w", "shape": [4, 4], "dtype": "float32"}]}
  ]
})";

constexpr char kModel[] = "gpt";
const std::vector<int> kRanks = {0, 1};

ModelSpec Spec(absl::string_view json, Topology topology = Topology{1, 2}) {
  absl::StatusOr<ModelSpec> spec = core::ParseModelLayout(json, topology);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : ModelSpec();
}

// A byte that differs per rank, unit, index and writer.
uint8_t Pattern(int rank, int unit, int64_t index, int salt) {
  return static_cast<uint8_t>(rank * 31 + unit * 7 + index + salt * 101);
}

void Fill(uint8_t* data, int rank, int unit, int64_t bytes, int salt) {
  for (int64_t i = 0; i < bytes; ++i) data[i] = Pattern(rank, unit, i, salt);
}

// Index of the first byte that is not the pattern, or -1.
int64_t FirstMismatch(const uint8_t* data, int rank, int unit, int64_t bytes,
                      int salt) {
  for (int64_t i = 0; i < bytes; ++i) {
    if (data[i] != Pattern(rank, unit, i, salt)) return i;
  }
  return -1;
}

int64_t FirstNonZero(const uint8_t* data, int64_t bytes) {
  for (int64_t i = 0; i < bytes; ++i) {
    if (data[i] != 0) return i;
  }
  return -1;
}

::testing::AssertionResult Mentions(const absl::Status& status,
                                    absl::string_view text) {
  if (status.message().find(text) != absl::string_view::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "'" << status.message() << "' does not mention '" << text << "'";
}

class ShardStoreTest : public ::testing::Test {
 protected:
  ShardStoreTest()
      : instance_(absl::StrCat("test", getpid(), "n", next_instance_++)),
        spec_(Spec(kLayout)) {}

  // Whatever a failing test left behind must not leak into /dev/shm.
  ~ShardStoreTest() override {
    for (const std::string& name : ShardStore::ListSegments(instance_)) {
      shm_unlink(name.c_str());
    }
  }

  std::unique_ptr<ShardStore> Open(AttachMode mode,
                                   const std::vector<int>& ranks = kRanks) {
    absl::StatusOr<std::unique_ptr<ShardStore>> store =
        ShardStore::CreateOrAttach(instance_, kModel, spec_, ranks, mode);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  std::string Name(int rank, SegmentKind kind) const {
    return ShardStore::SegmentName(instance_, kModel, rank, kind);
  }

  int64_t UnitBytes(int unit) const {
    return spec_.units[unit].layout.shard_bytes();
  }

  static inline int next_instance_ = 0;
  const std::string instance_;
  const ModelSpec spec_;
};

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
      absl::Now() + ShardStore::kSpareStagingGrace + absl::Seconds(5);
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
