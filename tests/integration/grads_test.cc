// with_grads end to end: no gradients, gradients on some ranks only (missing
// slices read as zeros, writeback reaches only ranks that have gradients),
// and with offload_to_cpu and NO_SHARD.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

constexpr int kRanks = 4;
const int64_t kBlocksSessionBytes = SessionBufferBytes({40, 10, 25, 5, 15, 35});

// Seeded gradients of every parameter of kBlocksLayout.
TensorValues SeededGrads() {
  TensorValues grads;
  for (const auto& [fqn, numel] : kBlocksParams) {
    grads[fqn] = Seeded(fqn + ".grad", numel, kGradSeed);
  }
  return grads;
}

// `full` with the elements owned by ranks outside `ranks` set to zero.
TensorValues OnlyOwnedBy(const pb::Model& model, TensorValues full,
                         const std::vector<int>& ranks) {
  for (auto& [fqn, values] : full) {
    for (size_t i = 0; i < values.size(); ++i) {
      const int owner = OwnerOf(model, fqn, static_cast<int64_t>(i));
      bool kept = false;
      for (int rank : ranks) kept = kept || rank == owner;
      if (!kept) values[i] = 0.0f;
    }
  }
  return full;
}

std::vector<float> Iota(size_t n) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i) + 0.5f;
  return values;
}

using GradsTest = SummondTest;

TEST_F(GradsTest, WithGradsOnAModelWithoutGradsHasNoGradientTensors) {
  StartServer(kRanks);
  CreateSeeded("m");
  pb::SessionOptions options = ReadOnly();
  options.set_with_grads(true);
  const pb::Session session = Open("m", options);
  EXPECT_TRUE(session.options().with_grads());
  EXPECT_EQ(session.params_size(), 6);
  EXPECT_EQ(session.grads_size(), 0);
  EXPECT_EQ(session.bytes(), kBlocksSessionBytes);

  pb::ReadTensorRequest read;
  read.set_session_id(session.id());
  read.set_fqn("layers.1.w");
  read.set_grad(true);
  std::string data;
  EXPECT_CODE(ReadRaw(read, &data), NOT_FOUND);
  pb::TensorStatsRequest stats;
  stats.set_session_id(session.id());
  stats.set_grad(true);
  pb::TensorStatsResponse response;
  grpc::ClientContext context;
  EXPECT_CODE(summon_->TensorStats(&context, stats, &response), NOT_FOUND);
  // The parameters are there as usual.
  EXPECT_EQ(Read(session.id(), "layers.1.w"), Seeded("layers.1.w", 35));
}

TEST_F(GradsTest, PartialGradsReadAsZerosWhereTheOwningRankHasNone) {
  StartServer(kRanks);
  const std::vector<int> with_grads = {1, 3};
  const pb::Model model = CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD,
                                       kBlocksLayout, with_grads);
  ASSERT_EQ(model.ranks_size(), kRanks);
  for (const pb::RankState& rank : model.ranks()) {
    EXPECT_EQ(rank.has_grads(), rank.rank() == 1 || rank.rank() == 3);
  }
  pb::SessionOptions options = ReadOnly();
  options.set_with_grads(true);
  const pb::Session session = Open("m", options);
  ASSERT_EQ(session.grads_size(), session.params_size());
  for (int i = 0; i < session.grads_size(); ++i) {
    EXPECT_EQ(session.grads(i).DebugString(), session.params(i).DebugString());
  }
  // Gradients double the copy.
  EXPECT_EQ(session.bytes(), 2 * kBlocksSessionBytes);
  const TensorValues expected = OnlyOwnedBy(model, SeededGrads(), with_grads);
  for (const auto& [fqn, values] : expected) {
    EXPECT_EQ(Read(session.id(), fqn, /*grad=*/true), values) << fqn;
    EXPECT_EQ(Read(session.id(), fqn), Seeded(fqn, values.size())) << fqn;
  }
  EXPECT_EQ(GradChecksums(Checksum("m")),
            ExpectedChecksums(model, SeededGrads(), with_grads));
}

TEST_F(GradsTest, GradWritebackPersistsOnlyToRanksWithGrads) {
  StartServer(kRanks);
  const std::vector<int> with_grads = {1, 3};
  const pb::Model model = CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD,
                                       kBlocksLayout, with_grads);
  pb::SessionOptions options;
  options.set_with_grads(true);
  const pb::Session session = Open("m", options);
  // Every element written, also those whose owner keeps no gradients.
  TensorValues written = SeededGrads();
  written["layers.1.w"] = Iota(35);
  written["embed.w"] = Iota(40);
  ASSERT_TRUE(WriteFloats(session.id(), "layers.1.w", written["layers.1.w"],
                          /*grad=*/true)
                  .ok());
  ASSERT_TRUE(
      WriteFloats(session.id(), "head.w", written["embed.w"], /*grad=*/true)
          .ok());
  EXPECT_EQ(Read(session.id(), "layers.1.w", true), written["layers.1.w"]);
  ASSERT_TRUE(Close(session.id()).written_back());

  const pb::ModelChecksumResponse sums = Checksum("m");
  EXPECT_EQ(GradChecksums(sums), ExpectedChecksums(model, written, with_grads));
  // Parameters were written back unchanged.
  EXPECT_EQ(ParamChecksums(sums), ExpectedChecksums(model, SeededBlocks()));

  pb::SessionOptions check = ReadOnly();
  check.set_with_grads(true);
  const pb::Session again = Open("m", check);
  const TensorValues expected = OnlyOwnedBy(model, written, with_grads);
  for (const auto& [fqn, values] : expected) {
    EXPECT_EQ(Read(again.id(), fqn, true), values) << fqn;
  }
}

TEST_F(GradsTest, OffloadToCpuWithGradsReadsEveryRanksGradients) {
  StartServer(kRanks);
  CreateSeeded("m", pb::SHARDING_STRATEGY_FULL_SHARD, kBlocksLayout,
               std::vector<int>{});
  pb::SessionOptions options = ReadOnly();
  options.set_with_grads(true);
  options.set_offload_to_cpu(true);
  const pb::Session session = Open("m", options);
  EXPECT_TRUE(session.options().offload_to_cpu());
  EXPECT_TRUE(session.options().with_grads());
  EXPECT_EQ(session.bytes(), 2 * kBlocksSessionBytes);
  for (const auto& [fqn, values] : SeededGrads()) {
    EXPECT_EQ(Read(session.id(), fqn, true), values) << fqn;
  }
}

TEST_F(GradsTest, OffloadToCpuWithGradsUnderNoShardWritesEveryReplica) {
  StartServer(kRanks);
  const pb::Model model = CreateSeeded("m", pb::SHARDING_STRATEGY_NO_SHARD,
                                       kBlocksLayout, std::vector<int>{});
  pb::SessionOptions options = ModuleScope("layers.1");
  options.set_with_grads(true);
  options.set_offload_to_cpu(true);
  const pb::Session session = Open("m", options);
  EXPECT_EQ(session.bytes(), 2 * SessionBufferBytes({35}));
  EXPECT_EQ(Read(session.id(), "layers.1.w", true),
            Seeded("layers.1.w.grad", 35, kGradSeed));
  TensorValues grads = SeededGrads();
  grads["layers.1.w"] = Iota(35);
  ASSERT_TRUE(
      WriteFloats(session.id(), "layers.1.w", grads["layers.1.w"], true).ok());
  const pb::CloseSessionResponse closed = Close(session.id());
  // Params and grads of layers.1.w on all four replicas.
  EXPECT_EQ(closed.bytes_written(), 2 * 4 * 35 * 4);
  EXPECT_EQ(GradChecksums(Checksum("m")), ExpectedChecksums(model, grads));
}

}  // namespace
}  // namespace summon::tests
