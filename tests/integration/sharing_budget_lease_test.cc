// Session lifetime end to end: read-only sessions sharing one gather (R2)
// whose buffer lives until the last holder closes, the memory budget (R9),
// one writable session per unit (R2) next to read-only snapshots (R6),
// leases (expiry aborts without writeback, renewal) and ownership (R12).

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

const int64_t kBlocksSessionBytes = SessionBufferBytes({40, 10, 25, 5, 15, 35});
const int64_t kLayer1Bytes = SessionBufferBytes({35});

class SessionLifetimeTest : public SummondTest {
 protected:
  grpc::Status GetSession(const std::string& id, pb::Session* session,
                          const std::string& principal = "") {
    pb::GetSessionRequest request;
    request.set_session_id(id);
    grpc::ClientContext context;
    if (!principal.empty()) {
      context.AddMetadata("summon-principal", principal);
    }
    return summon_->GetSession(&context, request, session);
  }

  grpc::Status Renew(const std::string& id, uint32_t lease_seconds,
                     pb::Session* session) {
    pb::RenewSessionRequest request;
    request.set_session_id(id);
    request.set_lease_seconds(lease_seconds);
    grpc::ClientContext context;
    return summon_->RenewSession(&context, request, session);
  }

  // Waits until the reaper ended session `id` (R25: it then answers
  // FAILED_PRECONDITION saying its lease expired); false after `timeout`.
  bool AwaitGone(const std::string& id, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    pb::Session session;
    while (absl::Now() < deadline) {
      const grpc::Status status = GetSession(id, &session);
      if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
          status.error_message().find(": lease expired (lease ") !=
              std::string::npos) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }
};

TEST_F(SessionLifetimeTest, ReadOnlySessionsShareOneGatherFreedByTheLast) {
  // Room for one root gather plus less than a copy of layers.1.
  StartServer(4, kBlocksSessionBytes + kLayer1Bytes - 4);
  CreateSeeded("m");
  const pb::Session first = Open("m", ReadOnly());
  EXPECT_FALSE(first.shared_gather());
  const pb::Session second = Open("m", ReadOnly());
  EXPECT_TRUE(second.shared_gather());
  EXPECT_EQ(second.bytes(), kBlocksSessionBytes);
  pb::Session now;
  ASSERT_TRUE(GetSession(first.id(), &now).ok());
  EXPECT_TRUE(now.shared_gather());

  // A write into a shared gather edits only that session's own copy.
  ASSERT_TRUE(
      WriteFloats(second.id(), "layers.0.attn.b", {1, 2, 3, 4, 5}).ok());
  EXPECT_EQ(Read(second.id(), "layers.0.attn.b"),
            (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(Read(first.id(), "layers.0.attn.b"), Seeded("layers.0.attn.b", 5));

  pb::Session refused;
  EXPECT_CODE(TryOpen("m", ModuleScope("layers.1"), &refused),
              RESOURCE_EXHAUSTED);
  Close(first.id());
  // The buffer lives on for the second holder...
  EXPECT_EQ(Read(second.id(), "layers.1.w"), Seeded("layers.1.w", 35));
  ASSERT_TRUE(GetSession(second.id(), &now).ok());
  EXPECT_FALSE(now.shared_gather());
  // ...and still counts against the budget.
  EXPECT_CODE(TryOpen("m", ModuleScope("layers.1"), &refused),
              RESOURCE_EXHAUSTED);
  Close(second.id());
  const pb::Session writer = Open("m", ModuleScope("layers.1"));
  EXPECT_EQ(writer.bytes(), kLayer1Bytes);
}

TEST_F(SessionLifetimeTest, MemoryBudgetRefusesBeforeAllocatingAnything) {
  StartServer(4, kBlocksSessionBytes - 1);
  CreateSeeded("m");
  pb::Session session;
  const grpc::Status refused = TryOpen("m", ReadOnly(), &session);
  EXPECT_CODE(refused, RESOURCE_EXHAUSTED);
  // The refused open reserved nothing: smaller sessions fill the budget.
  const pb::Session layer1 = Open("m", ModuleScope("layers.1"));
  const pb::Session layer0 = Open("m", ReadOnly(ModuleScope("layers.0")));
  EXPECT_EQ(layer0.bytes(), SessionBufferBytes({25, 5, 15}));
  EXPECT_CODE(TryOpen("m", ReadOnly(ModuleScope("")), &session),
              RESOURCE_EXHAUSTED);
  pb::ListSessionsResponse list;
  grpc::ClientContext context;
  ASSERT_TRUE(summon_->ListSessions(&context, {}, &list).ok());
  EXPECT_EQ(list.sessions_size(), 2);
}

TEST_F(SessionLifetimeTest, OneWriterPerUnitWhileReadOnlySnapshotsOpen) {
  StartServer(4);
  CreateSeeded("m");
  const pb::Session writer = Open("m", ModuleScope("layers.0"));
  pb::Session refused;
  EXPECT_CODE(TryOpen("m", {}, &refused), FAILED_PRECONDITION);
  EXPECT_CODE(TryOpen("m", ParamScope({"layers.0.mlp.w"}), &refused),
              FAILED_PRECONDITION);
  ASSERT_TRUE(
      WriteFloats(writer.id(), "layers.0.attn.b", {9, 9, 9, 9, 9}).ok());
  // A read-only session snapshots the shards, not the writer's edits.
  const pb::Session reader = Open("m", ReadOnly());
  EXPECT_EQ(Read(reader.id(), "layers.0.attn.b"), Seeded("layers.0.attn.b", 5));
  Close(writer.id());
  EXPECT_EQ(Read(reader.id(), "layers.0.attn.b"), Seeded("layers.0.attn.b", 5));
  const pb::Session later = Open("m", ReadOnly());
  EXPECT_FALSE(later.shared_gather());  // Another generation of layers.0.
  EXPECT_EQ(Read(later.id(), "layers.0.attn.b"),
            (std::vector<float>{9, 9, 9, 9, 9}));
}

TEST_F(SessionLifetimeTest, ExpiredLeaseAbortsWithoutWritebackAndFreesAll) {
  StartServer(4, kBlocksSessionBytes);
  const pb::Model model = CreateSeeded("m");
  pb::SessionOptions options;
  options.set_lease_seconds(1);
  const pb::Session session = Open("m", options);
  EXPECT_EQ(session.options().lease_seconds(), 1u);
  EXPECT_NEAR(session.expires_at_unix_ms() - session.created_at_unix_ms(), 1000,
              200);
  ASSERT_TRUE(WriteFloats(session.id(), "layers.1.w",
                          Scaled(Seeded("layers.1.w", 35), 4))
                  .ok());
  ASSERT_TRUE(AwaitGone(session.id(), absl::Seconds(10)));

  pb::CloseSessionResponse closed;
  EXPECT_CODE(TryClose(session.id(), false, false, &closed),
              FAILED_PRECONDITION);
  pb::ListSessionsResponse list;
  grpc::ClientContext context;
  ASSERT_TRUE(summon_->ListSessions(&context, {}, &list).ok());
  EXPECT_EQ(list.sessions_size(), 0);
  // No writeback: shards and generations as before.
  EXPECT_EQ(ParamChecksums(Checksum("m")),
            ExpectedChecksums(model, SeededBlocks()));
  const pb::Model after = Describe("m");
  for (const pb::Unit& unit : after.units()) {
    EXPECT_EQ(unit.generation(), 0u) << unit.fqn();
  }
  // The units and the whole budget are free again.
  const pb::Session next = Open("m");
  EXPECT_EQ(Read(next.id(), "layers.1.w"), Seeded("layers.1.w", 35));
}

TEST_F(SessionLifetimeTest, RenewalKeepsASessionPastItsFirstLease) {
  StartServer(4);
  CreateSeeded("m");
  pb::SessionOptions options;
  options.set_lease_seconds(2);
  const pb::Session session = Open("m", options);
  // 2.4 s in all, past the first lease.
  for (int i = 0; i < 8; ++i) {
    absl::SleepFor(absl::Milliseconds(300));
    pb::Session renewed;
    ASSERT_TRUE(Renew(session.id(), 2, &renewed).ok()) << "renewal " << i;
    EXPECT_GT(renewed.expires_at_unix_ms(), session.expires_at_unix_ms());
  }
  pb::Session longer;
  ASSERT_TRUE(Renew(session.id(), 30, &longer).ok());
  EXPECT_EQ(longer.options().lease_seconds(), 30u);
  EXPECT_NEAR(longer.expires_at_unix_ms() - absl::ToUnixMillis(absl::Now()),
              30000, 1000);
  // Still open after 2.4 s; nothing was written, so no writeback (R22).
  const pb::CloseSessionResponse closed = Close(session.id());
  EXPECT_FALSE(closed.written_back());
  EXPECT_EQ(closed.reason(), "nothing written");
}

TEST_F(SessionLifetimeTest, OnlyTheOwnerOrAnAdminOperatesASession) {
  StartServer(4);
  CreateSeeded("m");
  pb::OpenSessionRequest request;
  request.set_model("m");
  request.mutable_options()->set_writeback(false);
  pb::Session session;
  {
    grpc::ClientContext context;
    context.AddMetadata("summon-principal", "alice");
    ASSERT_TRUE(summon_->OpenSession(&context, request, &session).ok());
  }
  EXPECT_EQ(session.owner(), "alice");
  pb::Session seen;
  EXPECT_CODE(GetSession(session.id(), &seen, "bob"), PERMISSION_DENIED);
  EXPECT_CODE(GetSession(session.id(), &seen), PERMISSION_DENIED);
  EXPECT_TRUE(GetSession(session.id(), &seen, "alice").ok());
  EXPECT_TRUE(GetSession(session.id(), &seen, "admin").ok());
  pb::CloseSessionRequest close;
  close.set_session_id(session.id());
  pb::CloseSessionResponse closed;
  {
    grpc::ClientContext context;
    context.AddMetadata("summon-principal", "bob");
    EXPECT_CODE(summon_->CloseSession(&context, close, &closed),
                PERMISSION_DENIED);
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("summon-principal", "admin");
    EXPECT_TRUE(summon_->CloseSession(&context, close, &closed).ok());
  }
}

}  // namespace
}  // namespace summon::tests
