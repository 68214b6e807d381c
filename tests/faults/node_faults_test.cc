// Node failures on a 3-node x 2-rank cluster (issue 5, scenarios 1, 2, 3
// and 5): a follower SIGKILLed during a gather, while a session is open,
// between PREPARE and COMMIT and during COMMIT; a follower frozen (SIGSTOP)
// past the failure timeout, and while the leader's rank steps (R24); the
// leader SIGKILLed with sessions open and after it recorded a commit
// decision; every daemon killed and restarted. Each checks that the calls a
// failure touches fail within the bound naming the failed node, and every
// rank's shards: as before the scenario, or, when the leader had recorded
// the COMMIT decision, the written-back values on every rank once the
// failed node is back. Never a mix.

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/faults/fault_harness.h"

namespace summon::tests {
namespace {

namespace health = ::grpc::health::v1;

// The close's message when the leader had recorded COMMIT
// (server/session_manager.cc).
constexpr char kDecided[] = "was decided";

// Waits until `node` itself reports NOT_SERVING: it noticed the failure.
void ExpectNoticed(const FaultCluster& cluster, int node,
                   absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  absl::StatusOr<health::HealthCheckResponse::ServingStatus> status;
  while (absl::Now() < give_up) {
    status = cluster.Health(node);
    if (status.ok() && *status == health::HealthCheckResponse::NOT_SERVING) {
      return;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ADD_FAILURE() << "node " << node << " still serving "
                << absl::FormatDuration(timeout) << " after the failure";
}

TEST_F(FaultHarnessTest, S1aFollowerKilledDuringGather) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({{kVictim, "gather.before_exchange"}}));
  v1::SessionOptions options;
  options.set_with_grads(true);
  const absl::Time started = absl::Now();
  const absl::StatusOr<v1::Session> opened =
      node(kSurvivor).OpenSession(kModel, options);
  const absl::Duration detect = absl::Now() - started;
  EXPECT_FALSE(opened.ok()) << "the gather cannot finish without node 2";
  ExpectNamesNode(opened.status(), kVictim, "the open");
  EXPECT_LE(detect, DetectBound());
  ExpectDiedAtFaultPoint(kVictim);
  const absl::Duration reform = Restart(kVictim);

  absl::StatusOr<v1::ListSessionsResponse> sessions =
      node(kLeader).ListSessions(kModel);
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  EXPECT_EQ(sessions->sessions_size(), 0) << "the failed open left a session";
  Report({"1a SIGKILL follower in gather",
          "open UNAVAILABLE naming node 2; shards as before",
          Brief(opened.status()),
          ShardsHold(known(), known(), "after the failed gather"), detect,
          reform});
}

TEST_F(FaultHarnessTest, S1bFollowerKilledWhileSessionOpen) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const v1::Session session = OpenWritable(kSurvivor);
  const ModelValues edited = Edit(kVictim, session.id(), 101);
  ASSERT_TRUE(cluster().Kill(kVictim).ok());
  const absl::Time killed = absl::Now();
  const absl::Duration poll = DetectBound() + absl::Seconds(5);
  const Detection leader = PollUntilFailure(
      [&] { return node(kLeader).GetSession(session.id()).status(); }, killed,
      poll);
  const Detection survivor = PollUntilFailure(
      [&] { return node(kSurvivor).GetSession(session.id()).status(); }, killed,
      poll);
  ExpectNamesNode(leader.status, kVictim, "GetSession through the leader");
  ExpectNamesNode(survivor.status, kVictim, "GetSession through node 1");
  EXPECT_LE(leader.after, DetectBound());
  EXPECT_LE(survivor.after, DetectBound());
  // Once the surviving follower noticed by itself, its own answers must
  // name the failed node too, and the session cannot be written back.
  ExpectNoticed(cluster(), kSurvivor, DetectBound());
  ExpectNamesNode(node(kSurvivor).GetSession(session.id()).status(), kVictim,
                  "GetSession through node 1 after it noticed");
  const absl::StatusOr<v1::CloseSessionResponse> closed =
      node(kSurvivor).CloseSession(session.id());
  EXPECT_FALSE(closed.ok()) << "a writeback without node 2";
  ExpectNamesNode(closed.status(), kVictim, "the close");

  // Re-formed means working: the first call after every node reports
  // SERVING reaches every node.
  const absl::Time restarted = absl::Now();
  ASSERT_TRUE(cluster().StartNode(kVictim).ok());
  const absl::Status serving = cluster().WaitServing(absl::Seconds(20));
  ASSERT_TRUE(serving.ok()) << serving;
  const absl::Status first = node(kLeader).ModelChecksum(kModel).status();
  EXPECT_TRUE(first.ok())
      << "every node SERVING, but the first call after the re-form failed: "
      << first;
  WaitUsable();
  const absl::Duration reform = absl::Now() - restarted;
  // R25: the leader aborted it and says so.
  const absl::Status ended = node(kLeader).GetSession(session.id()).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(ended) &&
              absl::StrContains(ended.message(), "aborted by node failure"))
      << "the session survived the failure: " << ended;
  Report({"1b SIGKILL follower, session OPEN",
          "calls UNAVAILABLE naming node 2; session aborted; shards as before",
          Brief(survivor.status),
          ShardsHold(known(), edited, "after the open session was aborted"),
          std::max(leader.after, survivor.after), reform});
}

TEST_F(FaultHarnessTest, S1cFollowerKilledBetweenPrepareAndCommit) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({{kVictim, "prepare.after_stage"}}));
  const v1::Session session = OpenWritable(kLeader);
  const ModelValues edited = Edit(kSurvivor, session.id(), 102);
  const absl::Time started = absl::Now();
  const absl::StatusOr<v1::CloseSessionResponse> closed =
      node(kSurvivor).CloseSession(session.id());
  const absl::Duration detect = absl::Now() - started;
  EXPECT_FALSE(closed.ok()) << "COMMIT without node 2's vote";
  ExpectNamesNode(closed.status(), kVictim, "the close");
  EXPECT_FALSE(absl::StrContains(closed.status().message(), kDecided))
      << "the leader decided without every vote: " << closed.status();
  EXPECT_LE(detect, DetectBound());
  ExpectDiedAtFaultPoint(kVictim);
  const absl::Duration reform = Restart(kVictim);
  // Node 2's staged data survived in shared memory; undecided, it is
  // dropped, never applied.
  Report({"1c SIGKILL follower after PREPARE",
          "close UNAVAILABLE naming node 2, undecided; shards as before",
          Brief(closed.status()),
          ShardsHold(known(), edited, "after a failure before the decision"),
          detect, reform});
}

TEST_F(FaultHarnessTest, S1dFollowerKilledDuringCommit) {
  struct CommitFault {
    const char* point;
    const char* scenario;
    uint64_t seed;
  };
  for (const CommitFault& fault :
       {CommitFault{"commit.before_apply",
                    "1d SIGKILL follower before applying COMMIT", 103},
        CommitFault{"commit.after_apply",
                    "1e SIGKILL follower after applying COMMIT", 104}}) {
    SCOPED_TRACE(fault.point);
    ASSERT_NO_FATAL_FAILURE(StartCluster({{kVictim, fault.point}}));
    const v1::Session session = OpenWritable(kSurvivor);
    const ModelValues edited = Edit(kLeader, session.id(), fault.seed);
    const absl::Time started = absl::Now();
    const absl::StatusOr<v1::CloseSessionResponse> closed =
        node(kLeader).CloseSession(session.id());
    const absl::Duration detect = absl::Now() - started;
    EXPECT_FALSE(closed.ok()) << "node 2 never acknowledged the COMMIT";
    ExpectNamesNode(closed.status(), kVictim, "the close");
    EXPECT_TRUE(absl::StrContains(closed.status().message(), kDecided))
        << closed.status();
    EXPECT_LE(detect, DetectBound());
    ExpectDiedAtFaultPoint(kVictim);
    const absl::Duration reform = Restart(kVictim);
    Report({fault.scenario,
            "decided: writeback on every rank once node 2 is back",
            Brief(closed.status()),
            ShardsHold(edited, known(), "after node 2 came back"), detect,
            reform});
  }
}

TEST_F(FaultHarnessTest, S2FollowerStoppedPastFailureTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const v1::Session session = OpenWritable(kLeader);
  const ModelValues edited = Edit(kSurvivor, session.id(), 201);
  // Frozen long enough that the close, whose PREPARE waits on node 2, must
  // have been answered by the time it resumes.
  const absl::Duration frozen = DetectBound() + absl::Milliseconds(500);
  ASSERT_TRUE(cluster().Pause(kVictim).ok());
  const absl::Time paused = absl::Now();
  absl::StatusOr<v1::CloseSessionResponse> closed;
  absl::Time answered;
  std::thread closer([&] {
    closed = node(kLeader).CloseSession(session.id());
    answered = absl::Now();
  });
  absl::SleepFor(frozen);
  EXPECT_TRUE(cluster().Resume(kVictim).ok());  // The closer must be joined.
  const absl::Time resumed = absl::Now();
  // Node 2 still believes in the old epoch for a moment: whatever it is
  // asked now must not succeed on the aborted session.
  const absl::Status stale = node(kVictim).GetSession(session.id()).status();
  closer.join();
  const absl::Duration detect = answered - paused;
  EXPECT_LT(answered, resumed)
      << "the close waited for the stopped node: answered "
      << absl::FormatDuration(detect) << " after SIGSTOP, "
      << absl::FormatDuration(frozen) << " frozen";
  EXPECT_FALSE(closed.ok());
  ExpectNamesNode(closed.status(), kVictim, "the close");
  EXPECT_FALSE(stale.ok()) << "the resumed node served the aborted session";

  const absl::Status serving = cluster().WaitServing(absl::Seconds(20));
  EXPECT_TRUE(serving.ok()) << "node 2 did not rejoin: " << serving;
  WaitUsable();
  const absl::Duration reform = absl::Now() - resumed;
  const bool decided = absl::StrContains(closed.status().message(), kDecided);
  // Fencing: by the time node 2 resumed, the leader had declared it failed
  // and aborted the session; node 2's PREPARE vote from the old epoch must
  // not turn into a COMMIT decision.
  EXPECT_FALSE(decided) << "COMMIT decided for an aborted session on a "
                           "stale node's vote: "
                        << closed.status();
  const ModelValues& now = decided ? edited : known();
  const bool held = ShardsHold(
      now, decided ? known() : edited,
      decided ? "after a decided writeback" : "after an undecided writeback");
  // The rejoined node works: a session through it reads what the shards
  // hold.
  const v1::Session reader = OpenOk(node(kVictim), kModel, ReadOnly());
  for (const auto& [fqn, bytes] : now.params) {
    EXPECT_EQ(BytesToFloats(ReadOk(node(kVictim), reader.id(), fqn)),
              BytesToFloats(bytes))
        << fqn;
  }
  CloseOk(node(kVictim), reader.id());
  Report({"2 SIGSTOP follower > failure timeout, SIGCONT",
          "close fails naming node 2 while it is stopped; fenced; rejoins",
          Brief(closed.status()), held, detect, reform});
}

// R24 on a cluster: a frozen follower holds the phase reports of a rank on
// another node at most the leader's step_generations_wait (0.1 s), once
// while it is silent, never until the leader declares it failed (the
// failure timeout): the leader sends an optimizer step's generations to it
// in the background past that wait.
TEST_F(FaultHarnessTest, S2bFollowerStoppedHoldsNoOtherNodesStep) {
  // 1 s heartbeats: node 2 is declared failed 2-3 s after SIGSTOP, long
  // after the two steps below even on a loaded machine, so a leader that
  // waited for it until then would show.
  ASSERT_NO_FATAL_FAILURE(StartCluster({}, absl::Seconds(1)));
  // SessionManager::Options::step_generations_wait.
  constexpr absl::Duration kGenerationsWait = absl::Milliseconds(100);
  const std::vector<v1::TrainingPhase> step_phases = {
      v1::TRAINING_PHASE_FORWARD, v1::TRAINING_PHASE_BETWEEN,
      v1::TRAINING_PHASE_BACKWARD, v1::TRAINING_PHASE_OPTIMIZER,
      v1::TRAINING_PHASE_IDLE};
  // A scheduling allowance for the calls a live leader answers (a few ms
  // each on a quiet machine, each persisting the leases): 150 ms, plus
  // twice the slowest report of a step while every node runs, so that a
  // loaded machine (a parallel build) stretches it and a held report (the
  // failure timeout, seconds) still shows.
  absl::Duration slowest_live;
  for (v1::TrainingPhase phase : step_phases) {
    const absl::Time asked = absl::Now();
    ASSERT_TRUE(node(kLeader).ReportPhase(kModel, 0, phase, 1).ok());
    slowest_live = std::max(slowest_live, absl::Now() - asked);
  }
  const absl::Duration allowance =
      absl::Milliseconds(150) + 2 * slowest_live;
  ASSERT_TRUE(cluster().Pause(kVictim).ok());
  const absl::Time paused = absl::Now();
  // Two steps of rank 0 (on the leader), each OPTIMIZER moving every unit's
  // generation on every node, before the leader can declare node 2 failed.
  std::vector<absl::Duration> optimizer_moves;
  for (int64_t step = 2; step <= 3; ++step) {
    for (v1::TrainingPhase phase : step_phases) {
      const absl::Time asked = absl::Now();
      const absl::StatusOr<v1::ReportPhaseResponse> reported =
          node(kLeader).ReportPhase(kModel, 0, phase, step);
      const absl::Duration took = absl::Now() - asked;
      ASSERT_TRUE(reported.ok())
          << "step " << step << " " << v1::TrainingPhase_Name(phase) << ", "
          << absl::FormatDuration(absl::Now() - paused)
          << " after SIGSTOP: " << reported.status();
      if (phase == v1::TRAINING_PHASE_OPTIMIZER) {
        optimizer_moves.push_back(took);
      } else {
        EXPECT_LE(took, allowance)
            << "step " << step << " " << v1::TrainingPhase_Name(phase);
      }
    }
  }
  const absl::Duration walked = absl::Now() - paused;
  ASSERT_LT(walked, cluster().failure_timeout())
      << "the steps must run while node 2 is silent but not yet failed";
  // The first step's generations waited for node 2 the bound, and no more;
  // the second's did not wait for it again.
  EXPECT_GE(optimizer_moves[0], kGenerationsWait);
  EXPECT_LE(optimizer_moves[0], kGenerationsWait + allowance);
  EXPECT_LE(optimizer_moves[1], allowance);

  ASSERT_TRUE(cluster().Resume(kVictim).ok());
  const absl::Time resumed = absl::Now();
  const absl::Status serving = cluster().WaitServing(absl::Seconds(20));
  EXPECT_TRUE(serving.ok()) << "node 2 did not rejoin: " << serving;
  WaitUsable();
  Report({"2b SIGSTOP follower, the leader's rank steps",
          "OPTIMIZER waits 0.1 s once, every other report answered at once",
          absl::StrCat("OPTIMIZER ", absl::FormatDuration(optimizer_moves[0]),
                       ", then ", absl::FormatDuration(optimizer_moves[1])),
          ShardsIntact("after the steps' generations"), std::nullopt,
          absl::Now() - resumed});
}

TEST_F(FaultHarnessTest, S3LeaderKilledWithSessionsOpen) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const v1::Session writable = OpenWritable(kSurvivor);
  const ModelValues edited = Edit(kVictim, writable.id(), 301);
  v1::SessionOptions read_only = ReadOnly(ModuleScope("layers.0"));
  const v1::Session reader = OpenOk(node(kVictim), kModel, read_only);
  ASSERT_TRUE(cluster().Kill(kLeader).ok());
  const absl::Time killed = absl::Now();
  const absl::Duration poll = DetectBound() + absl::Seconds(5);
  const Detection via_survivor = PollUntilFailure(
      [&] { return node(kSurvivor).GetSession(writable.id()).status(); },
      killed, poll);
  const Detection via_victim = PollUntilFailure(
      [&] {
        client::ReadTensorParams params;
        params.tensor = {reader.id(), "layers.0.attn.w"};
        return node(kVictim).ReadTensor(params).status();
      },
      killed, poll);
  ExpectNamesNode(via_survivor.status, kLeader, "GetSession through node 1");
  ExpectNamesNode(via_victim.status, kLeader, "ReadTensor through node 2");
  EXPECT_LE(via_survivor.after, DetectBound());
  EXPECT_LE(via_victim.after, DetectBound());
  for (const int follower : {kSurvivor, kVictim}) {
    ExpectNoticed(cluster(), follower, DetectBound());
    ExpectNamesNode(node(follower).GetSession(writable.id()).status(), kLeader,
                    absl::StrCat("GetSession through node ", follower,
                                 " after it noticed"));
  }

  const absl::Duration reform = Restart(kLeader);
  // The restarted leader's sessions start empty: the old ones say why.
  for (const auto& [via, id] : {std::pair<int, std::string>{kSurvivor,
                                                            writable.id()},
                                {kVictim, reader.id()}}) {
    const absl::Status lost = node(via).GetSession(id).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(lost)) << lost;
    EXPECT_TRUE(absl::StartsWith(
        lost.message(),
        absl::StrCat("session ", id,
                     " ended: leader lost (it was opened in cluster epoch ")))
        << lost;
  }
  Report({"3 SIGKILL leader, 2 sessions OPEN",
          "calls UNAVAILABLE naming node 0; restart re-forms; shards as before",
          Brief(via_survivor.status),
          ShardsHold(known(), edited, "after the leader restarted"),
          std::max(via_survivor.after, via_victim.after), reform});
}

TEST_F(FaultHarnessTest, S3bLeaderKilledAfterRecordingCommit) {
  ASSERT_NO_FATAL_FAILURE(StartCluster({{kLeader, "commit.before_apply"}}));
  const v1::Session session = OpenWritable(kSurvivor);
  const ModelValues edited = Edit(kSurvivor, session.id(), 302);
  const absl::Time started = absl::Now();
  const absl::StatusOr<v1::CloseSessionResponse> closed =
      node(kSurvivor).CloseSession(session.id());
  const absl::Duration detect = absl::Now() - started;
  EXPECT_FALSE(closed.ok()) << "the leader died before answering";
  ExpectNamesNode(closed.status(), kLeader, "the close");
  EXPECT_LE(detect, DetectBound());
  ExpectDiedAtFaultPoint(kLeader);
  // The decision is in the leader's data directory: once it is back, the
  // writeback completes on every rank.
  const absl::Duration reform = Restart(kLeader);
  Report({"3b SIGKILL leader after recording COMMIT",
          "restarted leader completes the writeback on every rank",
          Brief(closed.status()),
          ShardsHold(edited, known(), "after the leader restarted"), detect,
          reform});
}

TEST_F(FaultHarnessTest, S5EveryDaemonKilledAndRestarted) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  // Written back before the crash: the restarted daemons must come back
  // with these values from their shared memory, not with the seeded ones.
  const v1::Session before = OpenWritable(kSurvivor);
  const ModelValues written = Edit(kVictim, before.id(), 501);
  CloseOk(node(kLeader), before.id());
  ASSERT_TRUE(ShardsHold(written, known(), "before the crash"));

  for (int n = 0; n < cluster().nodes(); ++n) {
    ASSERT_TRUE(cluster().Kill(n).ok());
  }
  const absl::Time started = absl::Now();
  for (int n = 0; n < cluster().nodes(); ++n) {
    ASSERT_TRUE(cluster().StartNode(n).ok());
  }
  const absl::Status serving = cluster().WaitServing(absl::Seconds(20));
  ASSERT_TRUE(serving.ok()) << serving;
  const absl::Duration reform = absl::Now() - started;
  bool intact = ShardsHold(written, known(), "after every daemon restarted");

  // Works: every tensor reads back exactly through every node, and a
  // writeback reaches every rank.
  v1::SessionOptions options = ReadOnly();
  options.set_with_grads(true);
  const v1::Session reader = OpenOk(node(kSurvivor), kModel, options);
  for (int n = 0; n < cluster().nodes(); ++n) {
    for (const bool grads : {false, true}) {
      for (const auto& [fqn, bytes] : grads ? written.grads : written.params) {
        const std::vector<float> read =
            BytesToFloats(ReadOk(node(n), reader.id(), fqn, grads));
        EXPECT_EQ(read, BytesToFloats(bytes))
            << fqn << (grads ? " (grad)" : "") << " via node " << n;
        intact = intact && read == BytesToFloats(bytes);
      }
    }
  }
  CloseOk(node(kVictim), reader.id());
  const v1::Session writable = OpenWritable(kVictim);
  const ModelValues edited = Edit(kLeader, writable.id(), 502);
  const absl::StatusOr<v1::CloseSessionResponse> closed =
      node(kSurvivor).CloseSession(writable.id());
  EXPECT_TRUE(closed.ok()) << closed.status();
  const bool works =
      closed.ok() && ShardsHold(edited, written, "after a writeback");
  Report({"5 SIGKILL every daemon, restart all",
          "re-forms; SERVING on all; shards intact; open/read/close works",
          works ? "re-formed; exact reads on every node; writeback OK"
                : absl::StrCat("writeback after the restart: ",
                               Brief(closed.status())),
          intact, std::nullopt, reform});
}

}  // namespace
}  // namespace summon::tests
