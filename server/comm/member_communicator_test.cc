#include "server/comm/member_communicator.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "server/comm/local_communicator.h"

namespace summon::server {
namespace {

// Node 1 of 3 alone in the cluster (nodes 0 and 2 lost): its one-rank
// communicator addressed by node rank.
TEST(MemberCommunicatorTest, AddressesNodesAndRefusesAbsentOnes) {
  MemberCommunicator comm(std::make_unique<LocalCommunicator>(), /*node=*/1,
                          /*nodes=*/3, /*members=*/{1});
  EXPECT_EQ(comm.rank(), 1);
  EXPECT_EQ(comm.size(), 3);
  const std::vector<uint8_t> send = {1, 2, 3, 4};
  std::vector<uint8_t> recv(4, 0);
  ASSERT_TRUE(comm.AllGatherV(send.data(), 4, recv.data(), {0, 4, 0}, {}).ok());
  EXPECT_EQ(recv, send);
  std::vector<uint8_t> scattered(4, 0);
  ASSERT_TRUE(
      comm.Scatter(send.data(), {0, 4, 0}, scattered.data(), 4, 1, {}).ok());
  EXPECT_EQ(scattered, send);

  const absl::Status moves =
      comm.AllGatherV(send.data(), 4, recv.data(), {4, 4, 0}, {});
  EXPECT_EQ(moves.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(moves.message(),
            "node 0 is not in the cluster but the operation moves 4 bytes of "
            "it");
  std::vector<uint8_t> buffer = send;
  const absl::Status root = comm.Broadcast(buffer.data(), 4, /*root=*/2, {});
  EXPECT_EQ(root.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(root.message(), "node 2 is not in the cluster");
}

}  // namespace
}  // namespace summon::server
