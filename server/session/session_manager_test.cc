#include "server/session/session_manager.h"

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/seeded_init.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

// Root unit (embed + tied head), two block units, one singleton parameter.
constexpr char kLayout[] = R"({"strategy": "FULL_SHARD", "units": [
  {"fqn": "", "params": [
    {"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"},
    {"fqn": "head.w", "alias_of": "embed.w"},
    {"fqn": "scale", "shape": [1], "dtype": "float32"}]},
  {"fqn": "layers.0", "params": [
    {"fqn": "layers.0.w", "shape": [5, 5], "dtype": "float32"},
    {"fqn": "layers.0.b", "shape": [5], "dtype": "float32"}]},
  {"fqn": "layers.1", "params": [
    {"fqn": "layers.1.w", "shape": [7, 5], "dtype": "float32"}]}]})";

constexpr uint64_t kSeed = 7;

SessionOptions Scoped(const std::string& module) {
  SessionOptions options;
  options.scope.module_fqn = module;
  return options;
}

SessionOptions Params(std::vector<std::string> params) {
  SessionOptions options;
  options.scope.params = std::move(params);
  return options;
}

std::vector<float> Seeded(const std::string& fqn, int64_t numel) {
  std::vector<float> values(numel);
  EXPECT_TRUE(core::FillSeeded(fqn, kSeed, core::DType::kFloat32, 0, numel,
                               values.data())
                  .ok());
  return values;
}

class SessionManagerTest : public ::testing::Test {
 protected:
  void Start(int local_ranks, std::optional<core::Strategy> strategy,
             std::vector<int> grad_ranks = {}, int64_t budget = 0,
             int max_sessions = 64) {
    static int counter = 0;
    sessions_.reset();
    registry_ = std::make_unique<ModelRegistry>(ModelRegistry::Options{
        "", absl::StrCat("smt", getpid(), "x", ++counter),
        core::Topology{1, local_ranks}, 0});
    SessionManager::Options options;
    options.memory_budget_bytes = budget;
    options.max_sessions_per_principal = max_sessions;
    options.admins = {"root"};
    options.clock = [this] { return now_; };
    sessions_ = std::make_unique<SessionManager>(registry_.get(), options);
    ModelInit seeded{ModelInit::Kind::kSeeded, kSeed};
    auto model =
        registry_->Create("m", kLayout, strategy, seeded, grad_ranks, seeded);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *model;
  }

  void TearDown() override {
    sessions_.reset();
    if (model_) model_->store->Destroy().IgnoreError();
  }

  SessionInfo Open(SessionOptions options, const std::string& who = "alice") {
    auto info = sessions_->Open("m", options, who);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.value_or(SessionInfo{});
  }

  std::vector<float> Read(const std::string& id, const std::string& fqn,
                          bool grad = false) {
    std::vector<float> values;
    absl::Status status = sessions_->Read(
        id, fqn, grad, core::DType::kFloat32, 0, std::nullopt, 0, "alice",
        [&](int64_t, absl::string_view bytes,
            const std::shared_ptr<const void>&) {
          const size_t old = values.size();
          values.resize(old + bytes.size() / 4);
          std::memcpy(values.data() + old, bytes.data(), bytes.size());
          return true;
        });
    EXPECT_TRUE(status.ok()) << status;
    return values;
  }

  void WriteAll(const std::string& id, const std::string& fqn,
                const std::vector<float>& values, bool grad = false,
                const std::string& who = "alice") {
    auto written = sessions_->Write(
        id, fqn, grad, core::DType::kFloat32, 0,
        absl::string_view(reinterpret_cast<const char*>(values.data()),
                          values.size() * 4),
        who);
    ASSERT_TRUE(written.ok()) << written.status();
  }

  static std::vector<float> Doubled(std::vector<float> values) {
    for (float& v : values) v *= 2;
    return values;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<ModelRegistry> registry_;
  std::unique_ptr<SessionManager> sessions_;
  std::shared_ptr<ModelEntry> model_;
};

TEST_F(SessionManagerTest, GatheredValuesEqualTheSeededInitExactly) {
  for (auto strategy : {core::Strategy::kFullShard, core::Strategy::kNoShard,
                        core::Strategy::kHybridShard}) {
    Start(4, strategy);
    SessionInfo info = Open({});
    EXPECT_EQ(info.params.size(), 5u);
    EXPECT_EQ(Read(info.id, "embed.w"), Seeded("embed.w", 40));
    EXPECT_EQ(Read(info.id, "head.w"), Seeded("embed.w", 40));  // Tied.
    EXPECT_EQ(Read(info.id, "scale"), Seeded("scale", 1));
    EXPECT_EQ(Read(info.id, "layers.1.w"), Seeded("layers.1.w", 35));
    ASSERT_TRUE(sessions_->Close(info.id, false, false, "alice").ok());
    TearDown();
  }
}

TEST_F(SessionManagerTest, WritebackPersistsAndBumpsGenerations) {
  Start(4, core::Strategy::kFullShard);
  SessionInfo info = Open(Scoped("layers.0"));
  WriteAll(info.id, "layers.0.w", Doubled(Seeded("layers.0.w", 25)));
  auto closed = sessions_->Close(info.id, false, false, "alice");
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_TRUE(closed->written_back);
  EXPECT_EQ(closed->bytes_written, (25 + 5) * 4);
  EXPECT_EQ(closed->generations.at("layers.0"), 1u);
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo check = Open(read_only);
  EXPECT_EQ(Read(check.id, "layers.0.w"), Doubled(Seeded("layers.0.w", 25)));
  EXPECT_EQ(Read(check.id, "layers.0.b"), Seeded("layers.0.b", 5));
  EXPECT_EQ(check.gathered_generations.at("layers.0"), 1u);
  EXPECT_EQ(check.gathered_generations.at("layers.1"), 0u);
}

TEST_F(SessionManagerTest, WritebackFalseDropsEditsUnderEveryStrategy) {
  for (auto strategy : {core::Strategy::kFullShard, core::Strategy::kNoShard,
                        core::Strategy::kHybridShard}) {
    Start(2, strategy);
    SessionOptions options;
    options.writeback = false;
    SessionInfo info = Open(options);
    WriteAll(info.id, "layers.1.w", Doubled(Seeded("layers.1.w", 35)));
    EXPECT_EQ(Read(info.id, "layers.1.w"), Doubled(Seeded("layers.1.w", 35)));
    ASSERT_TRUE(sessions_->Close(info.id, false, false, "alice").ok());
    SessionInfo check = Open(options);
    EXPECT_EQ(Read(check.id, "layers.1.w"), Seeded("layers.1.w", 35))
        << core::StrategyName(strategy);
    ASSERT_TRUE(sessions_->Close(check.id, false, false, "alice").ok());
    TearDown();
  }
}

TEST_F(SessionManagerTest, R2_ReadOnlySessionsShareOneGatherFreedByTheLast) {
  Start(4, core::Strategy::kFullShard);
  SessionOptions options;
  options.writeback = false;
  SessionInfo first = Open(options);
  const int64_t bytes = sessions_->MemoryInUse();
  EXPECT_GT(bytes, 0);
  SessionInfo second = Open(options, "bob");
  EXPECT_TRUE(second.shared_gather);
  EXPECT_EQ(sessions_->MemoryInUse(), bytes);
  // A write into a shared gather gives only that session its own copy.
  WriteAll(second.id, "scale", {5.0f}, false, "bob");
  EXPECT_EQ(sessions_->MemoryInUse(), bytes + 4);
  EXPECT_EQ(Read(first.id, "scale"), Seeded("scale", 1));
  ASSERT_TRUE(sessions_->Close(first.id, false, false, "alice").ok());
  EXPECT_EQ(sessions_->MemoryInUse(), bytes + 4);
  ASSERT_TRUE(sessions_->Close(second.id, false, false, "bob").ok());
  EXPECT_EQ(sessions_->MemoryInUse(), 0);
}

TEST_F(SessionManagerTest, R2_SecondWritableSessionOnAUnitIsRefused) {
  Start(2, core::Strategy::kFullShard);
  SessionInfo writer = Open(Scoped("layers.0"));
  auto again = sessions_->Open("m", Scoped(""), "bob");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  // A disjoint unit is fine.
  auto other = sessions_->Open("m", Scoped("layers.1"), "bob");
  EXPECT_TRUE(other.ok()) << other.status();
}

TEST_F(SessionManagerTest, R1_OpenRefusedDuringForwardBackwardOptimizer) {
  Start(2, core::Strategy::kFullShard);
  // One step along the phase machine (R16); opens are refused in the three
  // training phases and allowed in BETWEEN and IDLE.
  for (auto [phase, refused] :
       {std::pair{core::TrainingPhase::kForward, true},
        std::pair{core::TrainingPhase::kBetween, false},
        std::pair{core::TrainingPhase::kBackward, true},
        std::pair{core::TrainingPhase::kOptimizer, true},
        std::pair{core::TrainingPhase::kIdle, false}}) {
    ASSERT_TRUE(
        sessions_->ReportPhase("m", 1, phase, std::nullopt, std::nullopt).ok());
    SessionOptions read_only;
    read_only.writeback = false;
    absl::StatusOr<SessionInfo> opened =
        sessions_->Open("m", read_only, "alice");
    EXPECT_EQ(
        opened.status().code(),
        refused ? absl::StatusCode::kFailedPrecondition : absl::StatusCode::kOk)
        << core::TrainingPhaseName(phase);
    if (opened.ok()) {
      ASSERT_TRUE(sessions_->Close(opened->id, true, false, "alice").ok());
    }
  }
}

TEST_F(SessionManagerTest, R16_IllegalPhaseMovesAreRefusedNamingBothPhases) {
  Start(2, core::Strategy::kFullShard);
  auto refused = sessions_->ReportPhase("m", 0, core::TrainingPhase::kOptimizer,
                                        std::nullopt, std::nullopt);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("from IDLE to OPTIMIZER"),
            absl::string_view::npos)
      << refused.status();
  ASSERT_TRUE(sessions_
                  ->ReportPhase("m", 0, core::TrainingPhase::kForward,
                                std::nullopt, std::nullopt)
                  .ok());
  // A restarted trainer's FORWARD -> FORWARD.
  EXPECT_EQ(sessions_
                ->ReportPhase("m", 0, core::TrainingPhase::kForward,
                              std::nullopt, std::nullopt)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(SessionManagerTest, R3_PhaseChangeRefusedOrWaitsForWritableSession) {
  Start(2, core::Strategy::kFullShard);
  SessionInfo writer = Open(Scoped("layers.0"));
  EXPECT_EQ(sessions_
                ->ReportPhase("m", 0, core::TrainingPhase::kForward,
                              std::nullopt, std::nullopt)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(sessions_->Close(writer.id, false, false, "alice").ok());
  });
  auto report =
      sessions_->ReportPhase("m", 0, core::TrainingPhase::kForward,
                             std::nullopt, absl::Now() + absl::Seconds(10));
  closer.join();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->phase, core::TrainingPhase::kForward);
}

TEST_F(SessionManagerTest, R4_WritableRefusedBetweenForwardAndBackward) {
  Start(2, core::Strategy::kShardGradOp);
  for (auto phase :
       {core::TrainingPhase::kForward, core::TrainingPhase::kBetween}) {
    ASSERT_TRUE(
        sessions_->ReportPhase("m", 0, phase, std::nullopt, std::nullopt).ok());
  }
  EXPECT_EQ(sessions_->Open("m", {}, "alice").status().code(),
            absl::StatusCode::kFailedPrecondition);
  SessionOptions read_only;
  read_only.writeback = false;
  EXPECT_TRUE(sessions_->Open("m", read_only, "alice").ok());
}

TEST_F(SessionManagerTest, R5_WritesMustFitTheTensor) {
  Start(2, core::Strategy::kFullShard);
  SessionInfo info = Open({});
  const std::string four_bytes(4, '\0');
  EXPECT_EQ(sessions_
                ->Write(info.id, "nope", false, core::DType::kFloat32, 0,
                        four_bytes, "alice")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(sessions_
                ->Write(info.id, "scale", false, core::DType::kFloat64, 0,
                        std::string(8, '\0'), "alice")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sessions_
                ->Write(info.id, "scale", false, core::DType::kFloat32, 1,
                        four_bytes, "alice")
                .status()
                .code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(SessionManagerTest, R7_WritebackRefusedAfterAStepUnlessForced) {
  Start(2, core::Strategy::kFullShard);
  // "scale" (flat element 40 of the root unit, c = 21) lives on rank 1
  // only, so rank 0 may be mid-step while a session holds it.
  for (auto phase :
       {core::TrainingPhase::kForward, core::TrainingPhase::kBetween,
        core::TrainingPhase::kBackward}) {
    ASSERT_TRUE(sessions_->ReportPhase("m", 0, phase, 1, std::nullopt).ok());
  }
  SessionInfo info = Open(Params({"scale"}));
  // Rank 0's optimizer step moves every unit's generation.
  ASSERT_TRUE(sessions_
                  ->ReportPhase("m", 0, core::TrainingPhase::kOptimizer, 1,
                                std::nullopt)
                  .ok());
  EXPECT_EQ(sessions_->Close(info.id, false, false, "alice").status().code(),
            absl::StatusCode::kAborted);
  // Still open; force writes back.
  auto forced = sessions_->Close(info.id, false, true, "alice");
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_TRUE(forced->written_back);
}

TEST_F(SessionManagerTest, CloseCancelledBeforeItsWritebackWritesNothing) {
  Start(2, core::Strategy::kFullShard);
  SessionInfo info = Open(Scoped("layers.0"));
  WriteAll(info.id, "layers.0.w", Doubled(Seeded("layers.0.w", 25)));
  auto cancelled =
      sessions_->Close(info.id, false, false, "alice", [] { return true; });
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled);
  auto still = sessions_->Get(info.id, "alice");
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(still->state, core::SessionState::kOpen);
  ASSERT_TRUE(sessions_->Close(info.id, true, false, "alice").ok());
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo check = Open(read_only);
  EXPECT_EQ(Read(check.id, "layers.0.w"), Seeded("layers.0.w", 25));
}

TEST_F(SessionManagerTest, R9_OpenBeyondTheBudgetFailsBeforeAllocating) {
  Start(2, core::Strategy::kFullShard, {}, /*budget=*/200);
  // layers.1.w alone is 140 bytes; the root scope is far more.
  EXPECT_EQ(sessions_->Open("m", {}, "alice").status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(sessions_->MemoryInUse(), 0);
  SessionInfo info = Open(Scoped("layers.1"));
  EXPECT_EQ(sessions_->MemoryInUse(), 140);
  EXPECT_EQ(sessions_->Open("m", Scoped("layers.0"), "alice").status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(SessionManagerTest, SessionsPerPrincipalAreLimited) {
  Start(2, core::Strategy::kFullShard, {}, 0, /*max_sessions=*/2);
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo first = Open(read_only);
  SessionInfo second = Open(read_only);
  auto third = sessions_->Open("m", read_only, "alice");
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("alice"), std::string::npos);
  EXPECT_TRUE(sessions_->Open("m", read_only, "bob").ok());  // Per principal.
  ASSERT_TRUE(sessions_->Close(first.id, false, false, "alice").ok());
  EXPECT_TRUE(sessions_->Open("m", read_only, "alice").ok());
}

TEST_F(SessionManagerTest, ModelsLargerThanSharedMemoryAreRefusedUpFront) {
  Start(2, core::Strategy::kFullShard);
  // 40 GB of float32 over this node's ranks: more than /dev/shm or half the
  // memory of any machine this runs on; refused before allocating.
  auto huge = registry_->Create("huge", R"({"units": [{"fqn": "", "params": [
        {"fqn": "w", "shape": [100000, 100000], "dtype": "float32"}]}]})",
                                std::nullopt,
                                ModelInit{ModelInit::Kind::kSeeded, 1}, {}, {});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("huge"), std::string::npos);
  EXPECT_EQ(registry_->Get("huge").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SessionManagerTest, R11_R12_UnknownIdsAndOtherPrincipals) {
  Start(2, core::Strategy::kFullShard);
  EXPECT_EQ(sessions_->Open("other", {}, "alice").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(sessions_->Get("s-none", "alice").status().code(),
            absl::StatusCode::kNotFound);
  SessionInfo info = Open({});
  EXPECT_EQ(sessions_->Get(info.id, "bob").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(sessions_->Close(info.id, true, false, "bob").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(sessions_->Get(info.id, "root").ok());
  EXPECT_TRUE(sessions_->List("", "bob").empty());
  EXPECT_EQ(sessions_->List("", "alice").size(), 1u);
}

TEST_F(SessionManagerTest, LeaseExpiryAbortsWithoutWriteback) {
  Start(2, core::Strategy::kFullShard);
  SessionOptions options;
  options.lease = absl::Seconds(5);
  SessionInfo info = Open(options);
  WriteAll(info.id, "scale", {9.0f});
  now_ += absl::Seconds(4);
  EXPECT_EQ(sessions_->ReapExpired(), 0);
  ASSERT_TRUE(sessions_->Renew(info.id, std::nullopt, "alice").ok());
  now_ += absl::Seconds(4);
  EXPECT_EQ(sessions_->ReapExpired(), 0);
  now_ += absl::Seconds(2);
  EXPECT_EQ(sessions_->ReapExpired(), 1);
  EXPECT_EQ(sessions_->Get(info.id, "alice").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(sessions_->MemoryInUse(), 0);
  SessionInfo check = Open({});
  EXPECT_EQ(Read(check.id, "scale"), Seeded("scale", 1));
}

TEST_F(SessionManagerTest, Rank0OnlyWithWritebackScattersFromTheHome) {
  Start(4, core::Strategy::kFullShard);
  SessionOptions options;
  options.rank0_only = true;
  options.home_rank = 3;
  SessionInfo info = Open(options);
  WriteAll(info.id, "embed.w", Doubled(Seeded("embed.w", 40)));
  ASSERT_TRUE(sessions_->Close(info.id, false, false, "alice").ok());
  SessionInfo check = Open({});
  EXPECT_EQ(Read(check.id, "embed.w"), Doubled(Seeded("embed.w", 40)));
}

TEST_F(SessionManagerTest, WithGradsAbsentPartialAndWrittenBackToOwners) {
  Start(2, core::Strategy::kFullShard);
  SessionOptions options;
  options.with_grads = true;
  SessionInfo none = Open(options);
  EXPECT_FALSE(none.has_grads);
  EXPECT_EQ(sessions_
                ->Read(none.id, "scale", true, std::nullopt, 0, std::nullopt, 0,
                       "alice",
                       [](int64_t, absl::string_view,
                          const std::shared_ptr<const void>&) { return true; })
                .code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(sessions_->Close(none.id, true, false, "alice").ok());
  TearDown();

  // Only rank 0 has grads: rank 1's slices read as zeros.
  Start(2, core::Strategy::kFullShard, {0});
  SessionInfo partial = Open(options);
  EXPECT_TRUE(partial.has_grads);
  std::vector<float> expected = Seeded("layers.1.w.grad", 35);
  // layers.1: N = 35 + end pad 1 = 36, c = 18: rank 1 owns elements 18..34.
  for (int i = 18; i < 35; ++i) expected[i] = 0;
  EXPECT_EQ(Read(partial.id, "layers.1.w", true), expected);
  WriteAll(partial.id, "layers.1.w", std::vector<float>(35, 1.0f), true);
  ASSERT_TRUE(sessions_->Close(partial.id, false, false, "alice").ok());
  SessionInfo check = Open(options);
  std::vector<float> after(35, 1.0f);
  for (int i = 18; i < 35; ++i) after[i] = 0;  // Rank 1 keeps no grads.
  EXPECT_EQ(Read(check.id, "layers.1.w", true), after);
}

TEST_F(SessionManagerTest, ReadDtypeConvertsToBFloat16) {
  Start(2, core::Strategy::kFullShard);
  SessionOptions options;
  options.read_dtype = core::DType::kBFloat16;
  SessionInfo info = Open(options);
  std::string bytes;
  ASSERT_TRUE(sessions_
                  ->Read(info.id, "layers.0.b", false, std::nullopt, 1, 3, 0,
                         "alice",
                         [&](int64_t offset, absl::string_view chunk,
                             const std::shared_ptr<const void>&) {
                           EXPECT_EQ(offset, 1);
                           bytes.append(chunk.data(), chunk.size());
                           return true;
                         })
                  .ok());
  ASSERT_EQ(bytes.size(), 6u);
  const std::vector<float> seeded = Seeded("layers.0.b", 5);
  for (int i = 0; i < 3; ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    EXPECT_EQ(bits, core::FloatToBFloat16(seeded[i + 1])) << "index " << i;
  }
}

// Only a read-only session's unconverted view of its shared copy comes with
// a pin, and the pin keeps those bytes as they were after the session is
// gone (gRPC may still be sending them): not freed, not reused.
TEST_F(SessionManagerTest, ReadsPinOnlyImmutableBytesWhichOutliveTheSession) {
  Start(2, core::Strategy::kFullShard);
  struct Seen {
    std::shared_ptr<const void> pin;
    absl::string_view bytes;
  };
  const auto read = [&](const std::string& id, const std::string& fqn,
                        std::optional<core::DType> dtype) {
    std::vector<Seen> seen;
    EXPECT_TRUE(sessions_
                    ->Read(id, fqn, false, dtype, 0, std::nullopt, 0, "alice",
                           [&](int64_t, absl::string_view bytes,
                               const std::shared_ptr<const void>& pin) {
                             seen.push_back({pin, bytes});
                             return true;
                           })
                    .ok());
    return seen;
  };
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo viewer = Open(read_only);
  WriteAll(viewer.id, "scale", {5.0f});  // Its own edit: a private copy.
  const std::vector<Seen> shared = read(viewer.id, "layers.1.w", std::nullopt);
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_NE(shared[0].pin, nullptr);
  EXPECT_EQ(read(viewer.id, "scale", std::nullopt).at(0).pin, nullptr);
  EXPECT_EQ(read(viewer.id, "layers.1.w", core::DType::kBFloat16).at(0).pin,
            nullptr);
  ASSERT_TRUE(sessions_->Close(viewer.id, false, false, "alice").ok());

  // The same layout again: an unpinned copy's memory would be reused here
  // and overwritten by the write.
  SessionInfo writer = Open({});
  WriteAll(writer.id, "layers.1.w", Doubled(Seeded("layers.1.w", 35)));
  EXPECT_EQ(read(writer.id, "layers.1.w", std::nullopt).at(0).pin, nullptr);
  std::vector<float> pinned(35);
  ASSERT_EQ(shared[0].bytes.size(), 35u * 4);
  std::memcpy(pinned.data(), shared[0].bytes.data(), 35 * 4);
  EXPECT_EQ(pinned, Seeded("layers.1.w", 35));
}

// A reader stalled inside its sink (a slow client) does not hold up another
// read-only session's read of the same shared copy.
TEST_F(SessionManagerTest, AStalledReaderOfASharedCopyBlocksNoOtherReader) {
  Start(2, core::Strategy::kFullShard);
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo slow = Open(read_only);
  SessionInfo other = Open(read_only);
  absl::Notification slow_inside;
  absl::Notification other_done;
  std::atomic<bool> slow_left{false};
  std::thread stalled([&] {
    EXPECT_TRUE(sessions_
                    ->Read(slow.id, "layers.1.w", false, std::nullopt, 0,
                           std::nullopt, 0, "alice",
                           [&](int64_t, absl::string_view,
                               const std::shared_ptr<const void>&) {
                             slow_inside.Notify();
                             other_done.WaitForNotificationWithTimeout(
                                 absl::Seconds(5));
                             slow_left = true;
                             return true;
                           })
                    .ok());
  });
  slow_inside.WaitForNotification();
  EXPECT_EQ(Read(other.id, "layers.1.w"), Seeded("layers.1.w", 35));
  // The stalled reader was still inside its sink all along.
  EXPECT_FALSE(slow_left.load());
  other_done.Notify();
  stalled.join();
}

TEST_F(SessionManagerTest, SingletonParamWritebackLeavesPaddingAlone) {
  Start(2, core::Strategy::kFullShard);
  // Root unit: embed.w 40 | scale 1 | end pad 1 -> c = 21; rank 1's shard
  // ends with scale at 19 and padding at 20.
  const uint8_t* rank1 = model_->ParamShard(1, 0);
  float padding_before;
  std::memcpy(&padding_before, rank1 + 20 * 4, 4);
  SessionInfo info = Open(Params({"scale"}));
  WriteAll(info.id, "scale", {3.0f});
  ASSERT_TRUE(sessions_->Close(info.id, false, false, "alice").ok());
  float scale, padding_after;
  std::memcpy(&scale, rank1 + 19 * 4, 4);
  std::memcpy(&padding_after, rank1 + 20 * 4, 4);
  EXPECT_EQ(scale, 3.0f);
  EXPECT_EQ(padding_after, padding_before);
}

TEST_F(SessionManagerTest, RestartedRegistryReattachesShardsAndGenerations) {
  const std::string data_dir =
      absl::StrCat(::testing::TempDir(), "/smt_restart_", getpid());
  const std::string instance = InstanceForDataDir(data_dir);
  {
    ModelRegistry registry(
        ModelRegistry::Options{data_dir, instance, core::Topology{1, 2}, 0});
    SessionManager sessions(&registry, {});
    ASSERT_TRUE(registry
                    .Create("m", kLayout, std::nullopt,
                            {ModelInit::Kind::kSeeded, kSeed}, {}, {})
                    .ok());
    auto info = sessions.Open("m", Scoped("layers.1"), "alice");
    ASSERT_TRUE(info.ok());
    const std::vector<float> twice = Doubled(Seeded("layers.1.w", 35));
    ASSERT_TRUE(
        sessions
            .Write(
                info->id, "layers.1.w", false, core::DType::kFloat32, 0,
                absl::string_view(reinterpret_cast<const char*>(twice.data()),
                                  twice.size() * 4),
                "alice")
            .ok());
    ASSERT_TRUE(sessions.Close(info->id, false, false, "alice").ok());
  }
  ModelRegistry registry(
      ModelRegistry::Options{data_dir, instance, core::Topology{1, 2}, 0});
  ASSERT_TRUE(registry.Recover().ok());
  auto model = registry.Get("m");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->store->Generation(2), 1u);
  SessionManager sessions(&registry, {});
  auto info = sessions.Open("m", {}, "alice");
  ASSERT_TRUE(info.ok());
  std::vector<float> values(35);
  ASSERT_TRUE(sessions
                  .Read(info->id, "layers.1.w", false, std::nullopt, 0,
                        std::nullopt, 0, "alice",
                        [&](int64_t offset, absl::string_view bytes,
                            const std::shared_ptr<const void>&) {
                          std::memcpy(values.data() + offset, bytes.data(),
                                      bytes.size());
                          return true;
                        })
                  .ok());
  EXPECT_EQ(values, Doubled(Seeded("layers.1.w", 35)));
  ASSERT_TRUE(sessions.Close(info->id, true, false, "alice").ok());
  (*model)->store->Destroy().IgnoreError();
}

}  // namespace
}  // namespace summon::server
