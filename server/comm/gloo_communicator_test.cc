#include "server/comm/gloo_communicator.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gtest/gtest.h"
#include "server/cluster/kv_store.h"
#include "server/cluster/rendezvous_store.h"
#include "server/testing/comm_patterns.h"
#include "server/testing/kv_store_test_server.h"

namespace summon::server {
namespace {

enum class StoreKind { kInMemory, kGrpc };

constexpr absl::Duration kTimeout = absl::Seconds(5);

CollectiveOptions Options(uint64_t tag, absl::Duration timeout = kTimeout) {
  return CollectiveOptions{tag, timeout};
}

// Byte counts with a zero, a one and one large enough to take several
// socket writes.
std::vector<int64_t> UnevenBytes(int size) {
  const std::vector<int64_t> all = {17, 0, 300001, 1};
  return std::vector<int64_t>(all.begin(), all.begin() + size);
}

// The rendezvous of one test cluster: Gloo's in-memory HashStore, or the
// leader's store served over gRPC with a RemoteKvStore per rank (what
// summond does).
class TestRendezvous {
 public:
  explicit TestRendezvous(StoreKind kind) : kind_(kind) {
    if (kind_ == StoreKind::kGrpc) {
      absl::StatusOr<std::unique_ptr<KvStoreTestServer>> started =
          KvStoreTestServer::Start();
      EXPECT_TRUE(started.ok()) << started.status();
      if (started.ok()) leader_ = *std::move(started);
    }
  }

  // Forms a communicator of `size` ranks, one thread per rank, under the
  // cluster incarnation `prefix`. Empty when some rank failed.
  std::vector<std::unique_ptr<GlooCommunicator>> Connect(
      int size, const std::string& prefix,
      absl::Duration connect_timeout = kTimeout) {
    std::vector<gloo::rendezvous::Store*> stores;
    for (int rank = 0; rank < size; ++rank) stores.push_back(&NewStore(prefix));
    std::vector<absl::StatusOr<std::unique_ptr<GlooCommunicator>>> created;
    for (int rank = 0; rank < size; ++rank) {
      created.emplace_back(absl::UnknownError("not run"));
    }
    RunOnRanks(size, [&](int rank) {
      created[rank] = GlooCommunicator::Create(
          {rank, size, "127.0.0.1", connect_timeout}, *stores[rank]);
    });
    std::vector<std::unique_ptr<GlooCommunicator>> comms;
    for (int rank = 0; rank < size; ++rank) {
      EXPECT_TRUE(created[rank].ok())
          << "rank " << rank << ": " << created[rank].status();
      if (!created[rank].ok()) return {};
      comms.push_back(*std::move(created[rank]));
    }
    return comms;
  }

  // A store for one rank of incarnation `prefix`.
  gloo::rendezvous::Store& NewStore(const std::string& prefix) {
    if (kind_ == StoreKind::kInMemory) {
      stores_.push_back(
          std::make_unique<gloo::rendezvous::PrefixStore>(prefix, hash_store_));
    } else {
      clients_.push_back(
          std::make_unique<RemoteKvStore>(leader_->NewChannel()));
      stores_.push_back(std::make_unique<RendezvousStore>(*clients_.back(),
                                                          prefix, kTimeout));
    }
    return *stores_.back();
  }

 private:
  const StoreKind kind_;
  gloo::rendezvous::HashStore hash_store_;
  std::unique_ptr<KvStoreTestServer> leader_;
  std::vector<std::unique_ptr<KvStore>> clients_;
  std::vector<std::unique_ptr<gloo::rendezvous::Store>> stores_;
};

class GlooCollectivesTest
    : public ::testing::TestWithParam<std::tuple<StoreKind, int>> {
 protected:
  void SetUp() override {
    rendezvous_ = std::make_unique<TestRendezvous>(std::get<0>(GetParam()));
    comms_ = rendezvous_->Connect(size(), "incarnation-1/");
    ASSERT_EQ(static_cast<int>(comms_.size()), size());
  }

  int size() const { return std::get<1>(GetParam()); }

  std::unique_ptr<TestRendezvous> rendezvous_;
  std::vector<std::unique_ptr<GlooCommunicator>> comms_;
};

TEST_P(GlooCollectivesTest, RanksAreNumberedInOrder) {
  for (int rank = 0; rank < size(); ++rank) {
    EXPECT_EQ(comms_[rank]->rank(), rank);
    EXPECT_EQ(comms_[rank]->size(), size());
  }
}

TEST_P(GlooCollectivesTest, AllGatherVWithUnevenAndZeroSizes) {
  const std::vector<int64_t> bytes = UnevenBytes(size());
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  std::vector<std::vector<uint8_t>> recv(size(),
                                         std::vector<uint8_t>(total, 0xEE));
  std::vector<absl::Status> status(size());
  RunOnRanks(size(), [&](int rank) {
    const std::vector<uint8_t> send = Pattern(rank, bytes[rank]);
    status[rank] = comms_[rank]->AllGatherV(
        send.data(), bytes[rank], recv[rank].data(), bytes, Options(7));
  });
  for (int rank = 0; rank < size(); ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
    int64_t offset = 0;
    for (int from = 0; from < size(); ++from) {
      for (int64_t i = 0; i < bytes[from]; ++i) {
        ASSERT_EQ(recv[rank][offset + i], PatternByte(from, i))
            << "rank " << rank << " byte " << i << " from rank " << from;
      }
      offset += bytes[from];
    }
  }
}

TEST_P(GlooCollectivesTest, AllGatherVInPlace) {
  const std::vector<int64_t> bytes(size(), 1000);
  std::vector<std::vector<uint8_t>> buffers(
      size(), std::vector<uint8_t>(1000 * size()));
  std::vector<absl::Status> status(size());
  RunOnRanks(size(), [&](int rank) {
    uint8_t* mine = buffers[rank].data() + 1000 * rank;
    const std::vector<uint8_t> own = Pattern(rank, 1000);
    std::copy(own.begin(), own.end(), mine);
    status[rank] = comms_[rank]->AllGatherV(mine, 1000, buffers[rank].data(),
                                            bytes, Options(8));
  });
  for (int rank = 0; rank < size(); ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
    for (int from = 0; from < size(); ++from) {
      for (int64_t i = 0; i < 1000; ++i) {
        ASSERT_EQ(buffers[rank][1000 * from + i], PatternByte(from, i))
            << "rank " << rank << " byte " << i << " from rank " << from;
      }
    }
  }
}

// Slots in reverse rank order with 3-byte gaps, uneven and zero sizes,
// exchanged in three parts of one operation (as NodeRuntime's pipelined
// gather runs it): every slot lands where its rank put it, the gaps stay.
TEST_P(GlooCollectivesTest, AllGatherAtInPartsBetweenGaps) {
  const std::vector<int64_t> bytes = UnevenBytes(size());
  std::vector<int64_t> offsets(size());
  int64_t span = 0;
  for (int r = size() - 1; r >= 0; --r) {
    offsets[r] = span + 3;
    span = offsets[r] + bytes[r];
  }
  constexpr int kParts = 3;
  std::vector<std::vector<uint8_t>> buffers(size(),
                                            std::vector<uint8_t>(span, 0xEE));
  std::vector<absl::Status> status(size());
  RunOnRanks(size(), [&](int rank) {
    const std::vector<uint8_t> own = Pattern(rank, bytes[rank]);
    std::copy(own.begin(), own.end(), buffers[rank].begin() + offsets[rank]);
    for (int k = 0; k < kParts && status[rank].ok(); ++k) {
      std::vector<int64_t> at(size());
      std::vector<int64_t> part(size());
      for (int r = 0; r < size(); ++r) {
        at[r] = offsets[r] + bytes[r] * k / kParts;
        part[r] = offsets[r] + bytes[r] * (k + 1) / kParts - at[r];
      }
      status[rank] = comms_[rank]->AllGatherAt(buffers[rank].data(), at, part,
                                               k, Options(9));
    }
  });
  for (int rank = 0; rank < size(); ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
    std::vector<uint8_t> expected(span, 0xEE);
    for (int from = 0; from < size(); ++from) {
      const std::vector<uint8_t> own = Pattern(from, bytes[from]);
      std::copy(own.begin(), own.end(), expected.begin() + offsets[from]);
    }
    ASSERT_EQ(buffers[rank], expected) << "rank " << rank;
  }
}

// The same slots as one streaming operation: each rank writes its bytes of
// part k only in ready(k), so whatever a peer received was sent after it
// was ready; ready is called once per part, in order.
TEST_P(GlooCollectivesTest, AllGatherAtPartsSendsEachPartOnceReady) {
  const std::vector<int64_t> bytes = UnevenBytes(size());
  std::vector<int64_t> offsets(size());
  int64_t span = 0;
  for (int r = size() - 1; r >= 0; --r) {
    offsets[r] = span + 3;
    span = offsets[r] + bytes[r];
  }
  constexpr int kParts = 3;
  std::vector<Communicator::GatherPart> parts(kParts);
  for (int k = 0; k < kParts; ++k) {
    for (int r = 0; r < size(); ++r) {
      const int64_t at = offsets[r] + bytes[r] * k / kParts;
      parts[k].offsets.push_back(at);
      parts[k].bytes.push_back(offsets[r] + bytes[r] * (k + 1) / kParts - at);
    }
  }
  std::vector<std::vector<uint8_t>> buffers(size(),
                                            std::vector<uint8_t>(span, 0xEE));
  std::vector<std::vector<int>> called(size());
  std::vector<absl::Status> status(size());
  RunOnRanks(size(), [&](int rank) {
    const std::vector<uint8_t> own = Pattern(rank, bytes[rank]);
    status[rank] = comms_[rank]->AllGatherAtParts(
        buffers[rank].data(), parts,
        [&, rank](int k) {
          called[rank].push_back(k);
          const int64_t from = parts[k].offsets[rank] - offsets[rank];
          std::copy(own.begin() + from,
                    own.begin() + from + parts[k].bytes[rank],
                    buffers[rank].begin() + parts[k].offsets[rank]);
          return absl::OkStatus();
        },
        Options(9));
  });
  for (int rank = 0; rank < size(); ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
    EXPECT_EQ(called[rank], std::vector<int>({0, 1, 2})) << "rank " << rank;
    std::vector<uint8_t> expected(span, 0xEE);
    for (int from = 0; from < size(); ++from) {
      const std::vector<uint8_t> own = Pattern(from, bytes[from]);
      std::copy(own.begin(), own.end(), expected.begin() + offsets[from]);
    }
    ASSERT_EQ(buffers[rank], expected) << "rank " << rank;
  }
}

// A part that could not be filled ends the operation with the caller's
// error (no rank waits out its deadline for the parts that never come), and
// the communicator, its receives left posted and its connections closed,
// asks to be re-created.
TEST_P(GlooCollectivesTest, AllGatherAtPartsReturnsTheFillersError) {
  const std::vector<int64_t> bytes(size(), 64);
  std::vector<Communicator::GatherPart> parts(2);
  for (Communicator::GatherPart& part : parts) {
    for (int r = 0; r < size(); ++r) {
      part.offsets.push_back(128 * r + (&part == &parts[0] ? 0 : 64));
      part.bytes.push_back(64);
    }
  }
  std::vector<std::vector<uint8_t>> buffers(size(),
                                            std::vector<uint8_t>(128 * size()));
  std::vector<absl::Status> status(size());
  // Every rank fails its first part once all have posted their receives
  // (no rank's closing races another's start).
  std::atomic<int> arrived{0};
  RunOnRanks(size(), [&](int rank) {
    status[rank] = comms_[rank]->AllGatherAtParts(
        buffers[rank].data(), parts,
        [&](int) {
          arrived.fetch_add(1);
          while (arrived.load() < size()) absl::SleepFor(absl::Milliseconds(1));
          return absl::DataLossError("shard unreadable");
        },
        Options(11));
  });
  for (int rank = 0; rank < size(); ++rank) {
    EXPECT_EQ(status[rank], absl::DataLossError("shard unreadable"))
        << "rank " << rank;
    if (size() > 1) {
      EXPECT_EQ(comms_[rank]->Barrier(Options(12)).code(),
                absl::StatusCode::kUnavailable)
          << "rank " << rank;
    }
  }
  // Too many parts are refused before anything is sent.
  EXPECT_EQ(comms_[0]
                ->AllGatherAtParts(
                    buffers[0].data(),
                    std::vector<Communicator::GatherPart>(257, parts[0]),
                    [](int) { return absl::OkStatus(); }, Options(13))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(GlooCollectivesTest, AllGatherAtRefusesOverlapsAndBadParts) {
  std::vector<uint8_t> buffer(64);
  std::vector<int64_t> offsets(size());
  const std::vector<int64_t> bytes(size(), 8);
  for (int r = 0; r < size(); ++r) offsets[r] = 8 * r;
  EXPECT_EQ(comms_[0]
                ->AllGatherAt(buffer.data(), offsets, bytes, 256, Options(10))
                .code(),
            absl::StatusCode::kInvalidArgument);
  if (size() < 2) return;  // One slot overlaps no other.
  offsets[1] = 4;
  EXPECT_EQ(comms_[0]
                ->AllGatherAt(buffer.data(), offsets, bytes, 0, Options(10))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(GlooCollectivesTest, GatherToTheLastRank) {
  const int root = size() - 1;
  const std::vector<int64_t> bytes = UnevenBytes(size());
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  std::vector<uint8_t> gathered(total, 0xEE);
  std::vector<absl::Status> status(size());
  RunOnRanks(size(), [&](int rank) {
    const std::vector<uint8_t> send = Pattern(rank, bytes[rank]);
    status[rank] = comms_[rank]->Gather(
        send.data(), bytes[rank], rank == root ? gathered.data() : nullptr,
        bytes, root, Options(9));
  });
  for (int rank = 0; rank < size(); ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
  }
  int64_t offset = 0;
  for (int from = 0; from < size(); ++from) {
    for (int64_t i = 0; i < bytes[from]; ++i) {
      ASSERT_EQ(gathered[offset + i], PatternByte(from, i))
          << "byte " << i << " from rank " << from;
    }
    offset += bytes[from];
  }
}

TEST_P(GlooCollectivesTest, ScatterFromRankOne) {
  const int root = 1;
  const std::vector<int64_t> bytes = UnevenBytes(size());
  std::vector<uint8_t> send;
  for (int to = 0; to < size(); ++to) {
    const std::vector<uint8_t> slice = Pattern(to, bytes[to]);
    send.insert(send.end(), slice.begin(), slice.end());
  }
  std::vector<std::vector<uint8_t>> recv(size());
  std::vector<absl::Status> status(size());
  for (int rank = 0; rank < size(); ++rank) {
    recv[rank].assign(bytes[rank], 0xEE);
  }
  RunOnRanks(size(), [&](int rank) {
    status[rank] = comms_[rank]->Scatter(rank == root ? send.data() : nullptr,
                                         bytes, recv[rank].data(), bytes[rank],
                                         root, Options(10));
  });
  for (int rank = 0; rank < size(); ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
    for (int64_t i = 0; i < bytes[rank]; ++i) {
      ASSERT_EQ(recv[rank][i], PatternByte(rank, i))
          << "rank " << rank << " byte " << i;
    }
  }
}

TEST_P(GlooCollectivesTest, BroadcastFromTheLastRank) {
  const int root = size() - 1;
  constexpr int64_t kBytes = 100003;
  std::vector<std::vector<uint8_t>> buffers(size());
  for (int rank = 0; rank < size(); ++rank) {
    buffers[rank] = rank == root ? Pattern(root, kBytes)
                                 : std::vector<uint8_t>(kBytes, 0xEE);
  }
  std::vector<absl::Status> status(size());
  RunOnRanks(size(), [&](int rank) {
    status[rank] = comms_[rank]->Broadcast(buffers[rank].data(), kBytes, root,
                                           Options(11));
  });
  for (int rank = 0; rank < size(); ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
    for (int64_t i = 0; i < kBytes; ++i) {
      ASSERT_EQ(buffers[rank][i], PatternByte(root, i))
          << "rank " << rank << " byte " << i;
    }
  }
}

TEST_P(GlooCollectivesTest, BarrierHoldsEveryRankUntilAllArrive) {
  std::atomic<int> arrived{0};
  std::vector<int> seen_on_exit(size(), -1);
  std::vector<absl::Status> status(size());
  RunOnRanks(size(), [&](int rank) {
    // Later ranks arrive later; nobody may leave before the last one came.
    absl::SleepFor(absl::Milliseconds(40 * rank));
    ++arrived;
    status[rank] = comms_[rank]->Barrier(Options(12));
    seen_on_exit[rank] = arrived.load();
  });
  for (int rank = 0; rank < size(); ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
    EXPECT_EQ(seen_on_exit[rank], size()) << "rank " << rank;
  }
}

TEST_P(GlooCollectivesTest, ManyOperationsInSequence) {
  constexpr int kRounds = 20;
  std::vector<absl::Status> status(size());
  std::vector<int> wrong(size(), 0);
  RunOnRanks(size(), [&](int rank) {
    for (int round = 0; round < kRounds && status[rank].ok(); ++round) {
      const int root = round % size();
      std::vector<uint8_t> buffer =
          rank == root ? Pattern(round, 257) : std::vector<uint8_t>(257, 0);
      status[rank] = comms_[rank]->Broadcast(buffer.data(), 257, root,
                                             Options(100 + round));
      if (buffer != Pattern(round, 257)) ++wrong[rank];
    }
  });
  for (int rank = 0; rank < size(); ++rank) {
    EXPECT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
    EXPECT_EQ(wrong[rank], 0) << "rank " << rank;
  }
}

TEST_P(GlooCollectivesTest, BadSizesAreRefusedWithoutBreakingTheCommunicator) {
  std::vector<absl::Status> refused(size()), after(size());
  RunOnRanks(size(), [&](int rank) {
    std::vector<uint8_t> send(4), recv(4 * size());
    // Wrong number of counts: refused before anything is sent.
    refused[rank] =
        comms_[rank]->AllGatherV(send.data(), 4, recv.data(), {4}, Options(13));
    after[rank] =
        comms_[rank]->AllGatherV(send.data(), 4, recv.data(),
                                 std::vector<int64_t>(size(), 4), Options(14));
  });
  for (int rank = 0; rank < size(); ++rank) {
    EXPECT_EQ(refused[rank].code(), absl::StatusCode::kInvalidArgument)
        << "rank " << rank << ": " << refused[rank];
    EXPECT_TRUE(after[rank].ok()) << "rank " << rank << ": " << after[rank];
  }
}

INSTANTIATE_TEST_SUITE_P(
    StoresAndSizes, GlooCollectivesTest,
    ::testing::Combine(::testing::Values(StoreKind::kInMemory,
                                         StoreKind::kGrpc),
                       ::testing::Values(2, 3, 4)),
    [](const ::testing::TestParamInfo<std::tuple<StoreKind, int>>& info) {
      return absl::StrCat(std::get<0>(info.param) == StoreKind::kGrpc
                              ? "GrpcStore"
                              : "HashStore",
                          std::get<1>(info.param), "Ranks");
    });

// Failures ---------------------------------------------------------------

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
