// FSDP2's per-parameter layout (FlatParamLayout::BuildFsdp2) against numbers
// worked out from torch's _init_sharded_param: chunks of ceil(size / G) rows
// of the shard dim, the trailing ones shorter or empty, padded to chunk 0.
#include <vector>

#include "core/layout.h"
#include "core/status_testing.h"
#include "gtest/gtest.h"

namespace summon::core {
namespace {

FlatParamLayout Fsdp2OrDie(const std::vector<FlatParamInput>& params,
                           int group_size) {
  absl::StatusOr<FlatParamLayout> layout =
      FlatParamLayout::BuildFsdp2(params, group_size);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.value_or(FlatParamLayout());
}

// One contiguous run: [intra_start, intra_start + numel) at offset_in_shard.
void ExpectRun(const ShardSlice& slice, int64_t intra_start, int64_t numel,
               int64_t offset_in_shard) {
  ASSERT_TRUE(slice.in_shard);
  EXPECT_EQ(slice.runs, 1);
  EXPECT_EQ(slice.intra_start, intra_start);
  EXPECT_EQ(slice.intra_end, intra_start + numel - 1);
  EXPECT_EQ(slice.numel_in_shard, numel);
  EXPECT_EQ(slice.run_numel, numel);
  EXPECT_EQ(slice.offset_in_shard, offset_in_shard);
}

TEST(Fsdp2LayoutTest, Shape5x3OnTwoRanksSplits3And2Rows) {
  FlatParamLayout layout = Fsdp2OrDie({{"w", {5, 3}, DType::kFloat32}}, 2);
  EXPECT_EQ(layout.kind(), LayoutKind::kFsdp2);
  EXPECT_EQ(layout.chunk_numel(), 9);  // Chunk 0: 3 rows x 3.
  EXPECT_EQ(layout.params()[0].padded_chunk_numel, 9);
  EXPECT_EQ(layout.shard_bytes(), 36);
  ExpectRun(layout.SliceOf(0, 0), 0, 9, 0);
  ExpectRun(layout.SliceOf(0, 1), 9, 6, 0);  // Rows 3, 4; 3 elements padding.
  EXPECT_EQ(layout.LocalShape(0, 1), (Shape{2, 3}));
  EXPECT_EQ(layout.PaddedLocalShape(0, 1), (Shape{3, 3}));
}

TEST(Fsdp2LayoutTest, Shape5x3OnThreeRanksSplits2And2And1Rows) {
  FlatParamLayout layout = Fsdp2OrDie({{"w", {5, 3}, DType::kFloat32}}, 3);
  EXPECT_EQ(layout.chunk_numel(), 6);
  ExpectRun(layout.SliceOf(0, 0), 0, 6, 0);
  ExpectRun(layout.SliceOf(0, 1), 6, 6, 0);
  ExpectRun(layout.SliceOf(0, 2), 12, 3, 0);
  EXPECT_EQ(layout.LocalShape(0, 2), (Shape{1, 3}));
  EXPECT_EQ(layout.PaddedLocalShape(0, 2), (Shape{2, 3}));
}

// torch.chunk(5 rows, 4) gives 3 chunks of 2, 2, 1; _chunk_with_empty adds
// an empty fourth.
TEST(Fsdp2LayoutTest, Shape5x3OnFourRanksLeavesTheLastEmpty) {
  FlatParamLayout layout = Fsdp2OrDie({{"w", {5, 3}, DType::kFloat32}}, 4);
  EXPECT_EQ(layout.chunk_numel(), 6);
  ExpectRun(layout.SliceOf(0, 0), 0, 6, 0);
  ExpectRun(layout.SliceOf(0, 1), 6, 6, 0);
  ExpectRun(layout.SliceOf(0, 2), 12, 3, 0);
  EXPECT_FALSE(layout.SliceOf(0, 3).in_shard);
  EXPECT_EQ(layout.LocalShape(0, 3), (Shape{0, 3}));
  EXPECT_EQ(layout.PaddedLocalShape(0, 3), (Shape{2, 3}));
}

TEST(Fsdp2LayoutTest, Shape3OnFourRanksHasAnEmptyChunk) {
  FlatParamLayout layout = Fsdp2OrDie({{"b", {3}, DType::kFloat32}}, 4);
  EXPECT_EQ(layout.chunk_numel(), 1);
  for (int position = 0; position < 3; ++position) {
    ExpectRun(layout.SliceOf(0, position), position, 1, 0);
  }
  EXPECT_FALSE(layout.SliceOf(0, 3).in_shard);
  EXPECT_EQ(layout.LocalShape(0, 3), (Shape{0}));
}

// Shard(1) of [2, 4] over 2: columns 0-1 and 2-3, one run per row, each
// position's chunk stored as its own [2, 2] row-major block.
TEST(Fsdp2LayoutTest, ShardDim1IsOneRunPerRow) {
  FlatParamLayout layout =
      Fsdp2OrDie({{"w", {2, 4}, DType::kFloat32, /*shard_dim=*/1}}, 2);
  EXPECT_EQ(layout.chunk_numel(), 4);
  for (int position = 0; position < 2; ++position) {
    const ShardSlice slice = layout.SliceOf(0, position);
    ASSERT_TRUE(slice.in_shard);
    EXPECT_EQ(slice.runs, 2);
    EXPECT_EQ(slice.run_numel, 2);
    EXPECT_EQ(slice.run_stride, 4);
    EXPECT_EQ(slice.intra_start, 2 * position);
    EXPECT_EQ(slice.intra_end, 2 * position + 5);
    EXPECT_EQ(slice.numel_in_shard, 4);
    std::vector<std::vector<int64_t>> runs;
    ForEachRun(slice, [&](int64_t intra, int64_t in_shard, int64_t numel) {
      runs.push_back({intra, in_shard, numel});
    });
    EXPECT_EQ(runs, (std::vector<std::vector<int64_t>>{
                        {2 * position, 0, 2}, {2 * position + 4, 2, 2}}));
    EXPECT_EQ(layout.LocalShape(0, position), (Shape{2, 2}));
  }
}

// A unit of mixed parameters: the padded chunks back to back in parameter
// order, every position's unit shard the same 9 + 2 + 4 = 15 elements.
TEST(Fsdp2LayoutTest, MixedUnitConcatenatesPaddedChunks) {
  FlatParamLayout layout =
      Fsdp2OrDie({{"w", {5, 3}, DType::kBFloat16},
                  {"b", {3}, DType::kBFloat16},
                  {"v", {2, 4}, DType::kBFloat16, /*shard_dim=*/1}},
                 2);
  EXPECT_EQ(layout.chunk_numel(), 15);
  EXPECT_EQ(layout.shard_bytes(), 30);
  EXPECT_EQ(layout.unpadded_numel(), 30);  // The all-gather output.
  EXPECT_EQ(layout.params()[1].flat_offset, 9);
  EXPECT_EQ(layout.params()[2].flat_offset, 11);
  ExpectRun(layout.SliceOf(0, 1), 9, 6, 0);
  ExpectRun(layout.SliceOf(1, 0), 0, 2, 9);
  ExpectRun(layout.SliceOf(1, 1), 2, 1, 9);
  const ShardSlice v = layout.SliceOf(2, 1);
  EXPECT_EQ(v.offset_in_shard, 11);
  EXPECT_EQ(v.intra_start, 2);
  EXPECT_EQ(v.runs, 2);
}

TEST(Fsdp2LayoutTest, RefusesWhatTorchRefuses) {
  ExpectStatus(FlatParamLayout::BuildFsdp2(
                   {{"w", {2, 3}, DType::kFloat32, /*shard_dim=*/1}}, 2)
                   .status(),
               absl::StatusCode::kInvalidArgument,
               {"'w'", "uneven sharding on dim 1", "[2, 3]"});
  ExpectStatus(
      FlatParamLayout::BuildFsdp2({{"scale", {}, DType::kFloat32}}, 2)
          .status(),
      absl::StatusCode::kInvalidArgument, {"'scale'", "shard_dim 0"});
  ExpectStatus(FlatParamLayout::BuildFsdp2({{"a", {2}, DType::kFloat32},
                                            {"b", {2}, DType::kFloat16}},
                                           2)
                   .status(),
               absl::StatusCode::kInvalidArgument, {"'b'", "one dtype"});
  ExpectStatus(
      FlatParamLayout::BuildFsdp2({{"w", {1, 1LL << 60}, DType::kFloat32}}, 64)
          .status(),
      absl::StatusCode::kInvalidArgument, {"'w'", "too large"});
}

// Uneven dim-0 chunks are fine (torch pads them); a zero-size parameter owns
// nothing anywhere.
TEST(Fsdp2LayoutTest, ZeroSizeParameterOwnsNothing) {
  FlatParamLayout layout = Fsdp2OrDie(
      {{"e", {0, 4}, DType::kFloat32}, {"b", {3}, DType::kFloat32}}, 2);
  EXPECT_EQ(layout.chunk_numel(), 2);
  EXPECT_FALSE(layout.SliceOf(0, 0).in_shard);
  ExpectRun(layout.SliceOf(1, 1), 2, 1, 0);
}

}  // namespace
}  // namespace summon::core
