#include "client/lib/session_handle.h"

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "client/testing/fake_summon_service.h"
#include "gtest/gtest.h"

namespace summon::client {
namespace {

class SessionHandleTest : public ::testing::Test {
 protected:
  // OpenSession answers session "s-1" with the given lease in force.
  std::unique_ptr<Session> OpenOrDie(uint32_t lease_seconds = 60) {
    v1::Session opened;
    opened.set_id("s-1");
    opened.mutable_options()->set_lease_seconds(lease_seconds);
    calls().SetResponse("OpenSession", opened);
    absl::StatusOr<std::unique_ptr<Session>> session =
        client_.Open("gpt", v1::SessionOptions());
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *std::move(session) : nullptr;
  }

  FakeCalls& calls() { return server_.summon().calls(); }
  v1::CloseSessionRequest LastClose() {
    return calls().LastRequest<v1::CloseSessionRequest>("CloseSession");
  }

  FakeSummonServer server_;
  SummonClient client_{server_.address()};
};

TEST_F(SessionHandleTest, OpenReturnsTheOpenedSession) {
  std::unique_ptr<Session> session = OpenOrDie(30);
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(session->id(), "s-1");
  EXPECT_EQ(session->opened().options().lease_seconds(), 30u);
  EXPECT_EQ(calls().LastRequest<v1::OpenSessionRequest>("OpenSession").model(),
            "gpt");
}

TEST_F(SessionHandleTest, OpenFailureIsReturned) {
  calls().SetError("OpenSession",
                   grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                "rank 0 is in FORWARD"));
  EXPECT_EQ(client_.Open("gpt", v1::SessionOptions()).status(),
            absl::FailedPreconditionError("rank 0 is in FORWARD"));
}

TEST_F(SessionHandleTest, RenewsTheLeaseEveryThirdOfIt) {
  std::unique_ptr<Session> session = OpenOrDie(/*lease_seconds=*/1);
  ASSERT_NE(session, nullptr);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(calls().Count("RenewSession"), 0);
  // Renewals at about 333 and 667 ms.
  absl::SleepFor(absl::Milliseconds(700));
  EXPECT_GE(calls().Count("RenewSession"), 2);
  EXPECT_LE(calls().Count("RenewSession"), 3);
  const auto renew =
      calls().LastRequest<v1::RenewSessionRequest>("RenewSession");
  EXPECT_EQ(renew.session_id(), "s-1");
  EXPECT_FALSE(renew.has_lease_seconds());
  EXPECT_TRUE(session->renew_status().ok());
}

TEST_F(SessionHandleTest, RenewFailuresAreReported) {
  calls().SetError("RenewSession",
                   grpc::Status(grpc::StatusCode::NOT_FOUND, "expired"));
  std::unique_ptr<Session> session = OpenOrDie(/*lease_seconds=*/1);
  ASSERT_NE(session, nullptr);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(session->renew_status(), absl::NotFoundError("expired"));
}

TEST_F(SessionHandleTest, DestructionClosesWithWritebackAndStopsRenewing) {
  OpenOrDie(/*lease_seconds=*/1).reset();
  EXPECT_EQ(calls().Count("CloseSession"), 1);
  EXPECT_EQ(LastClose().session_id(), "s-1");
  EXPECT_FALSE(LastClose().abort());
  EXPECT_FALSE(LastClose().force());
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(calls().Count("RenewSession"), 0);
}

TEST_F(SessionHandleTest, CloseReturnsTheResponseAndEndsOwnership) {
  v1::CloseSessionResponse reply;
  reply.set_written_back(true);
  reply.set_bytes_written(4096);
  calls().SetResponse("CloseSession", reply);
  std::unique_ptr<Session> session = OpenOrDie();
  ASSERT_NE(session, nullptr);
  absl::StatusOr<v1::CloseSessionResponse> closed =
      session->Close(/*force=*/true);
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(closed->bytes_written(), 4096);
  EXPECT_TRUE(LastClose().force());
  EXPECT_EQ(session->Close().status().code(),
            absl::StatusCode::kFailedPrecondition);
  session.reset();
  EXPECT_EQ(calls().Count("CloseSession"), 1);
}

TEST_F(SessionHandleTest, RefusedWritebackKeepsOwnershipForARetry) {
  calls().SetError(
      "CloseSession",
      grpc::Status(grpc::StatusCode::ABORTED, "generation of layers.1 moved"));
  std::unique_ptr<Session> session = OpenOrDie();
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(session->Close().status(),
            absl::AbortedError("generation of layers.1 moved"));
  session.reset();
  // Destruction tried the writeback close once more.
  EXPECT_EQ(calls().Count("CloseSession"), 2);
  EXPECT_FALSE(LastClose().abort());
}

TEST_F(SessionHandleTest, AbortClosesWithoutWriteback) {
  std::unique_ptr<Session> session = OpenOrDie();
  ASSERT_NE(session, nullptr);
  EXPECT_TRUE(session->Abort().ok());
  EXPECT_TRUE(LastClose().abort());
  session.reset();
  EXPECT_EQ(calls().Count("CloseSession"), 1);
}

TEST_F(SessionHandleTest, AFailedAbortIsRetriedAsAnAbortAtDestruction) {
  calls().SetError("CloseSession",
                   grpc::Status(grpc::StatusCode::UNAVAILABLE, "node down"));
  std::unique_ptr<Session> session = OpenOrDie();
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(session->Abort(), absl::UnavailableError("node down"));
  session.reset();
  EXPECT_EQ(calls().Count("CloseSession"), 2);
  EXPECT_TRUE(LastClose().abort());
}

TEST_F(SessionHandleTest, ReleaseLeavesTheSessionOpenAndStopsRenewing) {
  std::unique_ptr<Session> session = OpenOrDie(/*lease_seconds=*/1);
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(session->Release(), "s-1");
  session.reset();
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(calls().Count("CloseSession"), 0);
  EXPECT_EQ(calls().Count("RenewSession"), 0);
}

TEST_F(SessionHandleTest, ASessionGoneElsewhereIsNoLongerClosed) {
  calls().SetError("CloseSession",
                   grpc::Status(grpc::StatusCode::NOT_FOUND, "no session"));
  std::unique_ptr<Session> session = OpenOrDie();
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(session->Close().status().code(), absl::StatusCode::kNotFound);
  session.reset();
  EXPECT_EQ(calls().Count("CloseSession"), 1);
}

}  // namespace
}  // namespace summon::client
