// The training-phase interlock: opens refused during a step (R1), illegal
// phase moves refused (R16), a move into a step waiting for or refused by a
// writable session (R3), writable opens refused between forward and
// backward (R4).

#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/session_rules.h"
#include "gtest/gtest.h"
#include "server/session/session_manager.h"
#include "server/testing/session_manager_fixture.h"

namespace summon::server {
namespace {

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

}  // namespace
}  // namespace summon::server
