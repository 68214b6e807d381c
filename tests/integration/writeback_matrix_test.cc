// Writeback persistence end to end: writeback on/off under every strategy,
// rank0_only (reads and writeback from a home rank other than 0) and
// offload_to_cpu, checked with exact seeded values and per-rank checksums.

#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

constexpr int kRanks = 4;
// Bytes of all primary parameters of kBlocksLayout (one logical copy).
constexpr int64_t kBlocksBytes = kBlocksNumel * 4;
// One session copy of all of them, each tensor 64-byte aligned.
const int64_t kBlocksSessionBytes = SessionBufferBytes({40, 10, 25, 5, 15, 35});

// The edits every test below makes: a block weight scaled by -2 and the
// embedding scaled by 3 through its tied alias.
TensorValues Edited(const TensorValues& initial) {
  TensorValues edited = initial;
  edited["layers.0.attn.w"] = Scaled(initial.at("layers.0.attn.w"), -2);
  edited["embed.w"] = Scaled(initial.at("embed.w"), 3);
  return edited;
}

class WritebackTest : public SummondTest {
 protected:
  // Writes Edited() into `session` and checks the session sees it.
  void WriteEdits(const pb::Session& session, const TensorValues& edited) {
    ASSERT_TRUE(WriteFloats(session.id(), "layers.0.attn.w",
                            edited.at("layers.0.attn.w"))
                    .ok());
    ASSERT_TRUE(WriteFloats(session.id(), "head.w", edited.at("embed.w")).ok());
    EXPECT_EQ(Read(session.id(), "layers.0.attn.w"),
              edited.at("layers.0.attn.w"));
    EXPECT_EQ(Read(session.id(), "embed.w"), edited.at("embed.w"));
  }

  // Every rank's shards and a fresh gather hold exactly `expected`.
  void ExpectModelHolds(const std::string& model_name,
                        const TensorValues& expected) {
    const pb::Model model = Describe(model_name);
    EXPECT_EQ(ParamChecksums(Checksum(model_name)),
              ExpectedChecksums(model, expected));
    const pb::Session check = Open(model_name, ReadOnly());
    for (const auto& [fqn, values] : expected) {
      EXPECT_EQ(Read(check.id(), fqn), values) << fqn;
    }
    Close(check.id());
  }
};

class WritebackMatrixTest : public WritebackTest,
                            public ::testing::WithParamInterface<
                                std::tuple<pb::ShardingStrategy, bool>> {};

TEST_P(WritebackMatrixTest, EditsPersistToEveryHolderExactlyWhenWritebackIsOn) {
  const auto [strategy, writeback] = GetParam();
  StartServer(kRanks);
  const pb::Model model = CreateSeeded("m", strategy);
  EXPECT_EQ(model.group_size(),
            strategy == pb::SHARDING_STRATEGY_NO_SHARD ? 1 : kRanks);
  const TensorValues initial = SeededBlocks();
  ASSERT_EQ(ParamChecksums(Checksum("m")), ExpectedChecksums(model, initial));

  pb::SessionOptions options;
  if (!writeback) options.set_writeback(false);
  const pb::Session session = Open("m", options);
  EXPECT_EQ(session.options().writeback(), writeback);
  const TensorValues edited = Edited(initial);
  WriteEdits(session, edited);

  const pb::CloseSessionResponse closed = Close(session.id());
  EXPECT_EQ(closed.written_back(), writeback);
  // Every replica under NO_SHARD; one owner per element otherwise.
  const int64_t replicas =
      strategy == pb::SHARDING_STRATEGY_NO_SHARD ? kRanks : 1;
  EXPECT_EQ(closed.bytes_written(), writeback ? kBlocksBytes * replicas : 0);
  ExpectModelHolds("m", writeback ? edited : initial);
  const pb::Model after = Describe("m");
  for (const pb::Unit& unit : after.units()) {
    EXPECT_EQ(unit.generation(), writeback ? 1u : 0u) << unit.fqn();
  }
}

INSTANTIATE_TEST_SUITE_P(
    StrategyByWriteback, WritebackMatrixTest,
    ::testing::Combine(
        ::testing::Values(pb::SHARDING_STRATEGY_FULL_SHARD,
                          pb::SHARDING_STRATEGY_SHARD_GRAD_OP,
                          pb::SHARDING_STRATEGY_NO_SHARD,
                          pb::SHARDING_STRATEGY_HYBRID_SHARD,
                          pb::SHARDING_STRATEGY_HYBRID_SHARD_ZERO2),
        ::testing::Bool()),
    [](const auto& info) {
      return pb::ShardingStrategy_Name(std::get<0>(info.param)) +
             (std::get<1>(info.param) ? "_writeback" : "_no_writeback");
    });

TEST_F(WritebackTest, Rank0OnlyReadsServeTheSeededValuesFromTheHomeRank) {
  StartServer(kRanks);
  CreateSeeded("m");
  pb::SessionOptions options = ReadOnly();
  options.set_rank0_only(true);
  options.set_home_rank(2);
  const pb::Session session = Open("m", options);
  EXPECT_TRUE(session.options().rank0_only());
  EXPECT_EQ(session.options().home_rank(), 2);
  // One physical copy of the whole model.
  EXPECT_EQ(session.bytes(), kBlocksSessionBytes);
  for (const auto& [fqn, values] : SeededBlocks()) {
    EXPECT_EQ(Read(session.id(), fqn), values) << fqn;
  }
  EXPECT_EQ(Read(session.id(), "head.w"), Seeded("embed.w", 40));
}

TEST_F(WritebackTest, Rank0OnlyWritebackFromHomeRankThreeReachesEveryRank) {
  for (pb::ShardingStrategy strategy :
       {pb::SHARDING_STRATEGY_FULL_SHARD, pb::SHARDING_STRATEGY_NO_SHARD}) {
    StartServer(kRanks);
    CreateSeeded("m", strategy);
    pb::SessionOptions options;
    options.set_rank0_only(true);
    options.set_home_rank(3);
    const pb::Session session = Open("m", options);
    EXPECT_TRUE(session.options().writeback());
    const TensorValues edited = Edited(SeededBlocks());
    WriteEdits(session, edited);
    const pb::CloseSessionResponse closed = Close(session.id());
    EXPECT_TRUE(closed.written_back()) << pb::ShardingStrategy_Name(strategy);
    ExpectModelHolds("m", edited);
    TearDown();
  }
}

TEST_F(WritebackTest, OffloadToCpuUnderNoShardKeepsOneHostCopyAndWritesBack) {
  StartServer(kRanks);
  CreateSeeded("m", pb::SHARDING_STRATEGY_NO_SHARD);
  pb::SessionOptions options;
  options.set_offload_to_cpu(true);
  const pb::Session session = Open("m", options);
  EXPECT_TRUE(session.options().offload_to_cpu());
  // One copy per node, not one per local rank.
  EXPECT_EQ(session.bytes(), kBlocksSessionBytes);
  const TensorValues edited = Edited(SeededBlocks());
  WriteEdits(session, edited);
  EXPECT_EQ(Close(session.id()).bytes_written(), kBlocksBytes * kRanks);
  ExpectModelHolds("m", edited);
}

TEST_F(WritebackTest, OffloadToCpuWithRank0OnlyReadsAndDropsReadOnlyEdits) {
  StartServer(kRanks);
  CreateSeeded("m");
  pb::SessionOptions options = ReadOnly();
  options.set_offload_to_cpu(true);
  options.set_rank0_only(true);
  options.set_home_rank(1);
  const pb::Session session = Open("m", options);
  EXPECT_EQ(session.bytes(), kBlocksSessionBytes);
  const TensorValues initial = SeededBlocks();
  for (const auto& [fqn, values] : initial) {
    EXPECT_EQ(Read(session.id(), fqn), values) << fqn;
  }
  WriteEdits(session, Edited(initial));
  EXPECT_FALSE(Close(session.id()).written_back());
  ExpectModelHolds("m", initial);
}

}  // namespace
}  // namespace summon::tests
