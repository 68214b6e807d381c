// Gathers large enough to run pipelined (NodeRuntime::PipelinedGather: the
// local copy of each part overlapped with the exchange, each part sent as
// soon as it is copied, Communicator::AllGatherAtParts in place) across
// real summond processes, 2 nodes x 2 ranks and 3 nodes x 1 rank: every
// element of a seeded 41 MiB parameter, whose node slots split into 5
// parts cut mid-element, reads back exactly through every node, before and
// after a writeback.

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"
#include "tests/cluster/shared_cluster.h"

namespace summon::tests {
namespace {

// 10,800,012 float32 (43,200,048 bytes): divisible by 3 and 4 ranks, so
// every node's slot lands in its copy in place; 5 parts of 8 MiB or more
// (server/runtime/node_exchange.cc), and a slot's fifths are not whole
// elements.
constexpr int64_t kNumel = int64_t{12} * 900001;
constexpr char kBigLayout[] = R"({"strategy": "FULL_SHARD",
  "units": [{"fqn": "", "params": [
    {"fqn": "big.w", "shape": [10800012], "dtype": "float32"}]}]})";
constexpr uint64_t kEditSeed = 99;

template <typename Topology>
class ClusterPipelinedGatherTest : public SharedClusterTest<Topology> {};

TYPED_TEST_SUITE(ClusterPipelinedGatherTest, ClusterTopologies,
                 ClusterTopologyNames);

// The first byte where `got` differs from `want`, or -1; a readable failure
// where comparing 41 MiB strings would print them.
int64_t FirstDifference(const std::string& got, const std::string& want) {
  if (got.size() != want.size()) return 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

TYPED_TEST(ClusterPipelinedGatherTest, EveryElementArrivesThroughEveryNode) {
  const std::string name = "pipelined";
  const v1::Model model = CreateSeeded(this->node(0), name, kBigLayout,
                                       v1::SHARDING_STRATEGY_FULL_SHARD);
  const std::string seeded =
      SeededBytes("big.w", kNumel, v1::DTYPE_FLOAT32, kSeed);
  const std::string edited =
      SeededBytes("big.w", kNumel, v1::DTYPE_FLOAT32, kEditSeed);
  ASSERT_EQ(static_cast<int64_t>(seeded.size()), kNumel * 4);
  ASSERT_NE(seeded, edited);

  // Writable, then read-only; then, after a writeback through the last
  // node, the edited values.
  const v1::Session writer =
      OpenOk(this->node(this->nodes() - 1), name, v1::SessionOptions());
  for (int reader = 0; reader < this->nodes(); ++reader) {
    EXPECT_EQ(FirstDifference(ReadOk(this->node(reader), writer.id(), "big.w"),
                              seeded),
              -1)
        << "writable session read via node " << reader;
  }
  WriteOk(this->node(0), writer.id(), "big.w", edited);
  const v1::CloseSessionResponse closed = CloseOk(this->node(0), writer.id());
  EXPECT_TRUE(closed.written_back());
  EXPECT_EQ(ParamChecksums(ChecksumOk(this->node(0), name)),
            ExpectedChecksums(model, {{"big.w", edited}}));

  const v1::Session reader_session = OpenOk(this->node(0), name, ReadOnly());
  for (int reader = 0; reader < this->nodes(); ++reader) {
    EXPECT_EQ(
        FirstDifference(
            ReadOk(this->node(reader), reader_session.id(), "big.w"), edited),
        -1)
        << "read-only session after the writeback, read via node " << reader;
  }
  CloseOk(this->node(this->nodes() - 1), reader_session.id());
}

}  // namespace
}  // namespace summon::tests
