// The decision log's lost answers: a commit decision whose answer was lost
// counts only if it was recorded, and an attempt found not recorded is
// sealed aborted in etcd before anything is dropped, so that its
// transaction, applied late, decides nothing; abort records go in a later
// epoch.

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "core/session_state.h"
#include "gtest/gtest.h"
#include "server/comm/local_communicator.h"
#include "server/runtime/node_runtime.h"
#include "server/session/local_node_ops.h"
#include "server/session/session_manager.h"
#include "server/testing/answer_losing_coordinator.h"
#include "server/testing/session_manager_fixture.h"
#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"

namespace summon::server {
namespace {

// etcd applied the decision but the leader heard UNAVAILABLE (it was paused
// past the call's deadline): the record is read back, so the writeback
// commits here as it will wherever a later leader completes it. Dropping
// the staged slices instead left this node's ranks behind the others' (a
// half-applied writeback, found by tests/coordinator's fault scenarios).
class LostDecisionTest : public SessionManagerTest {
 protected:
  // A session of a model on `coordinator_` with layers.0.w doubled, to be
  // closed while the decision's put is lost as `loss` says.
  // `puts`: as AnswerLosingCoordinator::set_loss.
  SessionInfo EditedSession(AnswerLosingCoordinator::Loss loss, int puts = -1) {
    Start(2, core::Strategy::kFullShard, {}, 0, 64, &coordinator_);
    coordinator_.set_loss(loss, puts);
    SessionInfo info = Open(Scoped("layers.0"));
    WriteAll(info.id, "layers.0.w", Doubled(Seeded("layers.0.w", 25)));
    return info;
  }

  // The state, the bytes of layers.0.w and the generation of layers.0 as a
  // reader sees them.
  void ExpectUnchanged(const std::string& id) {
    auto still = sessions_->Get(id, "alice");
    ASSERT_TRUE(still.ok()) << still.status();
    EXPECT_EQ(still->state, core::SessionState::kOpen);
    SessionOptions read_only;
    read_only.writeback = false;
    SessionInfo check = Open(read_only);
    EXPECT_EQ(Read(check.id, "layers.0.w"), Seeded("layers.0.w", 25));
    EXPECT_EQ(check.gathered_generations.at("layers.0"), 0u);
    ASSERT_TRUE(sessions_->Close(check.id, false, false, "alice").ok());
  }

  // The close of `id` with the read-back cut off too: the outcome is
  // unknown, and the answer says so.
  void ExpectUnknownClose(const std::string& id) {
    coordinator_.set_reads_lost(true);
    const absl::Status unknown =
        sessions_->Close(id, false, false, "alice").status();
    ASSERT_EQ(unknown.code(), absl::StatusCode::kUnavailable) << unknown;
    EXPECT_NE(unknown.message().find("may or may not have been decided"),
              absl::string_view::npos)
        << unknown;
  }

  // The close of `id` writes the session back: committed, the edit and
  // generation 1 seen by a reader. A retried close is a new attempt, not
  // refused by the first one's seal.
  void ExpectCloseWritesBack(const std::string& id) {
    auto closed = sessions_->Close(id, false, false, "alice");
    ASSERT_TRUE(closed.ok()) << closed.status();
    EXPECT_TRUE(closed->written_back);
    EXPECT_EQ(closed->generations.at("layers.0"), 1u);
    SessionOptions read_only;
    read_only.writeback = false;
    SessionInfo check = Open(read_only);
    EXPECT_EQ(Read(check.id, "layers.0.w"), Doubled(Seeded("layers.0.w", 25)));
    EXPECT_EQ(check.gathered_generations.at("layers.0"), 1u);
  }

  AnswerLosingCoordinator coordinator_{"commits/"};
};

TEST_F(LostDecisionTest, ADecisionRecordedWithItsAnswerLostCommits) {
  SessionInfo info = EditedSession(AnswerLosingCoordinator::Loss::kAnswer);
  ExpectCloseWritesBack(info.id);
}

// Not applied (and its attempt sealed, the seal answered): not decided,
// nothing committed, the session stays open and a later close (the
// coordinator answering again) writes it back.
TEST_F(LostDecisionTest, ADecisionNeverRecordedCommitsNothing) {
  SessionInfo info =
      EditedSession(AnswerLosingCoordinator::Loss::kRequest, /*puts=*/1);
  auto refused = sessions_->Close(info.id, false, false, "alice");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message(),
            absl::StrCat("the writeback of session ", info.id,
                         " was not decided, nothing was committed: "
                         "coordinator has no quorum: txn: Deadline Exceeded"));
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo check = Open(read_only);
  EXPECT_EQ(Read(check.id, "layers.0.w"), Seeded("layers.0.w", 25));
  EXPECT_EQ(check.gathered_generations.at("layers.0"), 0u);
  coordinator_.set_loss(AnswerLosingCoordinator::Loss::kNone);
  auto closed = sessions_->Close(info.id, false, false, "alice");
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(closed->generations.at("layers.0"), 1u);
}

// Neither the decision's answer nor its read-back comes (the leader cut off
// from etcd): the outcome is unknown, the session ends saying so, nothing
// changes yet, and every node keeps its staged slices until the coordinator
// answers; then the recorded decision commits.
TEST_F(LostDecisionTest, AnUnknownDecisionCommitsOnceItIsFoundRecorded) {
  SessionInfo info = EditedSession(AnswerLosingCoordinator::Loss::kAnswer);
  coordinator_.set_reads_lost(true);
  auto unknown = sessions_->Close(info.id, false, false, "alice");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(unknown.status().message(),
            absl::StrCat("the writeback of session ", info.id,
                         " may or may not have been decided (the coordinator "
                         "did not answer the decision (coordinator has no "
                         "quorum: txn: Deadline Exceeded) nor its read-back "
                         "(etcd: connection refused)); it completes on every "
                         "rank or on none once the coordinator answers: read "
                         "the tensors to see which"));
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo before = Open(read_only);
  EXPECT_EQ(Read(before.id, "layers.0.w"), Seeded("layers.0.w", 25));
  ASSERT_TRUE(sessions_->Close(before.id, false, false, "alice").ok());
  coordinator_.set_loss(AnswerLosingCoordinator::Loss::kNone);
  coordinator_.set_reads_lost(false);
  // The reaper (every 200 ms) reads the record and commits.
  std::vector<float> now;
  for (int tick = 0; tick < 50; ++tick) {
    absl::SleepFor(absl::Milliseconds(100));
    SessionInfo check = Open(read_only);
    now = Read(check.id, "layers.0.w");
    ASSERT_TRUE(sessions_->Close(check.id, false, false, "alice").ok());
    if (now != Seeded("layers.0.w", 25)) break;
  }
  EXPECT_EQ(now, Doubled(Seeded("layers.0.w", 25)));
}

// The same, with the decision never applied: once the coordinator answers
// that there is no record, every node drops the staged slices, and the
// units take a new writeback (no PREPARE refused by what was left staged).
TEST_F(LostDecisionTest, AnUnknownDecisionFoundUnrecordedIsDropped) {
  SessionInfo info = EditedSession(AnswerLosingCoordinator::Loss::kRequest);
  ASSERT_NO_FATAL_FAILURE(ExpectUnknownClose(info.id));
  coordinator_.set_loss(AnswerLosingCoordinator::Loss::kNone);
  coordinator_.set_reads_lost(false);
  absl::StatusOr<CloseResult> closed;
  for (int tick = 0; tick < 50; ++tick) {
    absl::SleepFor(absl::Milliseconds(100));
    SessionInfo again = Open(Scoped("layers.0"));
    WriteAll(again.id, "layers.0.b", Doubled(Seeded("layers.0.b", 5)));
    closed = sessions_->Close(again.id, false, false, "alice");
    if (closed.ok()) break;
    // Refused while the slices stay staged: ends, and is tried again.
    ASSERT_TRUE(sessions_->Close(again.id, true, false, "alice").ok());
  }
  ASSERT_TRUE(closed.ok()) << closed.status();
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo check = Open(read_only);
  EXPECT_EQ(Read(check.id, "layers.0.w"), Seeded("layers.0.w", 25));
  EXPECT_EQ(Read(check.id, "layers.0.b"), Doubled(Seeded("layers.0.b", 5)));
  EXPECT_EQ(check.gathered_generations.at("layers.0"), 1u);
}

// The seal's record of an attempt: commits/<session>/<attempt>, attempt
// "<epoch>-<PREPARE's number>" (epoch 0: this fixture's single node). The
// session's open is gathered under number 1, its PREPARE takes 2.
std::string SealKey(const std::string& id) {
  return absl::StrCat("commits/", id, "/0-2");
}
std::string SealValue(const std::string& id) {
  return absl::StrCat(R"({"aborted":true,"attempt":"0-2","epoch":0,)",
                      R"("session_id":")", id, R"("})");
}

// The decision's transaction is held (a proposal in flight through a change
// of etcd's leader) and the read-back finds nothing: the attempt is sealed
// aborted before any slice is dropped, so the transaction, applied late,
// finds its key taken and decides nothing; the session stays open and a
// retried close (another attempt, its own record) writes back. Without the
// seal the late transaction records a COMMIT for a writeback whose slices
// were dropped, which a later formation completes wherever they were kept.
TEST_F(LostDecisionTest, ALateDecisionAfterTheSealDecidesNothing) {
  SessionInfo info = EditedSession(AnswerLosingCoordinator::Loss::kHold);
  auto refused = sessions_->Close(info.id, false, false, "alice");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message(),
            absl::StrCat("the writeback of session ", info.id,
                         " was not decided, nothing was committed: "
                         "coordinator has no quorum: txn: Deadline Exceeded"));
  auto listed = coordinator_.Listed();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, (std::map<std::string, std::string>{
                         {SealKey(info.id), SealValue(info.id)}}));
  const absl::Status late = coordinator_.ApplyHeld();
  EXPECT_EQ(late.code(), absl::StatusCode::kAlreadyExists) << late;
  EXPECT_EQ(late.message(), absl::StrCat(SealKey(info.id), " is already set"));
  // A formation now finds no decision to complete.
  ASSERT_TRUE(sessions_->ResolvePendingCommits().ok());
  ExpectUnchanged(info.id);
  ExpectCloseWritesBack(info.id);
}

// The held transaction lands between the read-back (absent) and the seal:
// the seal finds the decision there, so the writeback was decided and
// commits, as when the answer alone was lost.
TEST_F(LostDecisionTest, ADecisionLandingBeforeItsSealCommits) {
  SessionInfo info =
      EditedSession(AnswerLosingCoordinator::Loss::kHoldUntilNextPut);
  ExpectCloseWritesBack(info.id);
  EXPECT_EQ(coordinator_.ApplyHeld().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Unknown first (neither the decision nor its read-back answered), then the
// reaper's read-back finds nothing: the attempt is sealed, then every
// node's slices are dropped; the transaction applied late decides nothing.
TEST_F(LostDecisionTest, AnUnknownDecisionFoundAbsentIsSealedThenDropped) {
  SessionInfo info = EditedSession(AnswerLosingCoordinator::Loss::kHold);
  ASSERT_NO_FATAL_FAILURE(ExpectUnknownClose(info.id));
  auto listed = coordinator_.Listed();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->empty());
  coordinator_.set_reads_lost(false);
  // The reaper (every 200 ms) reads, seals, drops.
  for (int tick = 0; tick < 50 && listed->empty(); ++tick) {
    absl::SleepFor(absl::Milliseconds(100));
    listed = coordinator_.Listed();
    ASSERT_TRUE(listed.ok()) << listed.status();
  }
  EXPECT_EQ(*listed, (std::map<std::string, std::string>{
                         {SealKey(info.id), SealValue(info.id)}}));
  EXPECT_EQ(coordinator_.ApplyHeld().code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<CloseResult> closed;
  for (int tick = 0; tick < 50; ++tick) {
    SessionInfo again = Open(Scoped("layers.0"));
    WriteAll(again.id, "layers.0.b", Doubled(Seeded("layers.0.b", 5)));
    closed = sessions_->Close(again.id, false, false, "alice");
    if (closed.ok()) break;
    // Refused while the slices stay staged: ends, and is tried again.
    ASSERT_TRUE(sessions_->Close(again.id, true, false, "alice").ok());
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(closed.ok()) << closed.status();
  SessionOptions read_only;
  read_only.writeback = false;
  SessionInfo check = Open(read_only);
  EXPECT_EQ(Read(check.id, "layers.0.w"), Seeded("layers.0.w", 25));
  EXPECT_EQ(Read(check.id, "layers.0.b"), Doubled(Seeded("layers.0.b", 5)));
  EXPECT_EQ(check.gathered_generations.at("layers.0"), 1u);
}

// The seal's own put gets no answer either: nobody can tell yet whether the
// decision will land, so the outcome is unknown and every slice is kept.
TEST_F(LostDecisionTest, AnUnansweredSealLeavesTheDecisionUnknown) {
  SessionInfo info = EditedSession(AnswerLosingCoordinator::Loss::kRequest);
  const absl::Status unknown =
      sessions_->Close(info.id, false, false, "alice").status();
  ASSERT_EQ(unknown.code(), absl::StatusCode::kUnavailable) << unknown;
  EXPECT_EQ(unknown.message(),
            absl::StrCat("the writeback of session ", info.id,
                         " may or may not have been decided (the coordinator "
                         "did not answer the decision (coordinator has no "
                         "quorum: txn: Deadline Exceeded) nor its abort "
                         "record (coordinator has no quorum: txn: Deadline "
                         "Exceeded)); it completes on every rank or on none "
                         "once the coordinator answers: read the tensors to "
                         "see which"));
}

// A formation lists every record under commits/: an abort record is no
// decision (nothing commits) and no malformed one either; it stays while
// the cluster is in its epoch (ClearSeals).
TEST_F(LostDecisionTest, RecoverySkipsAbortRecords) {
  SessionInfo info = EditedSession(AnswerLosingCoordinator::Loss::kHold);
  ASSERT_FALSE(sessions_->Close(info.id, false, false, "alice").ok());
  auto log = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(128);
  spdlog::default_logger()->sinks().push_back(log);
  const absl::Status formed = sessions_->OnClusterFormed();
  spdlog::default_logger()->sinks().pop_back();
  ASSERT_TRUE(formed.ok()) << formed;
  for (const std::string& line : log->last_formatted()) {
    EXPECT_EQ(line.find("malformed"), std::string::npos) << line;
  }
  auto listed = coordinator_.Listed();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, (std::map<std::string, std::string>{
                         {SealKey(info.id), SealValue(info.id)}}));
  ExpectUnchanged(info.id);
  ExpectCloseWritesBack(info.id);
}

// One node's runtime under a cluster epoch the test sets (the
// coordinator's), as a leader's node ops report it.
class EpochNodeOps : public LocalNodeOps {
 public:
  using LocalNodeOps::LocalNodeOps;
  uint64_t Epoch() const override { return epoch; }
  std::atomic<uint64_t> epoch{0};
};

// An abort record stays through formations of its own epoch (deleted, it
// would free the key for the late transaction, whose fence still passes)
// and goes at the first formation of a later epoch, where that fence
// refuses the late transaction for good.
TEST_F(LostDecisionTest, AbortRecordsGoInALaterEpoch) {
  Start(2, core::Strategy::kFullShard, {}, 0, 64, &coordinator_);
  LocalCommunicator communicator;
  NodeRuntime runtime(0, registry_.get(), &communicator, absl::Seconds(30),
                      nullptr);
  EpochNodeOps ops(&runtime);
  auto epoch = coordinator_.LeaderEpoch();
  ASSERT_TRUE(epoch.ok()) << epoch.status();
  ops.epoch = *epoch;
  SessionManager::Options options;
  options.node_ops = &ops;
  options.coordinator = &coordinator_;
  options.clock = [this] { return now_; };
  sessions_ = std::make_unique<SessionManager>(registry_.get(), options);
  coordinator_.set_loss(AnswerLosingCoordinator::Loss::kHold);
  SessionInfo info = Open(Scoped("layers.0"));
  WriteAll(info.id, "layers.0.w", Doubled(Seeded("layers.0.w", 25)));
  ASSERT_EQ(sessions_->Close(info.id, false, false, "alice").status().code(),
            absl::StatusCode::kUnavailable);
  const std::string key = absl::StrCat("commits/", info.id, "/", *epoch, "-2");
  const std::string seal =
      absl::StrCat(R"({"aborted":true,"attempt":")", *epoch, R"(-2","epoch":)",
                   *epoch, R"(,"session_id":")", info.id, R"("})");
  ASSERT_TRUE(sessions_->OnClusterFormed().ok());
  auto listed = coordinator_.Listed();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(*listed, (std::map<std::string, std::string>{{key, seal}}));
  auto next = coordinator_.NextEpoch();
  ASSERT_TRUE(next.ok()) << next.status();
  ops.epoch = *next;
  ASSERT_TRUE(sessions_->OnClusterFormed().ok());
  listed = coordinator_.Listed();
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->empty());
  const absl::Status late = coordinator_.ApplyHeld();
  EXPECT_EQ(late, absl::AbortedError(absl::StrCat(
                      "epoch ", *epoch,
                      " was deposed: the cluster is at epoch ", *next)));
  sessions_.reset();  // Before the node ops it uses.
}

}  // namespace
}  // namespace summon::server
