// The trainer contract's liveness (R17) over gRPC: a SIGKILLed trainer's
// ranks return to IDLE within its lease; one live incarnation per rank; a
// takeover after a lapse; phases and leases across a daemon restart; delete
// refused while a trainer is attached and, with force, detaching it loudly.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/faults/child_process.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

constexpr int kRanks = 2;

class TrainerLeaseTest : public SummondTest {
 protected:
  grpc::Status Attach(const std::string& model, std::vector<int> ranks,
                      const std::string& incarnation, uint32_t lease_seconds,
                      pb::AttachResponse* response) {
    pb::AttachRequest request;
    request.set_model(model);
    for (int rank : ranks) request.add_ranks(rank);
    request.set_incarnation(incarnation);
    request.set_lease_seconds(lease_seconds);
    grpc::ClientContext context;
    return trainer_->Attach(&context, request, response);
  }
  grpc::Status Heartbeat(const std::string& lease_id) {
    pb::TrainerHeartbeatRequest request;
    request.set_lease_id(lease_id);
    pb::TrainerHeartbeatResponse response;
    grpc::ClientContext context;
    return trainer_->Heartbeat(&context, request, &response);
  }
  grpc::Status Delete(const std::string& model, bool force) {
    pb::DeleteModelRequest request;
    request.set_model(model);
    request.set_force(force);
    pb::DeleteModelResponse response;
    grpc::ClientContext context;
    return summon_->DeleteModel(&context, request, &response);
  }
  pb::TrainingPhase PhaseOf(const std::string& model, int rank) {
    return Describe(model).ranks(rank).phase();
  }
};

TEST_F(TrainerLeaseTest, KilledTrainerInForwardReturnsItsRanksToIdle) {
  StartServer(kRanks);
  CreateSeeded("m");
  absl::StatusOr<ChildProcess> trainer =
      ChildProcess::Spawn({{"tests/trainer_process", server_->address(), "m",
                            "t-killed", "1", "0", "1"},
                           {},
                           "",
                           /*pipe_stdout=*/true});
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<std::string> line = trainer->ReadLine(absl::Seconds(20));
  ASSERT_TRUE(line.ok()) << line.status();
  ASSERT_TRUE(absl::StartsWith(*line, "forward ")) << *line;
  EXPECT_EQ(PhaseOf("m", 0), pb::TRAINING_PHASE_FORWARD);
  EXPECT_EQ(Describe("m").ranks(1).trainer_incarnation(), "t-killed");
  // Alive: its heartbeats keep the ranks in FORWARD past the lease.
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(PhaseOf("m", 1), pb::TRAINING_PHASE_FORWARD);
  pb::Session refused;
  EXPECT_CODE(TryOpen("m", ReadOnly(), &refused), FAILED_PRECONDITION);

  ASSERT_TRUE(trainer->Kill().ok());
  const absl::Time killed = absl::Now();
  while (PhaseOf("m", 0) != pb::TRAINING_PHASE_IDLE &&
         absl::Now() - killed < absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const absl::Duration noticed = absl::Now() - killed;
  std::printf("killed trainer's ranks back to IDLE after %s (lease 1s)\n",
              absl::FormatDuration(noticed).c_str());
  // The bound: the 1 s lease plus the reaper's 100 ms, with slack for a
  // loaded machine.
  EXPECT_LE(noticed, absl::Milliseconds(2500)) << noticed;
  const pb::Model model = Describe("m");
  for (int rank : {0, 1}) {
    EXPECT_EQ(model.ranks(rank).phase(), pb::TRAINING_PHASE_IDLE);
    EXPECT_EQ(model.ranks(rank).trainer_incarnation(), "");
    EXPECT_EQ(model.ranks(rank).last_event(),
              "lease of trainer 't-killed' lapsed (no heartbeat for 1s) in "
              "FORWARD at step 1; rank returned to IDLE");
  }
  const pb::Session session = Open("m", ModuleScope("layers.1"));
  EXPECT_EQ(Read(session.id(), "layers.1.w"), Seeded("layers.1.w", 35));
  ASSERT_TRUE(
      WriteFloats(session.id(), "layers.1.w", Seeded("layers.1.w", 35)).ok());
  EXPECT_TRUE(Close(session.id()).written_back());
}

TEST_F(TrainerLeaseTest, SecondIncarnationRefusedWhileFirstLivesThenTakesOver) {
  StartServer(kRanks);
  CreateSeeded("m");
  pb::AttachResponse first;
  ASSERT_TRUE(Attach("m", {0, 1}, "t-1", 2, &first).ok());
  EXPECT_FALSE(first.resumed());
  ASSERT_TRUE(
      WalkPhases("m", 0, {pb::TRAINING_PHASE_FORWARD}, 4, first.lease_id())
          .ok());
  pb::AttachResponse second;
  grpc::Status refused = Attach("m", {1}, "t-2", 1, &second);
  EXPECT_CODE(refused, ALREADY_EXISTS);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "'t-1'"))
      << refused.error_message();
  // Reports must carry the holder's lease.
  EXPECT_CODE(ReportPhase("m", 1, pb::TRAINING_PHASE_FORWARD),
              FAILED_PRECONDITION);
  // The same incarnation attaching again resumes its lease and phases.
  pb::AttachResponse again;
  ASSERT_TRUE(Attach("m", {1, 0}, "t-1", 2, &again).ok());
  EXPECT_TRUE(again.resumed());
  EXPECT_EQ(again.lease_id(), first.lease_id());
  ASSERT_EQ(again.ranks_size(), 2);
  EXPECT_EQ(again.ranks(0).phase(), pb::TRAINING_PHASE_FORWARD);
  EXPECT_EQ(again.ranks(0).step(), 4);
  // t-1 stops heartbeating: after the lapse t-2 takes over, ranks IDLE.
  absl::SleepFor(absl::Milliseconds(2300));
  ASSERT_TRUE(Attach("m", {0, 1}, "t-2", 5, &second).ok());
  EXPECT_EQ(second.previous_incarnation(), "t-1");
  EXPECT_EQ(second.ranks(0).phase(), pb::TRAINING_PHASE_IDLE);
  grpc::Status ended = Heartbeat(first.lease_id());
  EXPECT_CODE(ended, FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(ended.error_message(), "lapsed"))
      << ended.error_message();
  EXPECT_TRUE(
      WalkPhases("m", 0, FullStep(), std::nullopt, second.lease_id()).ok());
}

TEST_F(TrainerLeaseTest, RestartMidForwardKeepsForwardUntilReattach) {
  StartServer(kRanks);
  CreateSeeded("m");
  pb::AttachResponse attached;
  ASSERT_TRUE(Attach("m", {0, 1}, "t-1", 2, &attached).ok());
  for (int rank : {0, 1}) {
    ASSERT_TRUE(
        WalkPhases("m", rank,
                   {pb::TRAINING_PHASE_FORWARD, pb::TRAINING_PHASE_BETWEEN}, 7,
                   attached.lease_id())
            .ok());
  }
  ASSERT_TRUE(
      WalkPhases("m", 0, {pb::TRAINING_PHASE_BACKWARD}, 7, attached.lease_id())
          .ok());
  RestartServer();
  pb::Model model = Describe("m");
  EXPECT_EQ(model.ranks(0).phase(), pb::TRAINING_PHASE_BACKWARD);
  EXPECT_EQ(model.ranks(1).phase(), pb::TRAINING_PHASE_BETWEEN);
  EXPECT_EQ(model.ranks(0).step(), 7);
  EXPECT_EQ(model.ranks(0).trainer_incarnation(), "t-1");
  // R24: the phases recovered from trainers.json may be stale (the trainer
  // may have stepped on while summond was down), so the interlock is unknown
  // and an open is refused as "retry later" until the trainer re-reports.
  pb::Session refused;
  const grpc::Status unknown = TryOpen("m", ReadOnly(), &refused);
  EXPECT_CODE(unknown, UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(unknown.error_message(),
                                "training interlock of model 'm' is unknown"))
      << unknown.error_message();
  // The trainer re-attaches and finishes its step where it was.
  pb::AttachResponse resumed;
  ASSERT_TRUE(Attach("m", {0, 1}, "t-1", 2, &resumed).ok());
  EXPECT_TRUE(resumed.resumed());
  EXPECT_EQ(resumed.lease_id(), attached.lease_id());
  EXPECT_EQ(resumed.ranks(0).phase(), pb::TRAINING_PHASE_BACKWARD);
  ASSERT_TRUE(
      WalkPhases("m", 0,
                 {pb::TRAINING_PHASE_OPTIMIZER, pb::TRAINING_PHASE_IDLE}, 7,
                 resumed.lease_id())
          .ok());
  // Rank 1's trainer never comes back: after another restart its lease
  // lapses and the rank returns to IDLE, recorded.
  RestartServer();
  EXPECT_EQ(PhaseOf("m", 1), pb::TRAINING_PHASE_BETWEEN);
  absl::SleepFor(absl::Milliseconds(3000));
  model = Describe("m");
  EXPECT_EQ(model.ranks(1).phase(), pb::TRAINING_PHASE_IDLE);
  EXPECT_TRUE(absl::StrContains(model.ranks(1).last_event(), "BETWEEN"))
      << model.ranks(1).last_event();
  EXPECT_TRUE(Open("m", ReadOnly()).id().size() > 0);
}

TEST_F(TrainerLeaseTest, DeleteRefusedWhileAttachedAndForceDetachesLoudly) {
  StartServer(kRanks);
  CreateSeeded("m");
  pb::AttachResponse attached;
  ASSERT_TRUE(Attach("m", {0, 1}, "t-1", 10, &attached).ok());
  grpc::Status refused = Delete("m", false);
  EXPECT_CODE(refused, FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(refused.error_message(), "'t-1'"));
  ASSERT_TRUE(
      WalkPhases("m", 0, {pb::TRAINING_PHASE_FORWARD}, 1, attached.lease_id())
          .ok());
  const std::string before = Checksum("m").DebugString();
  // R15: not even force deletes under a running forward.
  EXPECT_CODE(Delete("m", true), FAILED_PRECONDITION);
  EXPECT_EQ(Checksum("m").DebugString(), before);
  ASSERT_TRUE(
      WalkPhases("m", 0, {pb::TRAINING_PHASE_IDLE}, 1, attached.lease_id())
          .ok());
  ASSERT_TRUE(Delete("m", true).ok());
  grpc::Status gone = Heartbeat(attached.lease_id());
  EXPECT_CODE(gone, FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(gone.error_message(),
                                "model deleted with force by 'anonymous'"))
      << gone.error_message();
}

}  // namespace
}  // namespace summon::tests
