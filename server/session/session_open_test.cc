// SessionManager::Open and the session lifecycle: gathers equal to the
// seeded init under every strategy, read-only sessions sharing one gather
// and writable ones locking their units (R2), the memory budget (R9), the
// per-principal limit, unknown ids and other principals (R11, R12), leases.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/plan.h"
#include "gtest/gtest.h"
#include "server/comm/local_communicator.h"
#include "server/runtime/node_runtime.h"
#include "server/session/local_node_ops.h"
#include "server/session/session_manager.h"
#include "server/testing/session_manager_fixture.h"

namespace summon::server {
namespace {

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
  EXPECT_TRUE(sessions_->List("", "bob", /*all=*/false).empty());
  EXPECT_EQ(sessions_->List("", "bob", /*all=*/true).size(), 1u);
  EXPECT_EQ(sessions_->List("", "alice", /*all=*/false).size(), 1u);
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
  // R25: the ended session says why and when.
  EXPECT_EQ(sessions_->Get(info.id, "alice").status(),
            absl::FailedPreconditionError(
                absl::StrCat("session ", info.id,
                             " ended at 1970-01-01T00:16:50Z: lease expired "
                             "(lease 5 s)")));
  EXPECT_EQ(sessions_->MemoryInUse(), 0);
  SessionInfo check = Open({});
  EXPECT_EQ(Read(check.id, "scale"), Seeded("scale", 1));
}

// R25: a read, a stats call and a write renew the lease like RenewSession.
TEST_F(SessionManagerTest, R25_AnyUseRenewsTheLease) {
  Start(2, core::Strategy::kFullShard);
  SessionOptions options;
  options.lease = absl::Seconds(5);
  SessionInfo info = Open(options);
  now_ += absl::Seconds(4);
  EXPECT_EQ(Read(info.id, "scale"), Seeded("scale", 1));
  now_ += absl::Seconds(4);
  EXPECT_EQ(sessions_->ReapExpired(), 0);
  ASSERT_TRUE(sessions_->Stats(info.id, {"scale"}, false, 0, "alice").ok());
  now_ += absl::Seconds(4);
  EXPECT_EQ(sessions_->ReapExpired(), 0);
  WriteAll(info.id, "scale", {9.0f});
  now_ += absl::Seconds(4);
  EXPECT_EQ(sessions_->ReapExpired(), 0);
  EXPECT_EQ(sessions_->Get(info.id, "alice")->expires, now_ + absl::Seconds(1));
  now_ += absl::Seconds(2);
  EXPECT_EQ(sessions_->ReapExpired(), 1);
}

// R25: tombstones. An ended session answers FAILED_PRECONDITION with why and
// when it ended, for a while; an id never seen stays NOT_FOUND.

TEST_F(SessionManagerTest, R25_ClosedSessionSaysWhenItWasClosed) {
  Start(2, core::Strategy::kFullShard);
  SessionInfo info = Open({});
  ASSERT_TRUE(sessions_->Close(info.id, false, false, "alice").ok());
  const absl::Status ended = absl::FailedPreconditionError(absl::StrCat(
      "session ", info.id, " ended at 1970-01-01T00:16:40Z: closed"));
  EXPECT_EQ(sessions_->Get(info.id, "alice").status(), ended);
  EXPECT_EQ(sessions_->Renew(info.id, std::nullopt, "alice").status(), ended);
  EXPECT_EQ(sessions_
                ->Read(info.id, "scale", false, std::nullopt, 0, std::nullopt,
                       0, "alice",
                       [](int64_t, absl::string_view,
                          const std::shared_ptr<const void>&) { return true; })
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // A double close is told apart from a typo.
  EXPECT_EQ(sessions_->Close(info.id, false, false, "alice").status(), ended);
  EXPECT_FALSE(sessions_->IsOpen(info.id, "alice"));
  // Another principal learns nothing of it.
  EXPECT_EQ(sessions_->Get(info.id, "bob").status().code(),
            absl::StatusCode::kPermissionDenied);

  SessionInfo aborted = Open({});
  ASSERT_TRUE(sessions_->Close(aborted.id, true, false, "alice").ok());
  EXPECT_EQ(sessions_->Get(aborted.id, "alice").status(),
            absl::FailedPreconditionError(
                absl::StrCat("session ", aborted.id,
                             " ended at 1970-01-01T00:16:40Z: aborted by "
                             "client")));
}

TEST_F(SessionManagerTest, R25_ExpiredSessionSaysItsLeaseExpired) {
  Start(2, core::Strategy::kFullShard);
  SessionOptions options;
  options.lease = absl::Seconds(60);
  SessionInfo info = Open(options);
  now_ += absl::Seconds(61);
  EXPECT_EQ(sessions_->ReapExpired(), 1);
  const absl::Status ended = absl::FailedPreconditionError(
      absl::StrCat("session ", info.id,
                   " ended at 1970-01-01T00:17:41Z: lease expired (lease 60 "
                   "s)"));
  EXPECT_EQ(sessions_->Get(info.id, "alice").status(), ended);
  EXPECT_EQ(sessions_->Close(info.id, false, false, "alice").status(), ended);
  // Kept 10 minutes, then the id is as unknown as any other.
  now_ += absl::Minutes(10);
  EXPECT_EQ(sessions_->Get(info.id, "alice").status(), ended);
  now_ += absl::Seconds(1);
  EXPECT_EQ(sessions_->Get(info.id, "alice").status(),
            absl::NotFoundError(absl::StrCat("no session ", info.id)));
}

TEST_F(SessionManagerTest, R25_NodeFailureAbortSaysSo) {
  Start(2, core::Strategy::kFullShard);
  SessionInfo info = Open({});
  EXPECT_EQ(sessions_->AbortAll(absl::UnavailableError("node 1 lost")), 1);
  EXPECT_EQ(sessions_->Get(info.id, "alice").status(),
            absl::FailedPreconditionError(absl::StrCat(
                "session ", info.id,
                " ended at 1970-01-01T00:16:40Z: aborted by node failure")));
}

TEST_F(SessionManagerTest, R25_UnknownIdStaysNotFound) {
  Start(2, core::Strategy::kFullShard);
  SessionInfo info = Open({});
  ASSERT_TRUE(sessions_->Close(info.id, false, false, "alice").ok());
  EXPECT_EQ(sessions_->Get("s-never", "alice").status(),
            absl::NotFoundError("no session s-never"));
  EXPECT_EQ(sessions_->Close("s-never", false, false, "alice").status(),
            absl::NotFoundError("no session s-never"));
}

TEST_F(SessionManagerTest, R25_TombstonesAreBounded) {
  Start(1, core::Strategy::kFullShard);
  std::vector<std::string> ids;
  for (int i = 0; i < 4097; ++i) {
    SessionInfo info = Open(Params({"scale"}));
    ASSERT_TRUE(sessions_->Close(info.id, true, false, "alice").ok());
    ids.push_back(info.id);
  }
  // The 4097th ended session evicted the oldest.
  EXPECT_EQ(sessions_->Get(ids[0], "alice").status(),
            absl::NotFoundError(absl::StrCat("no session ", ids[0])));
  EXPECT_EQ(sessions_->Get(ids[1], "alice").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sessions_->Get(ids[4096], "alice").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// One node's runtime under a cluster epoch the test sets, as a leader's
// node ops report it.
class EpochNodeOps : public LocalNodeOps {
 public:
  using LocalNodeOps::LocalNodeOps;
  uint64_t Epoch() const override { return epoch; }
  std::atomic<uint64_t> epoch{0x2f};
};

TEST_F(SessionManagerTest, ASessionOfAnEarlierLeaderEndedLeaderLost) {
  Start(2, core::Strategy::kFullShard);
  LocalCommunicator communicator;
  NodeRuntime runtime(0, registry_.get(), &communicator, absl::Seconds(30),
                      nullptr);
  EpochNodeOps ops(&runtime);
  UseNodeOps(&ops);

  const SessionInfo mine = Open({});
  EXPECT_EQ(mine.id.substr(0, 8), "s-00002f");
  // Issued by the leader of epoch 2e, which this manager never was.
  EXPECT_EQ(
      sessions_->Get("s-00002e0000000001", "alice").status(),
      absl::FailedPreconditionError(
          "session s-00002e0000000001 ended: leader lost (it was opened in "
          "cluster epoch 2e by an earlier leader, and sessions live in their "
          "leader's memory; the cluster is in epoch 2f now: open it again)"));
  // An id of this leader's own epoch that it never issued, and an id of no
  // cluster epoch (0): unknown, as before.
  EXPECT_EQ(sessions_->Get("s-00002f0000000001", "alice").status(),
            absl::NotFoundError("no session s-00002f0000000001"));
  EXPECT_EQ(sessions_->Get("s-0000000000000001", "alice").status(),
            absl::NotFoundError("no session s-0000000000000001"));
  // The same leader in a later epoch (a node rejoined) still knows the ids
  // it issued: its own ended session keeps its tombstone, an id of its
  // earlier epoch that it never issued stays unknown.
  ASSERT_TRUE(sessions_->Close(mine.id, true, false, "alice").ok());
  ops.epoch = 0x30;
  EXPECT_EQ(sessions_->Get("s-00002f0000000001", "alice").status(),
            absl::NotFoundError("no session s-00002f0000000001"));
  EXPECT_EQ(sessions_->Get(mine.id, "alice").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(
      sessions_->Get(mine.id, "alice").status().message().find("ended at"),
      absl::string_view::npos);
  sessions_.reset();  // Before the node ops it uses.
}

// A node failure handled (AbortAll) while an open's gather is in flight:
// the open fails, whatever its gather answers, and the session is ended
// once (its model counts no session, its memory is back, its units free).
class AbortingNodeOps : public LocalNodeOps {
 public:
  using LocalNodeOps::LocalNodeOps;
  absl::Status Gather(const GatherOp& op) override {
    absl::Status gathered = LocalNodeOps::Gather(op);
    if (sessions != nullptr) {
      sessions->AbortAll(absl::UnavailableError("node 1 failed"));
    }
    return fail ? absl::UnavailableError("node 1 failed") : gathered;
  }
  SessionManager* sessions = nullptr;
  bool fail = false;
};

TEST_F(SessionManagerTest, AnOpenAbortedWhileItGathersEndsOnce) {
  Start(2, core::Strategy::kFullShard);
  LocalCommunicator communicator;
  NodeRuntime runtime(0, registry_.get(), &communicator, absl::Seconds(30),
                      nullptr);
  AbortingNodeOps ops(&runtime);
  UseNodeOps(&ops);
  ops.sessions = sessions_.get();
  for (bool fail : {false, true}) {
    ops.fail = fail;
    const absl::StatusOr<SessionInfo> opened =
        sessions_->Open("m", Scoped("layers.0"), "alice");
    ASSERT_FALSE(opened.ok()) << "gather failing: " << fail;
    EXPECT_EQ(opened.status().code(), absl::StatusCode::kUnavailable);
    // A failed gather's own error (it names the node), else why it failed.
    EXPECT_NE(opened.status().message().find(
                  fail ? "node 1 failed" : "was aborted while it gathered"),
              absl::string_view::npos)
        << opened.status();
    EXPECT_EQ(sessions_->OpenSessionCount(), 0);
    EXPECT_EQ(sessions_->MemoryInUse(), 0);
    absl::MutexLock lock(&model_->runtime_mu);
    EXPECT_EQ(model_->open_sessions, 0) << "gather failing: " << fail;
  }
  // The unit is free again: a writable session of it opens.
  ops.sessions = nullptr;
  ops.fail = false;
  const SessionInfo writable = Open(Scoped("layers.0"));
  EXPECT_EQ(Read(writable.id, "layers.0.b"), Seeded("layers.0.b", 5));
  ASSERT_TRUE(sessions_->Close(writable.id, true, false, "alice").ok());
  sessions_.reset();  // Before the node ops it uses.
}

TEST_F(SessionManagerTest, ASingleNodeNeverSaysLeaderLost) {
  Start(2, core::Strategy::kFullShard);
  EXPECT_EQ(Open({}).id.substr(0, 8), "s-000000");
  EXPECT_EQ(sessions_->Get("s-00002e0000000001", "alice").status(),
            absl::NotFoundError("no session s-00002e0000000001"));
}

}  // namespace
}  // namespace summon::server
