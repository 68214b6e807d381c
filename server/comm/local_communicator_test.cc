#include "server/comm/local_communicator.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "server/testing/comm_patterns.h"

namespace summon::server {
namespace {

const CollectiveOptions kOptions{/*tag=*/1, /*timeout=*/absl::Seconds(1)};

TEST(LocalCommunicatorTest, IsRankZeroOfOne) {
  LocalCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
}

TEST(LocalCommunicatorTest, AllGatherVCopiesTheOnlyContribution) {
  LocalCommunicator comm;
  const std::vector<uint8_t> send = Pattern(0, 1000);
  std::vector<uint8_t> recv(1000, 0);
  ASSERT_TRUE(
      comm.AllGatherV(send.data(), 1000, recv.data(), {1000}, kOptions).ok());
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(recv[i], PatternByte(0, i)) << "byte " << i;
  }
}

TEST(LocalCommunicatorTest, AllGatherVInPlaceKeepsTheBytes) {
  LocalCommunicator comm;
  std::vector<uint8_t> buffer = Pattern(0, 64);
  ASSERT_TRUE(
      comm.AllGatherV(buffer.data(), 64, buffer.data(), {64}, kOptions).ok());
  EXPECT_EQ(buffer, Pattern(0, 64));
}

// The base class's AllGatherAt (packed, AllGatherV, unpacked): the only
// slot keeps its bytes, the bytes around it stay; a bad part is refused.
TEST(LocalCommunicatorTest, AllGatherAtKeepsTheOnlySlot) {
  LocalCommunicator comm;
  std::vector<uint8_t> buffer(100);
  for (size_t i = 0; i < buffer.size(); ++i) {
    buffer[i] = static_cast<uint8_t>(i * 7);
  }
  const std::vector<uint8_t> before = buffer;
  EXPECT_TRUE(comm.AllGatherAt(buffer.data(), {10}, {50}, 3, kOptions).ok());
  EXPECT_EQ(buffer, before);
  EXPECT_EQ(comm.AllGatherAt(buffer.data(), {10}, {50}, -1, kOptions).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.AllGatherAt(buffer.data(), {-1}, {50}, 0, kOptions).code(),
            absl::StatusCode::kInvalidArgument);
}

// The base class's AllGatherAtParts: ready(k), then part k, in order; the
// first error from ready ends it.
TEST(LocalCommunicatorTest, AllGatherAtPartsCallsReadyInOrder) {
  LocalCommunicator comm;
  std::vector<uint8_t> buffer(100);
  const std::vector<Communicator::GatherPart> parts = {
      {{10}, {20}}, {{30}, {30}}, {{60}, {0}}};
  std::vector<int> called;
  EXPECT_TRUE(comm.AllGatherAtParts(
                      buffer.data(), parts,
                      [&](int k) {
                        called.push_back(k);
                        buffer[parts[k].offsets[0]] =
                            static_cast<uint8_t>(k + 1);
                        return absl::OkStatus();
                      },
                      kOptions)
                  .ok());
  EXPECT_EQ(called, std::vector<int>({0, 1, 2}));
  EXPECT_EQ(buffer[10], 1);
  EXPECT_EQ(buffer[30], 2);
  called.clear();
  EXPECT_EQ(comm.AllGatherAtParts(
                buffer.data(), parts,
                [&](int k) {
                  called.push_back(k);
                  return k == 1 ? absl::DataLossError("no") : absl::OkStatus();
                },
                kOptions),
            absl::DataLossError("no"));
  EXPECT_EQ(called, std::vector<int>({0, 1}));
}

TEST(LocalCommunicatorTest, AllGatherVOfZeroBytesAcceptsNullBuffers) {
  LocalCommunicator comm;
  EXPECT_TRUE(comm.AllGatherV(nullptr, 0, nullptr, {0}, kOptions).ok());
}

TEST(LocalCommunicatorTest, GatherToRootZeroCopies) {
  LocalCommunicator comm;
  const std::vector<uint8_t> send = Pattern(0, 300);
  std::vector<uint8_t> recv(300, 0);
  ASSERT_TRUE(
      comm.Gather(send.data(), 300, recv.data(), {300}, 0, kOptions).ok());
  EXPECT_EQ(recv, send);
}

TEST(LocalCommunicatorTest, ScatterFromRootZeroCopies) {
  LocalCommunicator comm;
  const std::vector<uint8_t> send = Pattern(0, 300);
  std::vector<uint8_t> recv(300, 0);
  ASSERT_TRUE(
      comm.Scatter(send.data(), {300}, recv.data(), 300, 0, kOptions).ok());
  EXPECT_EQ(recv, send);
}

TEST(LocalCommunicatorTest, BroadcastAndBarrierLeaveBuffersAlone) {
  LocalCommunicator comm;
  std::vector<uint8_t> buffer = Pattern(0, 50);
  ASSERT_TRUE(comm.Broadcast(buffer.data(), 50, 0, kOptions).ok());
  EXPECT_EQ(buffer, Pattern(0, 50));
  EXPECT_TRUE(comm.Barrier(kOptions).ok());
}

TEST(LocalCommunicatorTest, InconsistentArgumentsAreInvalid) {
  LocalCommunicator comm;
  std::vector<uint8_t> a(8), b(8);
  // One count per rank.
  EXPECT_EQ(comm.AllGatherV(a.data(), 8, b.data(), {8, 0}, kOptions).code(),
            absl::StatusCode::kInvalidArgument);
  // This rank's count must match what it sends.
  EXPECT_EQ(comm.AllGatherV(a.data(), 4, b.data(), {8}, kOptions).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Gather(a.data(), -1, b.data(), {-1}, 0, kOptions).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Gather(a.data(), 8, nullptr, {8}, 0, kOptions).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Scatter(a.data(), {8}, b.data(), 8, 1, kOptions).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Broadcast(nullptr, 8, 0, kOptions).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Barrier({/*tag=*/0, absl::ZeroDuration()}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Barrier({/*tag=*/0, absl::InfiniteDuration()}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LocalCommunicatorTest, EveryOperationAfterAbortIsAborted) {
  LocalCommunicator comm;
  comm.Abort();
  std::vector<uint8_t> a(8), b(8);
  EXPECT_EQ(comm.AllGatherV(a.data(), 8, b.data(), {8}, kOptions).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(comm.Gather(a.data(), 8, b.data(), {8}, 0, kOptions).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(comm.Scatter(a.data(), {8}, b.data(), 8, 0, kOptions).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(comm.Broadcast(a.data(), 8, 0, kOptions).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(comm.Barrier(kOptions).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(b, std::vector<uint8_t>(8, 0));
}

}  // namespace
}  // namespace summon::server
