#include "core/session_rules.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_testing.h"
#include "gtest/gtest.h"

namespace summon::core {
namespace {

// Model "llama" on 4 ranks, units "", "layers.0", "layers.1", all IDLE.
ModelRuntimeState IdleModel() {
  ModelRuntimeState model;
  model.model = "llama";
  model.phase_per_rank.assign(4, TrainingPhase::kIdle);
  model.units = {{"", 3, std::nullopt, {}},
                 {"layers.0", 5, std::nullopt, {}},
                 {"layers.1", 5, std::nullopt, {}}};
  return model;
}

OpenRequest WholeModel(bool writable) {
  return OpenRequest{{0, 1, 2}, {0, 1, 2, 3}, writable};
}

constexpr TrainingPhase kAllPhases[] = {
    TrainingPhase::kIdle, TrainingPhase::kForward, TrainingPhase::kBetween,
    TrainingPhase::kBackward, TrainingPhase::kOptimizer};

TEST(TrainingPhaseTest, NamesRoundTripAndParsingIgnoresCase) {
  for (TrainingPhase phase : kAllPhases) {
    EXPECT_EQ(ParseTrainingPhase(TrainingPhaseName(phase)).value(), phase);
  }
  EXPECT_EQ(TrainingPhaseName(TrainingPhase::kBetween), "BETWEEN");
  EXPECT_EQ(ParseTrainingPhase("optimizer").value(), TrainingPhase::kOptimizer);
}

TEST(TrainingPhaseTest, UnknownPhaseIsInvalidArgumentNamingIt) {
  ExpectStatus(ParseTrainingPhase("warmup").status(),
               absl::StatusCode::kInvalidArgument, {"warmup"});
}

TEST(SessionRulesTest, R1_OpenRefusedInForward) {
  ModelRuntimeState model = IdleModel();
  model.phase_per_rank[2] = TrainingPhase::kForward;
  ExpectStatus(CheckNoTrainingInProgress(model, WholeModel(false)),
               absl::StatusCode::kFailedPrecondition,
               {"llama", "rank 2", "FORWARD"});
}

TEST(SessionRulesTest, R1_OpenRefusedInBackwardAndOptimizer) {
  for (TrainingPhase phase :
       {TrainingPhase::kBackward, TrainingPhase::kOptimizer}) {
    ModelRuntimeState model = IdleModel();
    model.phase_per_rank[3] = phase;
    ExpectStatus(CheckNoTrainingInProgress(model, WholeModel(true)),
                 absl::StatusCode::kFailedPrecondition,
                 {"rank 3", TrainingPhaseName(phase)});
  }
}

TEST(SessionRulesTest, R1_OpenAllowedWhileIdleOrBetween) {
  ModelRuntimeState model = IdleModel();
  model.phase_per_rank = {TrainingPhase::kIdle, TrainingPhase::kBetween,
                          TrainingPhase::kIdle, TrainingPhase::kBetween};
  EXPECT_TRUE(CheckNoTrainingInProgress(model, WholeModel(true)).ok());
}

TEST(SessionRulesTest, R1_OnlyRanksOfTheRequestCount) {
  ModelRuntimeState model = IdleModel();
  model.phase_per_rank[3] = TrainingPhase::kForward;
  OpenRequest open{{1}, {0, 1, 2}, true};
  EXPECT_TRUE(CheckNoTrainingInProgress(model, open).ok());
}

TEST(SessionRulesTest, UnknownRankOrUnitIsInvalidArgument) {
  ModelRuntimeState model = IdleModel();
  ExpectStatus(CheckNoTrainingInProgress(model, OpenRequest{{0}, {4}, true}),
               absl::StatusCode::kInvalidArgument, {"llama", "rank 4"});
  ExpectStatus(CheckUnitLocks(model, OpenRequest{{3}, {0}, true}),
               absl::StatusCode::kInvalidArgument, {"llama", "unit #3"});
}

TEST(SessionRulesTest, R2_WritableOpenRefusedWhileAnotherWritableHoldsUnit) {
  ModelRuntimeState model = IdleModel();
  model.units[1].writable_session = "s-edit";
  // A recursive session on the root reaches layers.0 (FSDP's nested S2).
  ExpectStatus(CheckUnitLocks(model, WholeModel(true)),
               absl::StatusCode::kFailedPrecondition,
               {"llama", "'layers.0'", "s-edit"});
}

TEST(SessionRulesTest, R2_WritableOpenAllowedOnUnitsNobodyWrites) {
  ModelRuntimeState model = IdleModel();
  model.units[1].writable_session = "s-edit";
  model.units[2].read_only_gathering = {"s-look"};
  EXPECT_TRUE(CheckUnitLocks(model, OpenRequest{{2}, {0, 1, 2, 3}, true}).ok());
}

TEST(SessionRulesTest, R2_ReadOnlyOpenAllowedBesideWritableAndReadOnly) {
  ModelRuntimeState model = IdleModel();
  model.units[1].writable_session = "s-edit";
  model.units[2].read_only_gathering = {"s-look"};
  EXPECT_TRUE(CheckUnitLocks(model, WholeModel(false)).ok());
}

GatherIdentity LayersGather() {
  GatherIdentity gather;
  gather.model = "llama";
  gather.params = {"layers.0.w", "layers.1.w"};
  gather.generation_per_unit = {{1, 5}, {2, 5}};
  return gather;
}

TEST(SessionRulesTest, R2_ReadOnlyOpensShareAGatherOfTheSameGeneration) {
  GatherIdentity requested = LayersGather();
  requested.home_rank = 3;  // Ignored without rank0_only.
  EXPECT_TRUE(CanShareGather(LayersGather(), requested));

  GatherIdentity home = LayersGather();
  home.rank0_only = true;
  home.home_rank = 2;
  EXPECT_TRUE(CanShareGather(home, home));
}

TEST(SessionRulesTest, R2_GatherNotSharedWhenAnythingDiffers) {
  const GatherIdentity existing = LayersGather();
  auto differs = [&](auto change) {
    GatherIdentity requested = existing;
    change(requested);
    return !CanShareGather(existing, requested);
  };
  EXPECT_TRUE(differs([](GatherIdentity& g) { g.writable = true; }));
  EXPECT_TRUE(differs([](GatherIdentity& g) { g.model = "gpt"; }));
  EXPECT_TRUE(differs([](GatherIdentity& g) { g.params.erase("layers.1.w"); }));
  EXPECT_TRUE(differs([](GatherIdentity& g) { g.generation_per_unit[2] = 6; }));
  EXPECT_TRUE(differs([](GatherIdentity& g) { g.with_grads = true; }));
  EXPECT_TRUE(differs([](GatherIdentity& g) { g.rank0_only = true; }));
  EXPECT_TRUE(differs([](GatherIdentity& g) { g.offload_to_cpu = true; }));

  GatherIdentity home = existing;
  home.rank0_only = true;
  GatherIdentity other_home = home;
  other_home.home_rank = 1;
  EXPECT_FALSE(CanShareGather(home, other_home));

  // A writable session's buffer holds its private edits.
  GatherIdentity writable = existing;
  writable.writable = true;
  EXPECT_FALSE(CanShareGather(writable, existing));
}

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

TEST(SessionRulesTest, R3_PhaseChangeRefusedWhileWritableSessionHoldsUnit) {
  ModelRuntimeState model = IdleModel();
  model.units[2].writable_session = "s-edit";
  model.phase_per_rank[1] = TrainingPhase::kBetween;
  for (auto [rank, to] : {std::pair{0, TrainingPhase::kForward},
                          std::pair{0, TrainingPhase::kOptimizer},
                          std::pair{1, TrainingPhase::kBackward}}) {
    ExpectStatus(
        DecidePhaseChange(model, rank, to, std::nullopt, kNow).status(),
        absl::StatusCode::kFailedPrecondition,
        {absl::StrCat("rank ", rank), TrainingPhaseName(to), "'layers.1'",
         "s-edit", "llama"});
  }
}

TEST(SessionRulesTest, R3_PhaseChangeWaitsUntilTheTrainerDeadline) {
  ModelRuntimeState model = IdleModel();
  model.units[0].writable_session = "s-edit";
  const absl::Time deadline = kNow + absl::Seconds(30);
  EXPECT_EQ(DecidePhaseChange(model, 0, TrainingPhase::kForward, deadline, kNow)
                .value(),
            PhaseChangeDecision::kWait);
  EXPECT_EQ(DecidePhaseChange(model, 0, TrainingPhase::kForward, deadline,
                              deadline - absl::Nanoseconds(1))
                .value(),
            PhaseChangeDecision::kWait);
  ExpectStatus(
      DecidePhaseChange(model, 0, TrainingPhase::kForward, deadline, deadline)
          .status(),
      absl::StatusCode::kDeadlineExceeded, {"rank 0", "s-edit"});
}

TEST(SessionRulesTest, R3_PhaseChangeAllowedWithoutWritableSession) {
  const ModelRuntimeState model = IdleModel();
  EXPECT_EQ(
      DecidePhaseChange(model, 2, TrainingPhase::kForward, std::nullopt, kNow)
          .value(),
      PhaseChangeDecision::kAllow);
}

TEST(SessionRulesTest, R3_MovesOutOfAStepOrIntoIdleOrBetweenAreNeverBlocked) {
  ModelRuntimeState model = IdleModel();
  model.units[1].writable_session = "s-edit";
  for (TrainingPhase from : kAllPhases) {
    for (TrainingPhase to : kAllPhases) {
      model.phase_per_rank[0] = from;
      const bool blocked = !IsInTrainingStep(from) && IsInTrainingStep(to);
      absl::StatusOr<PhaseChangeDecision> decision =
          DecidePhaseChange(model, 0, to, std::nullopt, kNow);
      EXPECT_EQ(decision.ok(), !blocked)
          << TrainingPhaseName(from) << " -> " << TrainingPhaseName(to);
    }
  }
}

TEST(SessionRulesTest, R6_ReadOnlySessionBlocksTrainingOnlyWhileGathering) {
  ModelRuntimeState model = IdleModel();
  model.units[1].read_only_gathering = {"s-look"};
  ExpectStatus(
      DecidePhaseChange(model, 0, TrainingPhase::kOptimizer, std::nullopt, kNow)
          .status(),
      absl::StatusCode::kFailedPrecondition, {"'layers.0'", "s-look"});
  // Gathered: the snapshot is the session's own; training goes on.
  model.units[1].read_only_gathering.clear();
  EXPECT_EQ(
      DecidePhaseChange(model, 0, TrainingPhase::kOptimizer, std::nullopt, kNow)
          .value(),
      PhaseChangeDecision::kAllow);
}

ModelRuntimeState BetweenModel() {
  ModelRuntimeState model = IdleModel();
  model.phase_per_rank[1] = TrainingPhase::kBetween;
  return model;
}

TEST(SessionRulesTest,
     R4_WritableRefusedBetweenForwardAndBackwardForShardGradOp) {
  ExpectStatus(CheckWritableAllowedInPhase(
                   BetweenModel(), Strategy::kShardGradOp, WholeModel(true)),
               absl::StatusCode::kFailedPrecondition,
               {"llama", "rank 1", "BETWEEN", "SHARD_GRAD_OP"});
}

TEST(SessionRulesTest,
     R4_WritableRefusedBetweenForwardAndBackwardForHybridShardZero2) {
  ExpectStatus(
      CheckWritableAllowedInPhase(BetweenModel(), Strategy::kHybridShardZero2,
                                  WholeModel(true)),
      absl::StatusCode::kFailedPrecondition, {"rank 1", "_HYBRID_SHARD_ZERO2"});
}

TEST(SessionRulesTest, R4_WritableAllowedBetweenForStrategiesThatReshard) {
  for (Strategy strategy :
       {Strategy::kFullShard, Strategy::kNoShard, Strategy::kHybridShard}) {
    EXPECT_TRUE(
        CheckWritableAllowedInPhase(BetweenModel(), strategy, WholeModel(true))
            .ok())
        << StrategyName(strategy);
  }
}

TEST(SessionRulesTest, R4_ReadOnlyAllowedBetweenForShardGradOp) {
  EXPECT_TRUE(CheckWritableAllowedInPhase(
                  BetweenModel(), Strategy::kShardGradOp, WholeModel(false))
                  .ok());
}

TEST(SessionRulesTest, R4_WritableAllowedBetweenWhenGroupOfOneIsNoShard) {
  // _HYBRID_SHARD_ZERO2 with one rank per node shards nothing (R10).
  absl::StatusOr<ShardGroups> groups =
      DeriveShardGroups(Strategy::kHybridShardZero2, Topology{4, 1});
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_TRUE(CheckWritableAllowedInPhase(BetweenModel(), groups->effective,
                                          WholeModel(true))
                  .ok());
}

TEST(SessionRulesTest, CheckOpenAppliesR1R4AndR2) {
  EXPECT_TRUE(
      CheckOpen(IdleModel(), Strategy::kShardGradOp, WholeModel(true)).ok());

  ModelRuntimeState training = IdleModel();
  training.phase_per_rank[0] = TrainingPhase::kBackward;
  ExpectStatus(CheckOpen(training, Strategy::kFullShard, WholeModel(false)),
               absl::StatusCode::kFailedPrecondition, {"BACKWARD"});

  ExpectStatus(
      CheckOpen(BetweenModel(), Strategy::kShardGradOp, WholeModel(true)),
      absl::StatusCode::kFailedPrecondition, {"SHARD_GRAD_OP"});

  ModelRuntimeState held = IdleModel();
  held.units[0].writable_session = "s-edit";
  ExpectStatus(CheckOpen(held, Strategy::kFullShard, WholeModel(true)),
               absl::StatusCode::kFailedPrecondition, {"s-edit"});
}

FlatParamEntry Weight() {
  FlatParamEntry entry;
  entry.fqn = "layers.0.w";
  entry.shape = {5, 4};
  entry.dtype = DType::kBFloat16;
  entry.numel = 20;
  return entry;
}

TensorWrite WriteOf(int64_t offset, int64_t count) {
  return TensorWrite{"layers.0.w", DType::kBFloat16, std::nullopt, offset,
                     count};
}

TEST(SessionRulesTest, R5_UnknownParameterIsNotFound) {
  ExpectStatus(CheckWrite("s-edit", nullptr, WriteOf(0, 1)),
               absl::StatusCode::kNotFound, {"s-edit", "layers.0.w"});
}

TEST(SessionRulesTest, R5_DtypeMismatchIsInvalidArgument) {
  const FlatParamEntry weight = Weight();
  TensorWrite write = WriteOf(0, 20);
  write.dtype = DType::kFloat32;
  ExpectStatus(CheckWrite("s-edit", &weight, write),
               absl::StatusCode::kInvalidArgument,
               {"s-edit", "layers.0.w", "float32", "bfloat16"});
}

TEST(SessionRulesTest, R5_ShapeChangeIsInvalidArgument) {
  const FlatParamEntry weight = Weight();
  TensorWrite write = WriteOf(0, 20);
  write.shape = Shape{4, 5};  // Same numel, other shape.
  ExpectStatus(CheckWrite("s-edit", &weight, write),
               absl::StatusCode::kInvalidArgument,
               {"layers.0.w", ShapeToString({4, 5}), ShapeToString({5, 4})});
}

TEST(SessionRulesTest, R5_WholeTensorWriteCoversEveryElement) {
  const FlatParamEntry weight = Weight();
  TensorWrite write = WriteOf(0, 20);
  write.shape = Shape{5, 4};
  EXPECT_TRUE(CheckWrite("s-edit", &weight, write).ok());
  write.count = 19;  // A short whole-tensor write.
  ExpectStatus(CheckWrite("s-edit", &weight, write),
               absl::StatusCode::kInvalidArgument,
               {"layers.0.w", "19 elements", "not all 20"});
  write.offset = 1;  // Whole, but not from element 0.
  ExpectStatus(CheckWrite("s-edit", &weight, write),
               absl::StatusCode::kInvalidArgument,
               {"from element 1", ShapeToString({5, 4})});
}

TEST(SessionRulesTest, R5_RangeOutsideTheTensorIsOutOfRange) {
  const FlatParamEntry weight = Weight();
  for (auto [offset, count] : {std::pair<int64_t, int64_t>{15, 6},
                               {20, 1},
                               {-1, 2},
                               {0, -1},
                               {1, std::numeric_limits<int64_t>::max()}}) {
    ExpectStatus(CheckWrite("s-edit", &weight, WriteOf(offset, count)),
                 absl::StatusCode::kOutOfRange, {"layers.0.w", "s-edit"});
  }
}

TEST(SessionRulesTest, R5_WritesInsideTheTensorAreAccepted) {
  const FlatParamEntry weight = Weight();
  TensorWrite whole = WriteOf(0, 20);
  whole.shape = Shape{5, 4};
  EXPECT_TRUE(CheckWrite("s-edit", &weight, whole).ok());
  EXPECT_TRUE(CheckWrite("s-edit", &weight, WriteOf(15, 5)).ok());
  EXPECT_TRUE(CheckWrite("s-edit", &weight, WriteOf(20, 0)).ok());
}

TEST(SessionRulesTest, R7_WritebackAbortedWhenGenerationMoved) {
  const ModelRuntimeState model = IdleModel();  // layers.1 at generation 5.
  ExpectStatus(
      CheckGenerationsUnchanged(model, "s-edit", {{1, 5}, {2, 4}}, false),
      absl::StatusCode::kAborted,
      {"s-edit", "'layers.1'", "generation 4 to 5"});
}

TEST(SessionRulesTest, R7_UnchangedGenerationOrForceWritesBack) {
  const ModelRuntimeState model = IdleModel();
  EXPECT_TRUE(
      CheckGenerationsUnchanged(model, "s-edit", {{0, 3}, {1, 5}}, false).ok());
  EXPECT_TRUE(
      CheckGenerationsUnchanged(model, "s-edit", {{1, 5}, {2, 4}}, true).ok());
}

TEST(SessionRulesTest, R8_CommitOnlyWhenEveryNodePrepared) {
  EXPECT_TRUE(DecideCommit("s-edit", {absl::OkStatus(), absl::OkStatus(),
                                      absl::OkStatus()})
                  .ok());
}

TEST(SessionRulesTest, R8_ARefusingNodeAbortsTheWritebackEverywhere) {
  ExpectStatus(DecideCommit("s-edit", {absl::OkStatus(),
                                       absl::AbortedError("generation moved"),
                                       absl::OkStatus()}),
               absl::StatusCode::kAborted,
               {"s-edit", "node 1", "generation moved"});
}

TEST(SessionRulesTest, R8_AnUnreachableNodeMakesItUnavailable) {
  ExpectStatus(DecideCommit("s-edit", {absl::OkStatus(), std::nullopt}),
               absl::StatusCode::kUnavailable, {"s-edit", "node 1"});
  ExpectStatus(DecideCommit("s-edit", {absl::UnavailableError("conn reset"),
                                       absl::OkStatus()}),
               absl::StatusCode::kUnavailable, {"node 0", "conn reset"});
  ExpectStatus(
      DecideCommit("s-edit", {absl::OkStatus(),
                              absl::DeadlineExceededError("collective")}),
      absl::StatusCode::kUnavailable, {"node 1"});
}

TEST(SessionRulesTest, R8_UnreachableOutranksARefusal) {
  ExpectStatus(DecideCommit("s-edit", {absl::AbortedError("generation moved"),
                                       std::nullopt}),
               absl::StatusCode::kUnavailable, {"node 1"});
}

TEST(SessionRulesTest, R9_OpenBeyondTheBudgetIsResourceExhausted) {
  ExpectStatus(CheckMemoryBudget(2, 1000, 700, 301),
               absl::StatusCode::kResourceExhausted, {"node 2", "301", "1000"});
  // A budget lowered below what is already in use refuses any open.
  ExpectStatus(CheckMemoryBudget(0, 1000, 1200, 1),
               absl::StatusCode::kResourceExhausted, {"node 0"});
}

TEST(SessionRulesTest, R9_OpenThatFitsIsAllowed) {
  EXPECT_TRUE(CheckMemoryBudget(2, 1000, 700, 300).ok());
  EXPECT_TRUE(CheckMemoryBudget(2, 1000, 0, 0).ok());
}

TEST(SessionRulesTest, R9_ZeroBudgetIsUnlimited) {
  EXPECT_TRUE(
      CheckMemoryBudget(1, 0, 1 << 30, std::numeric_limits<int64_t>::max())
          .ok());
}

TEST(SessionRulesTest, R10_ShardGroupOfOneBehavesAsNoShard) {
  absl::StatusOr<ShardGroups> single =
      DeriveShardGroups(Strategy::kFullShard, Topology{1, 1});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->group_size, 1);
  EXPECT_EQ(single->declared, Strategy::kFullShard);
  EXPECT_EQ(single->effective, Strategy::kNoShard);

  absl::StatusOr<ShardGroups> sharded =
      DeriveShardGroups(Strategy::kFullShard, Topology{1, 2});
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_EQ(sharded->effective, Strategy::kFullShard);
}

TEST(SessionRulesTest, R11_UnknownModelAndSessionAreNotFound) {
  ExpectStatus(UnknownModelError("gpt-9"), absl::StatusCode::kNotFound,
               {"gpt-9"});
  ExpectStatus(UnknownSessionError("s-404"), absl::StatusCode::kNotFound,
               {"s-404"});
}

TEST(SessionRulesTest, R12_OnlyTheOwnerOrAnAdminOperatesASession) {
  EXPECT_TRUE(CheckSessionAccess("s-edit", "alice", "alice", false).ok());
  EXPECT_TRUE(CheckSessionAccess("s-edit", "alice", "root", true).ok());
  ExpectStatus(CheckSessionAccess("s-edit", "alice", "mallory", false),
               absl::StatusCode::kPermissionDenied,
               {"mallory", "s-edit", "alice"});
}

TEST(SessionRulesTest, R13_NodeFailureAbortsEverySessionTouchingIt) {
  const std::vector<SessionFootprint> sessions = {
      {"s-a", {0, 1}}, {"s-b", {0}}, {"s-c", {1, 2}}, {"s-d", {2}}};
  NodeFailureAborts aborts = SessionsAbortedByNodeFailure(sessions, 1);
  EXPECT_EQ(aborts.sessions, (std::vector<std::string>{"s-a", "s-c"}));
  ExpectStatus(aborts.status, absl::StatusCode::kUnavailable, {"node 1"});

  EXPECT_TRUE(SessionsAbortedByNodeFailure(sessions, 3).sessions.empty());
}

TEST(SessionRulesTest, R14_NonFloatingDtypesCannotBeFlattened) {
  ExpectStatus(CheckFlattenable("embed.ids", DType::kInt64),
               absl::StatusCode::kInvalidArgument, {"embed.ids"});
  ExpectStatus(CheckFlattenable("layers.0.mask", DType::kBool),
               absl::StatusCode::kInvalidArgument, {"layers.0.mask"});
  EXPECT_TRUE(CheckFlattenable("layers.0.w", DType::kFloat16).ok());
}

TEST(SessionRulesTest, LeaseExpiresAtItsDeadlineAndRenewalExtendsIt) {
  // An injected clock: the test owns every instant.
  absl::Time now = kNow;
  absl::Time deadline = RenewLease(now, absl::Seconds(60));
  EXPECT_EQ(deadline, kNow + absl::Seconds(60));
  now += absl::Seconds(59);
  EXPECT_FALSE(LeaseExpired(deadline, now));
  deadline = RenewLease(now, absl::Seconds(60));
  now += absl::Seconds(60) - absl::Nanoseconds(1);
  EXPECT_FALSE(LeaseExpired(deadline, now));
  now += absl::Nanoseconds(1);
  EXPECT_TRUE(LeaseExpired(deadline, now));
}

}  // namespace
}  // namespace summon::core
