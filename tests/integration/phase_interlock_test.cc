// The training-phase interlock through Trainer.ReportPhase: opens refused
// while a scoped rank trains (R1), trainer moves refused or waiting while a
// writable session holds a unit (R3), writable sessions refused BETWEEN
// forward and backward for SHARD_GRAD_OP and _HYBRID_SHARD_ZERO2 (R4), and
// generations moved by the trainer refusing a stale writeback (R7).

#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

constexpr int kRanks = 4;

using PhaseInterlockTest = SummondTest;

pb::TrainingPhase PhaseOf(const pb::Model& model, int rank) {
  return model.ranks(rank).phase();
}

TEST_F(PhaseInterlockTest, OpenRefusedWhileAScopedRankIsInATrainingStep) {
  StartServer(kRanks);
  const pb::Model model = CreateSeeded("m");
  // norm.w lives on rank 3 only, so rank 0 training does not concern it.
  ASSERT_EQ(OwnerOf(model, "norm.w", 0), 3);
  ASSERT_EQ(OwnerOf(model, "norm.w", 9), 3);
  for (pb::TrainingPhase phase :
       {pb::TRAINING_PHASE_FORWARD, pb::TRAINING_PHASE_BETWEEN,
        pb::TRAINING_PHASE_BACKWARD, pb::TRAINING_PHASE_OPTIMIZER}) {
    SCOPED_TRACE(pb::TrainingPhase_Name(phase));
    ASSERT_TRUE(ReportPhase("m", 0, phase).ok());
    EXPECT_EQ(PhaseOf(Describe("m"), 0), phase);
    if (phase == pb::TRAINING_PHASE_BETWEEN) continue;
    pb::Session session;
    EXPECT_CODE(TryOpen("m", {}, &session), FAILED_PRECONDITION);
    EXPECT_CODE(TryOpen("m", ReadOnly(), &session), FAILED_PRECONDITION);
    EXPECT_CODE(TryOpen("m", ReadOnly(ParamScope({"embed.w"})), &session),
                FAILED_PRECONDITION);
    const pb::Session unconcerned = Open("m", ParamScope({"norm.w"}));
    EXPECT_EQ(Read(unconcerned.id(), "norm.w"), Seeded("norm.w", 10));
    Close(unconcerned.id());
  }
  ASSERT_TRUE(ReportPhase("m", 0, pb::TRAINING_PHASE_IDLE).ok());
  const pb::Session writer = Open("m");
  ASSERT_TRUE(WriteFloats(writer.id(), "norm.w", Seeded("norm.w", 10)).ok());
  EXPECT_EQ(Close(writer.id()).written_back(), true);
}

TEST_F(PhaseInterlockTest, TrainerMoveRefusedWhileAWritableSessionHoldsAUnit) {
  StartServer(kRanks);
  CreateSeeded("m");
  const pb::Session writer = Open("m", ModuleScope("layers.0"));
  for (pb::TrainingPhase phase :
       {pb::TRAINING_PHASE_FORWARD, pb::TRAINING_PHASE_BACKWARD,
        pb::TRAINING_PHASE_OPTIMIZER}) {
    EXPECT_CODE(ReportPhase("m", 2, phase), FAILED_PRECONDITION);
  }
  const absl::Time started = absl::Now();
  EXPECT_CODE(ReportPhase("m", 2, pb::TRAINING_PHASE_FORWARD, 200),
              DEADLINE_EXCEEDED);
  EXPECT_GE(absl::Now() - started, absl::Milliseconds(190));
  EXPECT_EQ(PhaseOf(Describe("m"), 2), pb::TRAINING_PHASE_IDLE);
  Close(writer.id());
  // Read-only sessions are snapshots and block nothing (R6).
  const pb::Session reader = Open("m", ReadOnly());
  EXPECT_TRUE(ReportPhase("m", 2, pb::TRAINING_PHASE_FORWARD).ok());
  EXPECT_EQ(Read(reader.id(), "layers.1.w"), Seeded("layers.1.w", 35));
}

TEST_F(PhaseInterlockTest, TrainerMoveWithADeadlineWaitsForTheSessionToClose) {
  StartServer(kRanks);
  CreateSeeded("m");
  const pb::Session writer = Open("m", ModuleScope("layers.1"));
  ASSERT_TRUE(WriteFloats(writer.id(), "layers.1.w",
                          Scaled(Seeded("layers.1.w", 35), 2))
                  .ok());
  grpc::Status closed;
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(500));
    pb::CloseSessionResponse response;
    closed = TryClose(writer.id(), false, false, &response);
  });
  pb::ReportPhaseResponse report;
  const grpc::Status status =
      ReportPhase("m", 1, pb::TRAINING_PHASE_FORWARD, 10000, &report);
  closer.join();
  ASSERT_TRUE(closed.ok()) << closed.error_message();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(report.previous_phase(), pb::TRAINING_PHASE_IDLE);
  EXPECT_EQ(report.phase(), pb::TRAINING_PHASE_FORWARD);
  EXPECT_GE(report.waited_ms(), 100u);
  EXPECT_LT(report.waited_ms(), 10000u);
  // The move happened after the writeback: layers.1 moved to generation 1.
  for (const pb::UnitGeneration& unit : report.generations()) {
    EXPECT_EQ(unit.generation(), unit.unit() == "layers.1" ? 1u : 0u)
        << unit.unit();
  }
}

TEST_F(PhaseInterlockTest, TrainerLeavingBetweenWaitsForTheWriterToo) {
  StartServer(kRanks);
  CreateSeeded("m");
  ASSERT_TRUE(ReportPhase("m", 0, pb::TRAINING_PHASE_FORWARD).ok());
  ASSERT_TRUE(ReportPhase("m", 0, pb::TRAINING_PHASE_BETWEEN).ok());
  // FULL_SHARD frees the unsharded parameters after forward: a writable
  // session BETWEEN forward and backward is fine...
  const pb::Session writer = Open("m");
  // ...but backward must wait for it.
  EXPECT_CODE(ReportPhase("m", 0, pb::TRAINING_PHASE_BACKWARD),
              FAILED_PRECONDITION);
  Close(writer.id());
  EXPECT_TRUE(ReportPhase("m", 0, pb::TRAINING_PHASE_BACKWARD).ok());
}

TEST_F(PhaseInterlockTest, WritableRefusedBetweenForZero2Strategies) {
  for (pb::ShardingStrategy strategy :
       {pb::SHARDING_STRATEGY_SHARD_GRAD_OP,
        pb::SHARDING_STRATEGY_HYBRID_SHARD_ZERO2}) {
    SCOPED_TRACE(pb::ShardingStrategy_Name(strategy));
    StartServer(kRanks);
    CreateSeeded("m", strategy);
    ASSERT_TRUE(ReportPhase("m", 1, pb::TRAINING_PHASE_FORWARD).ok());
    ASSERT_TRUE(ReportPhase("m", 1, pb::TRAINING_PHASE_BETWEEN).ok());
    pb::Session session;
    EXPECT_CODE(TryOpen("m", {}, &session), FAILED_PRECONDITION);
    EXPECT_CODE(TryOpen("m", ModuleScope("layers.1"), &session),
                FAILED_PRECONDITION);
    const pb::Session reader = Open("m", ReadOnly());
    EXPECT_EQ(Read(reader.id(), "layers.1.w"), Seeded("layers.1.w", 35));
    Close(reader.id());
    ASSERT_TRUE(ReportPhase("m", 1, pb::TRAINING_PHASE_BACKWARD).ok());
    ASSERT_TRUE(ReportPhase("m", 1, pb::TRAINING_PHASE_IDLE).ok());
    const pb::Session writer = Open("m");
    ASSERT_TRUE(WriteFloats(writer.id(), "norm.w", Seeded("norm.w", 10)).ok());
    EXPECT_TRUE(Close(writer.id()).written_back());
    TearDown();
  }
}

TEST_F(PhaseInterlockTest,
       OptimizerStepMovesGenerationsAndStaleWritebackAborts) {
  StartServer(kRanks);
  CreateSeeded("m");
  // Step 1 on two ranks: one optimizer step moves every unit's generation
  // once, not once per rank.
  ASSERT_TRUE(WalkPhases("m", 0, FullStep(), /*step=*/1).ok());
  ASSERT_TRUE(WalkPhases("m", 1, FullStep(), /*step=*/1).ok());
  pb::ReportPhaseResponse report;
  ASSERT_TRUE(
      ReportPhase("m", 0, pb::TRAINING_PHASE_IDLE, std::nullopt, &report).ok());
  ASSERT_EQ(report.generations_size(), 3);
  for (const pb::UnitGeneration& unit : report.generations()) {
    EXPECT_EQ(unit.generation(), 1u) << unit.unit();
    EXPECT_EQ(unit.external_writes(), 0u) << unit.unit();
  }
  // norm.w lives on rank 3 only: rank 0 may be mid-step while a writer holds
  // it, and its optimizer step changes the shards under the writer.
  ASSERT_TRUE(
      WalkPhases("m", 0,
                 {pb::TRAINING_PHASE_FORWARD, pb::TRAINING_PHASE_BETWEEN,
                  pb::TRAINING_PHASE_BACKWARD},
                 /*step=*/2)
          .ok());
  const pb::Session writer = Open("m", ParamScope({"norm.w"}));
  ASSERT_EQ(writer.gathered_generations_size(), 1);
  EXPECT_EQ(writer.gathered_generations(0).generation(), 1u);
  const std::vector<float> edited = Scaled(Seeded("norm.w", 10), -1);
  ASSERT_TRUE(WriteFloats(writer.id(), "norm.w", edited).ok());
  ASSERT_TRUE(
      WalkPhases("m", 0,
                 {pb::TRAINING_PHASE_OPTIMIZER, pb::TRAINING_PHASE_IDLE},
                 /*step=*/2)
          .ok());
  pb::CloseSessionResponse closed;
  EXPECT_CODE(TryClose(writer.id(), false, false, &closed), ABORTED);
  // The session stays open for the caller to decide.
  EXPECT_EQ(Read(writer.id(), "norm.w"), edited);
  ASSERT_TRUE(TryClose(writer.id(), false, /*force=*/true, &closed).ok());
  EXPECT_TRUE(closed.written_back());
  ASSERT_EQ(closed.generations_size(), 1);
  EXPECT_EQ(closed.generations(0).generation(), 3u);
  const pb::Session check = Open("m", ReadOnly());
  EXPECT_EQ(Read(check.id(), "norm.w"), edited);
}

}  // namespace
}  // namespace summon::tests
