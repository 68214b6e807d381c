#include "server/comm/gloo_communicator.h"

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/testing/comm_patterns.h"
#include "server/testing/gloo_test_rendezvous.h"

namespace summon::server {
namespace {

using gloo_testing::kTimeout;
using gloo_testing::Options;
using gloo_testing::StoreKind;
using gloo_testing::TestRendezvous;

// Byte counts with a zero, a one and one large enough to take several
// socket writes.
std::vector<int64_t> UnevenBytes(int size) {
  const std::vector<int64_t> all = {17, 0, 300001, 1};
  return std::vector<int64_t>(all.begin(), all.begin() + size);
}

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

}  // namespace
}  // namespace summon::server
