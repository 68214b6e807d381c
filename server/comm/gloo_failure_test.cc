// GlooCommunicator's failures: ranks that never join, aborts, bad specs and
// a cluster formed again under a new incarnation.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/comm/gloo_communicator.h"
#include "server/testing/comm_patterns.h"
#include "server/testing/gloo_test_rendezvous.h"

namespace summon::server {
namespace {

using gloo_testing::kTimeout;
using gloo_testing::Options;
using gloo_testing::StoreKind;
using gloo_testing::TestRendezvous;

TEST(GlooFailureTest, RankThatNeverJoinsTimesOutTheCollective) {
  TestRendezvous rendezvous(StoreKind::kInMemory);
  std::vector<std::unique_ptr<GlooCommunicator>> comms =
      rendezvous.Connect(2, "timeout/");
  ASSERT_EQ(comms.size(), 2u);
  std::vector<uint8_t> buffer = Pattern(0, 64);
  const absl::Duration timeout = absl::Milliseconds(500);

  // Rank 1 never enters the broadcast.
  const absl::Time start = absl::Now();
  const absl::Status timed_out =
      comms[0]->Broadcast(buffer.data(), 64, 0, Options(1, timeout));
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_EQ(timed_out.code(), absl::StatusCode::kDeadlineExceeded) << timed_out;
  EXPECT_GE(elapsed, timeout);
  EXPECT_LT(elapsed, timeout + absl::Seconds(2));

  // The timed-out rank's connections are gone: it refuses at once ...
  const absl::Status refused = comms[0]->Barrier(Options(2));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  // ... and its peer fails fast instead of waiting for its own timeout.
  const absl::Time peer_start = absl::Now();
  const absl::Status peer = comms[1]->Barrier(Options(2));
  EXPECT_EQ(peer.code(), absl::StatusCode::kUnavailable) << peer;
  EXPECT_LT(absl::Now() - peer_start, absl::Seconds(2));
}

TEST(GlooFailureTest, MissingRankTimesOutEveryWaitingRank) {
  TestRendezvous rendezvous(StoreKind::kInMemory);
  std::vector<std::unique_ptr<GlooCommunicator>> comms =
      rendezvous.Connect(3, "missing/");
  ASSERT_EQ(comms.size(), 3u);
  const absl::Duration timeout = absl::Milliseconds(500);
  std::vector<absl::Status> status(2);
  std::vector<absl::Duration> elapsed(2);
  // Ranks 0 and 1 enter the barrier, rank 2 never does.
  RunOnRanks(2, [&](int rank) {
    const absl::Time start = absl::Now();
    status[rank] = comms[rank]->Barrier(Options(1, timeout));
    elapsed[rank] = absl::Now() - start;
  });
  int deadline_exceeded = 0;
  for (int rank = 0; rank < 2; ++rank) {
    // The first rank to time out closes its connections, so the other may
    // see its peer go away (UNAVAILABLE) just before its own timeout.
    EXPECT_TRUE(absl::IsDeadlineExceeded(status[rank]) ||
                absl::IsUnavailable(status[rank]))
        << "rank " << rank << ": " << status[rank];
    EXPECT_LT(elapsed[rank], timeout + absl::Seconds(2)) << "rank " << rank;
    if (absl::IsDeadlineExceeded(status[rank])) ++deadline_exceeded;
  }
  EXPECT_GE(deadline_exceeded, 1);
}

TEST(GlooFailureTest, AbortWakesTheBlockedOperationAtOnce) {
  TestRendezvous rendezvous(StoreKind::kInMemory);
  std::vector<std::unique_ptr<GlooCommunicator>> comms =
      rendezvous.Connect(2, "abort-local/");
  ASSERT_EQ(comms.size(), 2u);
  absl::Status blocked;
  absl::Duration elapsed;
  // Rank 1 waits in a barrier rank 0 never enters; Abort must end the wait
  // long before its 5 s timeout.
  RunOnRanks(2, [&](int rank) {
    if (rank == 0) {
      absl::SleepFor(absl::Milliseconds(200));
      comms[1]->Abort();
      return;
    }
    const absl::Time start = absl::Now();
    blocked = comms[1]->Barrier(Options(1));
    elapsed = absl::Now() - start;
  });
  EXPECT_EQ(blocked.code(), absl::StatusCode::kAborted) << blocked;
  EXPECT_LT(elapsed, absl::Seconds(2));
  EXPECT_EQ(comms[1]->Barrier(Options(2)).code(), absl::StatusCode::kAborted);
}

TEST(GlooFailureTest, AbortFailsPeersBlockedOnTheAbortedRank) {
  TestRendezvous rendezvous(StoreKind::kInMemory);
  std::vector<std::unique_ptr<GlooCommunicator>> comms =
      rendezvous.Connect(3, "abort-peers/");
  ASSERT_EQ(comms.size(), 3u);
  std::vector<absl::Status> status(3);
  std::vector<absl::Duration> elapsed(3);
  std::vector<uint8_t> gathered(3 * 100);
  // Rank 0 gathers from ranks 1 and 2; rank 2 aborts instead of sending.
  RunOnRanks(3, [&](int rank) {
    if (rank == 2) {
      absl::SleepFor(absl::Milliseconds(200));
      comms[2]->Abort();
      return;
    }
    const std::vector<uint8_t> send = Pattern(rank, 100);
    const absl::Time start = absl::Now();
    status[rank] = comms[rank]->Gather(send.data(), 100,
                                       rank == 0 ? gathered.data() : nullptr,
                                       {100, 100, 100}, 0, Options(1));
    elapsed[rank] = absl::Now() - start;
  });
  // Rank 1's part arrives; the root then sees rank 2's connection reset.
  EXPECT_TRUE(status[1].ok()) << status[1];
  EXPECT_EQ(status[0].code(), absl::StatusCode::kUnavailable) << status[0];
  EXPECT_LT(elapsed[0], absl::Seconds(2));
}

TEST(GlooFailureTest, ConnectTimesOutWhenARankNeverShowsUp) {
  TestRendezvous rendezvous(StoreKind::kGrpc);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> alone =
      GlooCommunicator::Create({0, 2, "127.0.0.1", absl::Milliseconds(500)},
                               rendezvous.NewStore("lonely/"));
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kDeadlineExceeded)
      << alone.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(GlooFailureTest, InvalidSpecIsRefused) {
  gloo::rendezvous::HashStore store;
  EXPECT_EQ(GlooCommunicator::Create({2, 2, "127.0.0.1", kTimeout}, store)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      GlooCommunicator::Create({0, 2, "", kTimeout}, store).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      GlooCommunicator::Create({0, 2, "127.0.0.1", absl::ZeroDuration()}, store)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(GlooFailureTest, ClusterReformsUnderANewIncarnationAfterAFailure) {
  TestRendezvous rendezvous(StoreKind::kGrpc);
  {
    std::vector<std::unique_ptr<GlooCommunicator>> first =
        rendezvous.Connect(2, "incarnation-1/");
    ASSERT_EQ(first.size(), 2u);
    // Rank 0 alone: times out and breaks incarnation 1.
    EXPECT_FALSE(first[0]->Barrier(Options(1, absl::Milliseconds(200))).ok());
  }
  std::vector<std::unique_ptr<GlooCommunicator>> second =
      rendezvous.Connect(2, "incarnation-2/");
  ASSERT_EQ(second.size(), 2u);
  std::vector<std::vector<uint8_t>> recv(2, std::vector<uint8_t>(20));
  std::vector<absl::Status> status(2);
  RunOnRanks(2, [&](int rank) {
    const std::vector<uint8_t> send = Pattern(rank, 10);
    status[rank] = second[rank]->AllGatherV(send.data(), 10, recv[rank].data(),
                                            {10, 10}, Options(1));
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(recv[rank][i], PatternByte(i / 10, i % 10))
          << "rank " << rank << " byte " << i;
    }
  }
}

}  // namespace
}  // namespace summon::server
