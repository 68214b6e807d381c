#include "core/trainer_rules.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_testing.h"
#include "gtest/gtest.h"

namespace summon::core {
namespace {

using P = TrainingPhase;

constexpr P kAllPhases[] = {P::kIdle, P::kForward, P::kBetween, P::kBackward,
                            P::kOptimizer};

// R16, one test per legal edge.
TEST(PhaseMachineTest, R16_IdleToForward) {
  EXPECT_TRUE(CheckPhaseMove("m", 0, P::kIdle, P::kForward).ok());
}
TEST(PhaseMachineTest, R16_ForwardToBetween) {
  EXPECT_TRUE(CheckPhaseMove("m", 0, P::kForward, P::kBetween).ok());
}
TEST(PhaseMachineTest, R16_BetweenToBackward) {
  EXPECT_TRUE(CheckPhaseMove("m", 0, P::kBetween, P::kBackward).ok());
}
TEST(PhaseMachineTest, R16_BackwardToOptimizer) {
  EXPECT_TRUE(CheckPhaseMove("m", 0, P::kBackward, P::kOptimizer).ok());
}
TEST(PhaseMachineTest, R16_OptimizerToIdle) {
  EXPECT_TRUE(CheckPhaseMove("m", 0, P::kOptimizer, P::kIdle).ok());
}
TEST(PhaseMachineTest, R16_ForwardToIdleForEval) {
  EXPECT_TRUE(CheckPhaseMove("m", 0, P::kForward, P::kIdle).ok());
}
TEST(PhaseMachineTest, R16_BackwardToIdleWithoutOptimizerStep) {
  EXPECT_TRUE(CheckPhaseMove("m", 0, P::kBackward, P::kIdle).ok());
}
TEST(PhaseMachineTest, R16_IdleToIdleAnnouncesTheTrainer) {
  EXPECT_TRUE(CheckPhaseMove("m", 0, P::kIdle, P::kIdle).ok());
}

// Every other of the 25 pairs is refused, naming both phases.
TEST(PhaseMachineTest, R16_EveryOtherMoveIsRefusedNamingBothPhases) {
  const std::vector<std::pair<P, P>> legal = {
      {P::kIdle, P::kForward},     {P::kForward, P::kBetween},
      {P::kBetween, P::kBackward}, {P::kBackward, P::kOptimizer},
      {P::kOptimizer, P::kIdle},   {P::kForward, P::kIdle},
      {P::kBackward, P::kIdle},    {P::kIdle, P::kIdle}};
  int refused = 0;
  for (P from : kAllPhases) {
    for (P to : kAllPhases) {
      const bool is_legal = std::find(legal.begin(), legal.end(),
                                      std::make_pair(from, to)) != legal.end();
      const absl::Status status = CheckPhaseMove("gpt", 3, from, to);
      if (is_legal) {
        EXPECT_TRUE(status.ok()) << status;
        continue;
      }
      ++refused;
      ExpectStatus(status, absl::StatusCode::kFailedPrecondition,
                   {"rank 3", "'gpt'",
                    absl::StrCat("from ", TrainingPhaseName(from), " to ",
                                 TrainingPhaseName(to))});
    }
  }
  EXPECT_EQ(refused, 17);
}

TEST(PhaseMachineTest, R16_ReportedIssueMovesAreRefused) {
  // IDLE -> OPTIMIZER -> BETWEEN -> IDLE and a restarted FORWARD -> FORWARD.
  EXPECT_FALSE(CheckPhaseMove("m", 0, P::kIdle, P::kOptimizer).ok());
  EXPECT_FALSE(CheckPhaseMove("m", 0, P::kOptimizer, P::kBetween).ok());
  EXPECT_FALSE(CheckPhaseMove("m", 0, P::kBetween, P::kIdle).ok());
  EXPECT_FALSE(CheckPhaseMove("m", 0, P::kForward, P::kForward).ok());
}

TEST(OptimizerStepTest, TwoRanksOfOneStepCountOnce) {
  std::optional<int64_t> last;
  EXPECT_TRUE(CountOptimizerStep(P::kBackward, P::kOptimizer, 7, last));
  EXPECT_EQ(last, 7);
  EXPECT_FALSE(CountOptimizerStep(P::kBackward, P::kOptimizer, 7, last));
  EXPECT_TRUE(CountOptimizerStep(P::kBackward, P::kOptimizer, 8, last));
  EXPECT_EQ(last, 8);
}

TEST(OptimizerStepTest, OnlyEnteringOptimizerCounts) {
  std::optional<int64_t> last;
  EXPECT_FALSE(CountOptimizerStep(P::kIdle, P::kForward, 1, last));
  EXPECT_FALSE(CountOptimizerStep(P::kOptimizer, P::kIdle, 1, last));
  EXPECT_FALSE(last.has_value());
  EXPECT_TRUE(CountOptimizerStep(P::kBackward, P::kOptimizer, 0, last));
  EXPECT_EQ(last, 0);
}

TrainerLease Lease(std::string id, std::string incarnation,
                   std::vector<int> ranks, absl::Time expires) {
  return TrainerLease{std::move(id),          "gpt",
                      std::move(incarnation), std::move(ranks),
                      absl::Seconds(10),      expires};
}

const absl::Time kNow = absl::FromUnixSeconds(1000);

TEST(AttachTest, R17_FreeRanksGiveANewLease) {
  absl::StatusOr<AttachDecision> decision =
      DecideAttach("gpt", 4, {1, 0}, "t-1", {}, kNow);
  ASSERT_TRUE(decision.ok()) << decision.status();
  EXPECT_FALSE(decision->resumed_lease.has_value());
  EXPECT_TRUE(decision->taken_over_leases.empty());
}

TEST(AttachTest, R17_LiveOtherIncarnationIsRefusedAlreadyExists) {
  const TrainerLease live = Lease("L1", "t-1", {0, 1}, kNow + absl::Seconds(4));
  ExpectStatus(DecideAttach("gpt", 4, {1}, "t-2", {&live}, kNow).status(),
               absl::StatusCode::kAlreadyExists,
               {"rank 1", "'gpt'", "'t-1'", "L1", "4s"});
}

TEST(AttachTest, R17_LapsedOtherIncarnationIsTakenOver) {
  const TrainerLease lapsed = Lease("L1", "t-1", {0, 1}, kNow);
  absl::StatusOr<AttachDecision> decision =
      DecideAttach("gpt", 4, {0, 1}, "t-2", {&lapsed}, kNow);
  ASSERT_TRUE(decision.ok()) << decision.status();
  EXPECT_EQ(decision->taken_over_leases, std::vector<std::string>{"L1"});
  EXPECT_EQ(decision->previous_incarnation, "t-1");
}

TEST(AttachTest, R17_SameIncarnationResumesItsLease) {
  const TrainerLease mine = Lease("L1", "t-1", {0, 1}, kNow - absl::Seconds(1));
  absl::StatusOr<AttachDecision> decision =
      DecideAttach("gpt", 4, {1, 0}, "t-1", {&mine}, kNow);
  ASSERT_TRUE(decision.ok()) << decision.status();
  EXPECT_EQ(decision->resumed_lease, "L1");
}

TEST(AttachTest, R17_SameIncarnationWithOtherRanksMustDetachFirst) {
  const TrainerLease mine = Lease("L1", "t-1", {0, 1}, kNow + absl::Seconds(5));
  ExpectStatus(DecideAttach("gpt", 4, {0, 1, 2}, "t-1", {&mine}, kNow).status(),
               absl::StatusCode::kFailedPrecondition, {"[0,1]", "[0,1,2]"});
}

TEST(AttachTest, R17_BadRequestsAreInvalidArgument) {
  ExpectStatus(DecideAttach("gpt", 4, {0}, "", {}, kNow).status(),
               absl::StatusCode::kInvalidArgument, {"incarnation"});
  ExpectStatus(DecideAttach("gpt", 4, {}, "t", {}, kNow).status(),
               absl::StatusCode::kInvalidArgument, {"rank"});
  ExpectStatus(DecideAttach("gpt", 4, {4}, "t", {}, kNow).status(),
               absl::StatusCode::kInvalidArgument, {"rank 4", "4 ranks"});
  ExpectStatus(DecideAttach("gpt", 4, {2, 2}, "t", {}, kNow).status(),
               absl::StatusCode::kInvalidArgument, {"rank 2", "twice"});
}

TEST(AttachTest, R17_LeaseLapsesAtItsExpiry) {
  const TrainerLease lease = Lease("L1", "t-1", {0}, kNow);
  EXPECT_FALSE(LeaseLapsed(lease, kNow - absl::Milliseconds(1)));
  EXPECT_TRUE(LeaseLapsed(lease, kNow));
}

TEST(ReportLeaseTest, R17_UnattachedRankNeedsNoLease) {
  EXPECT_TRUE(CheckReportLease("gpt", 0, nullptr, "").ok());
  ExpectStatus(CheckReportLease("gpt", 0, nullptr, "L9"),
               absl::StatusCode::kFailedPrecondition, {"L9", "attach again"});
}

TEST(ReportLeaseTest, R17_AttachedRankNeedsItsOwnLease) {
  const TrainerLease lease = Lease("L1", "t-1", {0}, kNow);
  EXPECT_TRUE(CheckReportLease("gpt", 0, &lease, "L1").ok());
  ExpectStatus(CheckReportLease("gpt", 0, &lease, ""),
               absl::StatusCode::kFailedPrecondition, {"'t-1'", "rank 0"});
  ExpectStatus(CheckReportLease("gpt", 0, &lease, "L2"),
               absl::StatusCode::kFailedPrecondition, {"L2", "L1"});
}

ModelRuntimeState IdleModel() {
  ModelRuntimeState model;
  model.model = "gpt";
  model.phase_per_rank.assign(2, P::kIdle);
  model.units = {{"", 1, std::nullopt, {}}, {"layers.0", 1, std::nullopt, {}}};
  return model;
}

TEST(ShardWriteTest, R15_AllowedWhileEveryRankIsIdleOrBetween) {
  ModelRuntimeState model = IdleModel();
  model.phase_per_rank[1] = P::kBetween;
  EXPECT_TRUE(CheckShardWrite(model, "load").ok());
}

TEST(ShardWriteTest, R15_RefusedInEveryTrainingPhase) {
  for (P phase : {P::kForward, P::kBackward, P::kOptimizer}) {
    ModelRuntimeState model = IdleModel();
    model.phase_per_rank[1] = phase;
    ExpectStatus(CheckShardWrite(model, "load of a checkpoint"),
                 absl::StatusCode::kFailedPrecondition,
                 {"load of a checkpoint", "rank 1", TrainingPhaseName(phase)});
  }
}

TEST(ShardWriteTest, R15_RefusedWhileASessionHoldsOrGathersAUnit) {
  ModelRuntimeState model = IdleModel();
  model.units[1].writable_session = "s-1";
  ExpectStatus(CheckShardWrite(model, "delete"),
               absl::StatusCode::kFailedPrecondition, {"layers.0", "s-1"});
  model = IdleModel();
  model.units[0].read_only_gathering.insert("s-2");
  ExpectStatus(CheckShardWrite(model, "delete"),
               absl::StatusCode::kFailedPrecondition, {"s-2"});
}

TEST(ExternalWriteTest, R18_OnlyOthersThanTheTrainerCount) {
  EXPECT_FALSE(IsExternalWrite(ShardWriter::kOwnTrainer));
  EXPECT_TRUE(IsExternalWrite(ShardWriter::kWriteback));
  EXPECT_TRUE(IsExternalWrite(ShardWriter::kLoad));
}

}  // namespace
}  // namespace summon::core
